"""Builds that are the same tomorrow: one lock (uv.lock) for the suite's venv, the Lambda layer
and the worker image. The lock covers every extra and matches pyproject.toml; `make` refuses,
in one line, a lock that does not; the worker image installs the runtime dependencies from the
lock with their hashes, on a base image pinned by digest, and holds the handlers to the same
versions. (The Lambda layer built from the lock is checked against it in test_lambda_package.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.integration.locked import normal, runtime_pins
from tests.integration.test_infra import dockerfile_stages
from tests.integration.test_lambda_package import makefile_variable

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".venv-uv" / "bin" / "uv"
needs_uv = pytest.mark.skipif(not UV.is_file(), reason="no .venv-uv: `make` installs uv there")


def test_the_lock_covers_every_extra_and_make_installs_all_of_them() -> None:
    with (ROOT / "pyproject.toml").open("rb") as f:
        extras = set(tomllib.load(f)["project"]["optional-dependencies"])
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    root = next(p for p in lock["package"] if p["name"] == "longjobs")
    assert set(root["optional-dependencies"]) == extras
    makefile = (ROOT / "Makefile").read_text()
    assert "sync -q --frozen --all-extras" in makefile
    assert re.fullmatch(r"\d+\.\d+\.\d+", makefile_variable("UV_VERSION"))
    assert "uv==$(UV_VERSION)" in makefile


@needs_uv
def test_the_lock_matches_pyproject() -> None:
    done = subprocess.run([str(UV), "lock", "--check", "--project", str(ROOT)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"uv.lock is out of date: run `make lock`\n{done.stderr}"


@needs_uv
def test_make_refuses_a_lock_out_of_date_in_one_line_naming_the_command(
        tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml", "uv.lock", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / ".venv-uv").symlink_to(ROOT / ".venv-uv")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"tenacity>=8.2"', '"tenacity>=8.3"'))
    # As a user runs it, not as a make inside `make test` (MAKELEVEL, MAKEFLAGS).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(["make", "-s", ".venv"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False, env=env)
    assert done.returncode != 0
    said = [line for line in done.stderr.splitlines() if not re.match(r"make(\[\d+\])?:", line)]
    assert said == ["error: uv.lock does not match pyproject.toml: run `make lock`, then "
                    "commit uv.lock"], done.stderr
    assert not (tmp_path / ".venv").exists()  # nothing installed from a lock that is wrong


def test_the_worker_image_starts_from_a_base_pinned_by_digest_with_its_tag() -> None:
    text = (ROOT / "infra" / "worker" / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert base, "the Dockerfile names its base image in ARG BASE_IMAGE"
    assert re.fullmatch(r"python:3\.12\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", base.group(1))
    assert re.search(r"^ARG UV_VERSION=(\S+)$", text, re.MULTILINE).group(1) == \
        makefile_variable("UV_VERSION")  # type: ignore[union-attr]
    build, runtime = dockerfile_stages()
    assert build[0] == "FROM ${BASE_IMAGE} AS build" and runtime[0] == "FROM ${BASE_IMAGE}"


@needs_uv
def test_the_worker_image_installs_exactly_the_locked_runtime_dependencies(
        tmp_path: Path) -> None:
    """Its install step run here as written (its uv export commands, against a copy of the
    project's lock): the list it installs with --require-hashes is the lock's runtime closure,
    every pin with its hashes; longjobs and the handlers resolve nothing past it."""
    build, _ = dockerfile_stages()
    step = next(i for i in build if "uv export" in i)
    assert "COPY pyproject.toml README.md uv.lock ./" in build
    exports = [c.strip() for c in step.split("&&") if "uv export" in c]
    assert len(exports) == 2
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    for command in exports:
        argv = command.replace("/opt/uv/bin/uv", str(UV)).replace("/opt/longjobs/",
                                                                   f"{tmp_path}/").split()
        subprocess.run(argv, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    hashed = (tmp_path / "requirements.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", hashed, re.MULTILINE))
    assert {normal(k): v for k, v in pins.items()} == runtime_pins()
    # Every pin carries its hashes (pip's --require-hashes refuses one that does not).
    assert hashed.count("==") == len(pins) and hashed.count("--hash=sha256:") >= len(pins)
    constraints = (tmp_path / "constraints.txt").read_text()
    assert dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+)$", constraints, re.MULTILINE)) == pins
    assert "pip install --require-hashes --no-deps -r /opt/longjobs/requirements.txt" in step
    assert step.rstrip().endswith("pip install --no-deps .")
    assert any('pip install -c /opt/longjobs/constraints.txt "$HANDLERS"' in i for i in build)
