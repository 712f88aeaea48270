"""The Lambda package: what `sam build` copies and builds (the template and the Makefile), and
what the build writes (infra/lambda/lambda_build.py): bytecode the runtime can load from a
read-only file system, without which every cold start compiles the whole import closure again.

The last tests build the real package (the layers from PyPI) with an interpreter of the
runtime's version and import the handlers from it as the runtime would, the team console's
(TeamConsole) with the console's own layer; they are skipped on a machine without one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.integration.locked import normal, runtime_pins

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
HELPER = INFRA / "lambda" / "lambda_build.py"
# Modules loaded from the package (ours and the dependencies) by `import dispatcher.handlers`:
# 301 when this was written (2026-12-01; 340 with boto3, which imports s3transfer); 324 with
# array jobs (2026-12-02: four modules of ours); 331 with dependents' links and n_to_n (three
# more); 340 with the tick's choice of due work, the packing rule retries share with
# admission, cancels' reports and the tasks' cancel requests (2026-12-04: four more); 345 on
# 2026-12-05, with the versions a tick reports, RFC 3339 times, what a payload may hold and
# the store's writes in modules of their own; 351 with schedules' fires judged at admission
# (the fire's rules, its stage and its record: three modules of ours, the schedule port and
# its adapter not among them); 356 with a stopped task's bill settled (the cost rules, their
# stage, the bill's record) and jobs' labels (their rules, their index); 357 on 2026-12-06, the
# operators' reads of the table split from their actions (the same code, one module more:
# the handlers open the whole Store); 358 with tenants (their rules: one module of ours); 362
# with their shares (the rule, the tick's two uses of it, their items in the table); 365 with
# rate limits (the rule, the tick's takes, the buckets in the table); 367 with the console's
# audit records (their rule and the store's trail, which the operators' store writes: the
# handlers open the whole Store); 368 with the tick's launch thread in a module of its own.
# The budget stops a new
# eager import chain (the CLI's, a whole SDK) from slipping into every cold start, not a module
# of the tick's own.
HANDLER_MODULE_BUDGET = 368


def makefile_variable(name: str) -> str:
    match = re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert match, f"the Makefile defines no {name}"
    return match.group(1).strip()


def makefile_builds(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items()
            if r.get("Metadata", {}).get("BuildMethod") == "makefile"}


def build(part: str, artifacts: Path, runtime: str, env: dict[str, str] | None = None,
          extra: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HELPER), part, str(artifacts), "--runtime", runtime,
                           *(["--extra", extra] if extra else [])],
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **(env or {})})


# The team console's layer: this extra of pyproject.toml (the Makefile's build-ConsoleDependencies).
CONSOLE_EXTRA = "console-app"


def extra_pins(extra: str) -> dict[str, str]:
    """What uv.lock pins for ``extra``'s packages and their dependencies, less the runtime
    dependencies' (the base layer's), read from the lock itself, apart from the build's own
    reading of it (uv export)."""
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    packages = {normal(p["name"]): p for p in lock["package"]}
    base = runtime_pins()
    todo = [normal(d["name"]) for d in packages["longjobs"]["optional-dependencies"][extra]]
    pins: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in pins or name in base:
            continue
        pins[name] = packages[name]["version"]
        for dependency in packages[name].get("dependencies", []):
            # A dependency for some platforms only (a marker) is weighed nowhere here: allowed
            # only where the base layer holds it anyway.
            assert "marker" not in dependency or normal(dependency["name"]) in base, (
                name, dependency)
            todo.append(normal(dependency["name"]))
    return pins


def pyc_flags(pyc: Path) -> tuple[bytes, int]:
    """The magic number and the flags word of a .pyc (PEP 552: bit 0 hash-based, bit 1
    check_source)."""
    header = pyc.read_bytes()[:8]
    return header[:4], int.from_bytes(header[4:8], "little")


# ---------------------------------------------------------------------------- what sam copies


def test_every_function_uses_one_dependency_layer(template: dict[str, Any]) -> None:
    """The dependencies are installed once, in the layer: every function takes it from Globals
    and none sets its own code; the team console's function adds the console's layer alone
    (SAM puts Globals' layers before a function's own), the trigger of its Cognito pool none."""
    shared = template["Globals"]["Function"]
    assert shared["Layers"] == [{"Ref": "LambdaDependencies"}]
    for name in ("LambdaDependencies", "ConsoleDependencies"):
        assert template["Resources"][name]["Type"] == "AWS::Serverless::LayerVersion"
    functions = {name: r for name, r in template["Resources"].items()
                 if r["Type"] == "AWS::Serverless::Function"}
    assert sorted(functions) == ["ConsoleFunction", "ConsoleTokenScopesFunction",
                                 "DependentsFunction", "DispatcherFunction", "JobEventsFunction",
                                 "TaskEventFunction"]
    for name, function in functions.items():
        own = [{"Ref": "ConsoleDependencies"}] if name == "ConsoleFunction" else None
        assert function["Properties"].get("Layers") == own, name
        assert "CodeUri" not in function["Properties"]


def test_sam_copies_small_folders_without_venvs_or_tests(template: dict[str, Any]) -> None:
    """sam build copies each resource's CodeUri/ContentUri before it runs make: the project
    root (venvs, .git, tests) took minutes. Each is a small folder of sources."""
    shared = template["Globals"]["Function"]
    layer = template["Resources"]["LambdaDependencies"]["Properties"]
    console = template["Resources"]["ConsoleDependencies"]["Properties"]
    copied = {"functions": INFRA / shared["CodeUri"], "layer": INFRA / layer["ContentUri"],
              "console layer": INFRA / console["ContentUri"]}
    assert copied["functions"].resolve() == ROOT / "dispatcher"
    for what, folder in copied.items():
        assert folder.is_dir(), what
        files = [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        names = {part for p in files for part in p.relative_to(folder).parts}
        assert not {n for n in names if n.startswith((".venv", ".git")) or n == "tests"}, what
        assert sum(p.stat().st_size for p in files) < 5_000_000, what


def test_every_makefile_build_has_its_target(template: dict[str, Any]) -> None:
    """Each resource built by make reads the project's Makefile (ContextPath), which has its
    build-<LogicalId> target."""
    builds = makefile_builds(template)
    assert sorted(builds) == ["ConsoleDependencies", "ConsoleFunction",
                              "ConsoleTokenScopesFunction", "DependentsFunction",
                              "DispatcherFunction", "JobEventsFunction", "LambdaDependencies",
                              "TaskEventFunction"]
    makefile = (ROOT / "Makefile").read_text()
    targets = {t for line in makefile.splitlines() if line.startswith("build-")
               for t in line.split(":")[0].split()}
    for name, resource in builds.items():
        assert (INFRA / resource["Metadata"]["ContextPath"]).resolve() == ROOT, name
        assert f"build-{name}" in targets, name


def test_the_package_is_built_for_the_runtime_the_template_names(template: dict[str, Any]) -> None:
    """One runtime everywhere: the functions', the layer's and the one the build compiles for."""
    runtime = template["Globals"]["Function"]["Runtime"]
    assert makefile_variable("LAMBDA_RUNTIME") == runtime
    for name in ("LambdaDependencies", "ConsoleDependencies"):
        layer = template["Resources"][name]["Properties"]
        assert layer["CompatibleRuntimes"] == [runtime], name
        assert layer["CompatibleArchitectures"] == template["Globals"]["Function"][
            "Architectures"], name
    for name, function in template["Resources"].items():
        if function["Type"] == "AWS::Serverless::Function":
            assert function["Properties"].get("Runtime", runtime) == runtime, name


# ----------------------------------------------------------------------- what the build writes


def host_runtime() -> str:
    return "python{}.{}".format(*sys.version_info[:2])


def test_the_code_is_compiled_to_unchecked_hash_bytecode(tmp_path: Path) -> None:
    """Every module of the package has a .pyc of the compiling interpreter's version, hash-based
    and unchecked (loaded without reading the source), and nothing else: no .pyc a developer's
    run left in the sources (timestamp-based), no other package."""
    result = build("code", tmp_path, host_runtime(), {"LAMBDA_PYTHON": sys.executable})
    assert result.returncode == 0, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["dispatcher"]
    sources = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py"))
    # All of the package but what no handler imports (the CLI, local mode, the test support,
    # the simulation: the "lambda" import contract keeps them out of the handlers' closure).
    left_out = {"cli", "local", "testing", "simulation"}
    expected = sorted(p.relative_to(ROOT) for p in (ROOT / "dispatcher").rglob("*.py")
                      if p.relative_to(ROOT / "dispatcher").parts[0] not in left_out)
    assert sources == expected
    assert not {p.name for p in (tmp_path / "dispatcher").iterdir()} & left_out
    tag = sys.implementation.cache_tag
    pycs = sorted(tmp_path.rglob("*.pyc"))
    assert len(pycs) == len(sources)
    for source in sources:
        pyc = tmp_path / source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        assert pyc_flags(pyc) == (importlib.util.MAGIC_NUMBER, 0b01), pyc
    # The team console's pages and script come with the code: its templates and static files,
    # every one, as they are in the sources.
    console = ROOT / "dispatcher" / "console"
    data = sorted(p.relative_to(console) for folder in ("templates", "static")
                  for p in (console / folder).rglob("*") if p.is_file())
    assert {p.parts[0] for p in data} == {"templates", "static"}
    for path in data:
        copied = tmp_path / "dispatcher" / "console" / path
        assert copied.read_bytes() == (console / path).read_bytes(), path


def test_an_interpreter_of_another_version_is_refused(tmp_path: Path) -> None:
    """Bytecode of another version would be ignored by the runtime: the build fails instead."""
    result = build("code", tmp_path, "python3.9", {"LAMBDA_PYTHON": sys.executable})
    assert result.returncode == 2
    assert f"is Python {sys.version_info[0]}.{sys.version_info[1]}, the runtime is 3.9" \
        in result.stderr
    assert not any(tmp_path.iterdir())


def test_the_build_fails_without_an_interpreter_of_the_runtimes_version(tmp_path: Path) -> None:
    env = {"PATH": str(Path(sys.executable).parent), "PYENV_ROOT": str(tmp_path / "pyenv"),
           "LAMBDA_PYTHON": ""}
    result = build("code", tmp_path / "out", "python3.99", env)
    assert result.returncode == 2
    assert "no Python 3.99 interpreter found" in result.stderr
    assert not (tmp_path / "out" / "dispatcher").exists()


# --------------------------------------------------------------- the package, built for real


def runtime_python(runtime: str) -> str | None:
    """An interpreter of the runtime's version, found as the build finds one."""
    finder = ("import runpy, sys; h = runpy.run_path(sys.argv[1]);"
              "print(h['find_python'](h['runtime_version'](sys.argv[2])))")
    result = subprocess.run([sys.executable, "-c", finder, str(HELPER), runtime],
                            capture_output=True, text=True, timeout=120, check=False)
    return result.stdout.strip() if result.returncode == 0 else None


@pytest.fixture(scope="module")
def package(template: dict[str, Any],
            tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Path]]:
    """The runtime's interpreter and the sys.path the runtime gives the functions: the
    function's code (/var/task), then the layer's python/ (/opt/python); the console layer
    (built here too, beside them) is on the console function's path only (console_path)."""
    runtime = template["Globals"]["Function"]["Runtime"]
    python = runtime_python(runtime)
    if python is None:
        pytest.skip(f"no {runtime} interpreter on this machine")
    root = tmp_path_factory.mktemp("lambda")
    for part, extra in (("layer", None), ("code", None), ("console-layer", CONSOLE_EXTRA)):
        result = build(part.split("-")[-1], root / part, runtime, extra=extra)
        assert result.returncode == 0, result.stderr
    return python, [root / "code", root / "layer" / "python"]


def console_path(package: tuple[str, list[Path]]) -> list[Path]:
    """The console function's sys.path: its layers in the template's order, Globals' first
    (both merge into /opt/python; neither holds a package the other does)."""
    _, (code, layer) = package
    return [code, layer, layer.parents[1] / "console-layer" / "python"]


IMPORT_HANDLERS = """
import json, sys, sysconfig
import dispatcher.handlers
print(json.dumps({"stdlib": [sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")],
                  "modules": {name: [getattr(m, "__file__", None), getattr(m, "__cached__", None)]
                              for name, m in list(sys.modules.items())}}))
"""


def from_the_package(loaded: dict[str, Any], path: list[Path]) -> dict[str, list[str | None]]:
    """The modules a run loaded (``IMPORT_HANDLERS``' report) from ``path``, each with its
    bytecode there; none from outside ``path`` but the standard library."""
    modules: dict[str, list[str | None]] = loaded["modules"]
    dirs = tuple(str(p) + os.sep for p in path)
    ours = {name: files for name, files in modules.items()
            if files[0] and files[0].startswith(dirs)}
    stdlib = tuple(str(Path(p)) + os.sep for p in loaded["stdlib"])
    outside = {name: files[0] for name, files in modules.items()
               if files[0] and not files[0].startswith(dirs + stdlib)}
    assert outside == {}, "taken from outside the package"
    missing = {name for name, (file, cached) in ours.items()
               if file and file.endswith(".py") and not (cached and Path(cached).is_file())}
    assert missing == set(), "no bytecode: compiled at every cold start"
    return ours


def test_the_handlers_import_from_the_package_and_its_bytecode(
        package: tuple[str, list[Path]], tmp_path: Path) -> None:
    """As the runtime does (read-only: -B writes nothing): every module comes from the package
    or the standard library, none without its bytecode, and no more of them than the budget."""
    python, path = package
    result = subprocess.run([python, "-s", "-B", "-c", IMPORT_HANDLERS], cwd=tmp_path,
                            env={"PYTHONPATH": os.pathsep.join(map(str, path)), "PATH": "/usr/bin"},
                            capture_output=True, text=True, timeout=120, check=True)
    ours = from_the_package(json.loads(result.stdout), path)
    assert "dispatcher.handlers" in ours
    assert not {n.split(".")[0] for n in ours} & {"typer", "rich", "moto", "s3transfer"}
    assert len(ours) <= HANDLER_MODULE_BUDGET


def test_the_layer_holds_exactly_what_the_lock_pins(package: tuple[str, list[Path]]) -> None:
    """Built from uv.lock (infra/lambda/lambda_build.py): every distribution in the layer at the
    version the lock pins for the runtime dependencies, and none besides."""
    _, (_, layer) = package
    installed = {}
    for info in layer.glob("*.dist-info"):
        name, version = info.name.removesuffix(".dist-info").split("-", 1)
        installed[normal(name)] = version
    assert installed == runtime_pins()


def test_the_functions_report_the_versions_the_lock_pins(
        package: tuple[str, list[Path]], tmp_path: Path) -> None:
    """What a tick's record says ran it, from the package as the runtime loads it: longjobs's
    version without its distribution's metadata (the code is the folder alone), the libraries'
    from the layer's."""
    python, path = package
    result = subprocess.run(
        [python, "-s", "-B", "-c",
         "import json; from dispatcher import versions; print(json.dumps(versions.running()))"],
        cwd=tmp_path, env={"PYTHONPATH": os.pathsep.join(map(str, path)), "PATH": "/usr/bin"},
        capture_output=True, text=True, timeout=120, check=True)
    pins = runtime_pins()
    from dispatcher.versions import VERSION

    assert json.loads(result.stdout) == {"longjobs": VERSION, "boto3": pins["boto3"],
                                         "botocore": pins["botocore"],
                                         "pynamodb": pins["pynamodb"]}


# ----------------------------------------------------------------------------- the team console


def test_the_console_layer_holds_its_extra_less_the_base_layer(
        package: tuple[str, list[Path]]) -> None:
    """Built from uv.lock with --extra console-app: the extra's packages and their
    dependencies at the lock's versions, and none the base layer already holds (one copy of
    each on the function's path)."""
    *_, console = console_path(package)
    installed = {}
    for info in console.glob("*.dist-info"):
        name, version = info.name.removesuffix(".dist-info").split("-", 1)
        installed[normal(name)] = version
    expected = extra_pins(CONSOLE_EXTRA)
    assert {"starlette", "jinja2", "python-multipart", "mangum"} <= set(expected)
    assert installed == expected
    assert not set(installed) & set(runtime_pins())
    assert not (console / "bin").exists()


def console_handler(template: dict[str, Any]) -> str:
    return str(template["Resources"]["ConsoleFunction"]["Properties"]["Handler"])


IMPORT_CONSOLE = """
import importlib, json, sys, sysconfig
from importlib.resources import files
module, _, attr = sys.argv[1].rpartition(".")
assert callable(getattr(importlib.import_module(module), attr))
pages = files("dispatcher.console")
data = {"shell": (pages / "templates" / "shell.html").is_file(),
        "base": (pages / "templates" / "base.html").is_file(),
        "script": (pages / "static" / "console.js").is_file()}
print(json.dumps({"stdlib": [sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")],
                  "data": data,
                  "modules": {name: [getattr(m, "__file__", None), getattr(m, "__cached__", None)]
                              for name, m in list(sys.modules.items())}}))
"""


def test_the_console_handler_imports_from_its_package_and_layers(
        template: dict[str, Any], package: tuple[str, list[Path]], tmp_path: Path) -> None:
    """As the runtime would load the team console's function: its handler, Starlette, Jinja2
    and Mangum from the package and its two layers with their bytecode, nothing from outside,
    none of the CLI's or the local server's libraries, and the pages' files beside the code."""
    python, _ = package
    path = console_path(package)
    result = subprocess.run([python, "-s", "-B", "-c", IMPORT_CONSOLE, console_handler(template)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            check=False,
                            env={"PYTHONPATH": os.pathsep.join(map(str, path)),
                                 "PATH": "/usr/bin"})
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["data"] == {"shell": True, "base": True, "script": True}
    ours = from_the_package(loaded, path)
    roots = {n.split(".")[0] for n in ours}
    assert {"starlette", "jinja2", "mangum", "dispatcher"} <= roots
    assert not roots & {"typer", "rich", "uvicorn", "moto"}
    console_layer = str(path[-1]) + os.sep
    assert str(ours["starlette"][0]).startswith(console_layer)


def test_the_token_trigger_runs_from_the_code_alone(
        template: dict[str, Any], package: tuple[str, list[Path]], tmp_path: Path) -> None:
    """The Cognito pool's trigger needs no layer: from the function's code alone (no
    /opt/python at all), its handler answers a version 2 event."""
    python, (code, _) = package
    handler = template["Resources"]["ConsoleTokenScopesFunction"]["Properties"]["Handler"]
    run = ("import importlib, json, sys\n"
           "module, _, attr = sys.argv[1].rpartition('.')\n"
           "event = {'request': {'groupConfiguration': {'groupsToOverride': []}},"
           " 'response': {'claimsAndScopeOverrideDetails': None}}\n"
           "print(json.dumps(getattr(importlib.import_module(module), attr)(event, None)))")
    result = subprocess.run([python, "-s", "-B", "-c", run, handler], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False,
                            env={"PYTHONPATH": str(code), "PATH": "/usr/bin"})
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)["response"]["claimsAndScopeOverrideDetails"]
    assert answer == {"accessTokenGeneration": {"scopesToSuppress": ["longjobs/operate"]}}
