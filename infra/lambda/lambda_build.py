"""Builds the Lambda package: `sam build` runs it through the Makefile's `build-*` targets.

Two parts, so that `sam build` installs the dependencies once for all the functions:

- ``layer``: the project's runtime dependencies (pyproject.toml's ``[project] dependencies``,
  no extras: no CLI, no local mode) at the versions uv.lock pins, each wheel checked against
  the lock's hash, in ``ARTIFACTS_DIR/python``, the folder of a layer that Lambda puts on
  ``sys.path`` (``/opt/python``). The layer is shared by every function.
  ``layer --extra NAME``: the layer of one extra (the team console's ``console-app``): the
  extra's packages and their dependencies at the versions uv.lock pins, less every package the
  base layer holds, so that a function given both layers has one copy of each.
- ``code``: the ``dispatcher`` package alone, in ``ARTIFACTS_DIR`` (``/var/task``), without
  the subpackages no handler imports (:data:`NOT_IN_FUNCTIONS`: the CLI, local mode, the test
  support and the simulation, about a third of the package).

Both are compiled to bytecode by an interpreter of the runtime's own version (the template's
``Runtime``). The function's file system is read-only, so a module whose .pyc is missing or
unusable is compiled again at every cold start and the result thrown away. The .pyc files are
*unchecked hash-based* (PEP 552, ``compileall --invalidation-mode unchecked-hash``): the
interpreter loads them without looking at the source (no stat, no hash of it), which is right
for files nobody edits after the build, and it keeps them valid however the zip stores the
sources' modification times (a timestamp-based .pyc compares them with the source's, and zip
keeps times to two seconds). Bytecode of another version is useless (the file name carries the
version tag, ``cpython-312``, and its header the version's magic number), so the build fails
if no interpreter of the runtime's version can be found rather than ship none.

Runs on the host's Python (3.11 or newer), standard library only, with uv (the Makefile's, in
``.venv-uv``, or one on the PATH) to write the lock's list out. Usage::

    python3 infra/lambda/lambda_build.py layer|code ARTIFACTS_DIR --runtime python3.12
    python3 infra/lambda/lambda_build.py layer ARTIFACTS_DIR --runtime python3.12 --extra NAME

``LAMBDA_PYTHON`` names the interpreter to compile with; otherwise ``python3.12`` on the PATH,
``uv python find 3.12``, or a pyenv installation of 3.12 is used.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "dispatcher"
PLATFORM = "manylinux2014_x86_64"  # the template's Architectures: [x86_64]
# Subpackages of ``dispatcher`` that the handlers' import closure never reaches (the import
# contract "lambda" in pyproject.toml keeps it so), left out of the functions' code.
NOT_IN_FUNCTIONS = ("cli", "local", "testing", "simulation")


class BuildError(Exception):
    """The package cannot be built as the runtime needs it; the message says why."""


def runtime_version(runtime: str) -> str:
    """``python3.12`` -> ``3.12``."""
    if not runtime.startswith("python3."):
        raise BuildError(f"not a Python runtime: {runtime!r}")
    return runtime.removeprefix("python")


def interpreter_version(python: str) -> str | None:
    """``major.minor`` of ``python``, or None if it does not run (a pyenv shim of a version that
    is not selected exits with an error)."""
    try:
        result = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60, check=False)
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def candidates(version: str) -> list[str]:
    """Where an interpreter of ``version`` may be, in the order they are tried."""
    found = [shutil.which(f"python{version}") or ""]
    uv = shutil.which("uv") or str(ROOT / ".venv-uv" / "bin" / "uv")
    if Path(uv).is_file():
        result = subprocess.run([uv, "python", "find", "--no-project", version],
                                capture_output=True, text=True, timeout=60, check=False)
        found.append(result.stdout.strip() if result.returncode == 0 else "")
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found += sorted((str(p) for p in pyenv.glob(f"versions/{version}.*/bin/python{version}")),
                    reverse=True)
    return [c for c in found if c]


def find_python(version: str) -> str:
    """An interpreter of ``version`` (``LAMBDA_PYTHON`` if set: then it must be that version)."""
    chosen = os.environ.get("LAMBDA_PYTHON")
    if chosen:
        got = interpreter_version(chosen)
        if got != version:
            raise BuildError(f"LAMBDA_PYTHON={chosen} is Python {got or '(does not run)'}, "
                             f"the runtime is {version}")
        return chosen
    for python in candidates(version):
        if interpreter_version(python) == version:
            return python
    raise BuildError(
        f"no Python {version} interpreter found (the Lambda runtime's version): its bytecode "
        f"must be compiled by it. Install one (`uv python install {version}`, pyenv, or the "
        f"system's python{version}) or set LAMBDA_PYTHON to its path.")


def compile_tree(python: str, root: Path) -> None:
    """Unchecked hash-based .pyc for every module under ``root``, for ``python``'s version."""
    subprocess.run([python, "-m", "compileall", "-q", "-j", "0",
                    "--invalidation-mode", "unchecked-hash", str(root)],
                   check=True, stdout=subprocess.DEVNULL)


def find_uv() -> str:
    """uv: the Makefile's (``.venv-uv``, at its UV_VERSION), else one on the PATH."""
    for uv in (str(ROOT / ".venv-uv" / "bin" / "uv"), shutil.which("uv") or ""):
        if uv and Path(uv).is_file():
            return uv
    raise BuildError("uv not found: the layer is installed from uv.lock, which uv writes out; "
                     "run `make lock` once (it installs the Makefile's uv into .venv-uv) or put "
                     "uv on the PATH")


def export(uv: str, out: Path, *options: str, what: str = "the runtime dependencies") -> Path:
    """uv.lock's pins of the runtime dependencies (and ``options``: an extra, packages left
    out) as a requirements file with the lock's hashes; ``what`` names them in an error."""
    result = subprocess.run([uv, "export", "--project", str(ROOT), "--frozen", "--no-dev",
                             "--no-emit-project", "--no-header", "--format", "requirements-txt",
                             *options, "--output-file", str(out)],
                            capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise BuildError(f"uv export of {what} failed: {result.stderr.strip()}")
    return out


def pinned_names(requirements: Path) -> list[str]:
    """The distributions a requirements file pins (``name==version``, one a line, its hashes
    on the continuation lines)."""
    return [line.split("==", 1)[0].strip() for line in requirements.read_text().splitlines()
            if "==" in line and not line[:1].isspace() and not line.startswith("#")]


def locked_requirements(folder: Path, extra: str | None = None) -> Path:
    """The runtime dependencies (no extras), pinned as uv.lock pins them, with the lock's
    hashes, as a requirements file in ``folder``; with ``extra``, that extra's packages and
    their dependencies instead, less those of the runtime dependencies (the base layer's). A
    lock that no longer matches pyproject.toml is refused (``export --frozen`` would write it
    out as it is)."""
    uv = find_uv()
    check = subprocess.run([uv, "lock", "--check", "--project", str(ROOT)],
                           capture_output=True, text=True, timeout=120, check=False)
    if check.returncode != 0:
        raise BuildError("uv.lock does not match pyproject.toml: run `make lock`, then commit "
                         "uv.lock")
    base = export(uv, folder / "requirements.txt")
    if extra is None:
        return base
    left_out = [option for name in pinned_names(base) for option in ("--no-emit-package", name)]
    extras = export(uv, folder / f"requirements-{extra}.txt", "--extra", extra, *left_out,
                    what=f"the extra {extra!r}")
    if not pinned_names(extras):
        raise BuildError(f"the extra {extra!r} adds no package to the runtime dependencies")
    return extras


def pip(python: str) -> list[str]:
    """A pip to run: the host's, else the runtime interpreter's (a venv made by uv has none)."""
    for candidate in (sys.executable, python):
        if subprocess.run([candidate, "-m", "pip", "--version"], capture_output=True,
                          timeout=60, check=False).returncode == 0:
            return [candidate, "-m", "pip"]
    raise BuildError(f"no pip, neither in {sys.executable} nor in {python}")


def build_layer(artifacts: Path, version: str, python: str, extra: str | None = None) -> None:
    target = artifacts / "python"
    # pip installs wheels for the runtime (version, platform) whatever Python runs it; it would
    # compile for its own version, hence --no-compile and compile_tree afterwards. The lock's
    # list is whole: nothing to resolve (--no-deps), every wheel checked (--require-hashes).
    # An extra's list is whole too: what it leaves out is in the base layer, beside it on the
    # function's sys.path.
    with tempfile.TemporaryDirectory() as scratch:
        requirements = locked_requirements(Path(scratch), extra)
        subprocess.run([*pip(python), "install", "-q", "--no-compile",
                        "--disable-pip-version-check", "--no-warn-conflicts",
                        "--target", str(target), "--platform", PLATFORM, "--implementation",
                        "cp", "--python-version", version, "--only-binary=:all:",
                        "--require-hashes", "--no-deps", "-r", str(requirements)], check=True)
    # Console scripts (pip's --target puts them in bin/) have nothing to run them in Lambda.
    shutil.rmtree(target / "bin", ignore_errors=True)
    compile_tree(python, target)


def build_code(artifacts: Path, python: str) -> None:
    target = artifacts / PACKAGE
    shutil.rmtree(target, ignore_errors=True)
    # The sources only: a developer's __pycache__ holds bytecode of the host's version.
    source = ROOT / PACKAGE

    def left_out(folder: str, names: list[str]) -> set[str]:
        skipped = set(shutil.ignore_patterns("__pycache__", "*.pyc")(folder, names))
        if Path(folder) == source:
            skipped |= set(NOT_IN_FUNCTIONS) & set(names)
        return skipped

    shutil.copytree(source, target, ignore=left_out)
    compile_tree(python, target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["layer", "code"])
    parser.add_argument("artifacts", type=Path, help="ARTIFACTS_DIR, given by sam build")
    parser.add_argument("--runtime", required=True, help="the template's Runtime (python3.12)")
    parser.add_argument("--extra", help="layer only: the layer of this extra of pyproject.toml, "
                                        "less the runtime dependencies (e.g. console-app)")
    args = parser.parse_args(argv)
    if args.extra and args.part != "layer":
        parser.error("--extra builds a layer: it goes with the part layer")
    try:
        version = runtime_version(args.runtime)
        python = find_python(version)
        args.artifacts.mkdir(parents=True, exist_ok=True)
        if args.part == "layer":
            build_layer(args.artifacts, version, python, args.extra)
        else:
            build_code(args.artifacts, python)
    except BuildError as exc:
        print(f"lambda_build: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
