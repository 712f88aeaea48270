"""The import graph: the contracts in pyproject.toml hold, they can fail, there is no cycle, and
the Lambda handlers and the console script import only what they need."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

from tests.helpers import modules_loaded_after

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dispatcher", "job_runner")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(cwd),
                                                       "PATH": "/usr/bin:/bin"})


def test_the_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# Imports that break the layering, each with the contract that must report it: the module it is
# added to, the import, and the line lint-imports prints.
BAD_IMPORTS = {
    "runner-imports-the-producer-client": (
        "job_runner/worker.py", "from dispatcher.ops import client",
        "job_runner.worker -> dispatcher.ops.client"),
    "runner-imports-local-mode": (
        "job_runner/worker.py", "from dispatcher.local import local_launcher",
        "job_runner.worker -> dispatcher.local.local_launcher"),
    "metrics-build-their-own-queue": (
        "dispatcher/ops/metrics.py", "from dispatcher.aws import sqs",
        "dispatcher.ops.metrics -> dispatcher.aws.sqs"),
    "lambda-imports-the-dry-run": (
        "dispatcher/handlers.py", "from dispatcher.ops import dryrun",
        "dispatcher.handlers -> dispatcher.ops.dryrun"),
    "domain-imports-the-wiring": (
        "dispatcher/domain/errors.py", "from dispatcher import wiring",
        "dispatcher.domain.errors -> dispatcher.wiring"),
    "lambda-imports-the-cli-toolkit": (
        "dispatcher/handlers.py", "import typer",
        "dispatcher.handlers is not allowed to import typer"),
    "a-stage-imports-an-adapter": (
        "dispatcher/stages/admit.py", "from dispatcher.aws import sqs",
        "dispatcher.stages.admit -> dispatcher.aws.sqs"),
    "a-stage-imports-the-tick": (
        "dispatcher/stages/admit.py", "from dispatcher.stages import tick",
        "dispatcher.stages.admit -> dispatcher.stages.tick"),
    "the-launch-stage-imports-a-stage-above-it": (
        "dispatcher/stages/launch.py", "from dispatcher.stages import recorder",
        "dispatcher.stages.launch -> dispatcher.stages.recorder"),
    "a-port-imports-another": (
        "dispatcher/ports/queue.py", "from dispatcher.ports import launcher",
        "dispatcher.ports.queue -> dispatcher.ports.launcher"),
}


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root)
    return root


@pytest.mark.parametrize("case", sorted(BAD_IMPORTS))
def test_a_layering_import_fails_the_contracts(case: str, project_copy: Path) -> None:
    """A copy of the project with one bad import added fails lint, naming that import."""
    module, line, reported = BAD_IMPORTS[case]
    path = project_copy / module
    before = path.read_text()
    path.write_text(before + f"\n{line}  # noqa\n")
    try:
        result = lint_imports(project_copy)
    finally:
        path.write_text(before)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "BROKEN" in out
    assert reported in out, out


# -- cycles ---------------------------------------------------------------------------------------
def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (or a module that
    imports itself), as ``[a, b, ..., a]``, shortest through the component's first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan; the graphs here are a few hundred modules deep
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    out = []
    for component in sorted(components):
        members, start = set(component), component[0]
        paths = {start: [start]}
        queue = [start]
        while queue:  # breadth first inside the component, back to start
            node = queue.pop(0)
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    out.append([*paths[node], start])
                    queue = []
                    break
                if nxt in members and nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    queue.append(nxt)
    return out


def test_the_cycle_finder_names_a_cycle() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    assert cycles(graph) == [["a", "b", "c", "a"], ["e", "e"]]
    assert cycles({"a": ["b"], "b": []}) == []


@pytest.mark.parametrize("type_checking", [False, True], ids=["runtime", "with-type-checking"])
def test_no_import_cycle(type_checking: bool) -> None:
    """Module-level imports and imports inside functions count; ``if TYPE_CHECKING:`` imports
    count in the second run (a cycle through them is still one module needing the other)."""
    g = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=not type_checking,
                          cache_dir=None)
    graph = {m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


# -- what the deployables import -----------------------------------------------------------------
def test_the_lambda_handlers_import_no_cli_local_mode_or_test_support() -> None:
    loaded = modules_loaded_after("import dispatcher.handlers", ROOT)
    assert "dispatcher.handlers" in loaded
    bad = sorted(m for m in loaded if m.split(".")[0] in ("typer", "rich", "moto", "click")
                 or m.startswith(("dispatcher.cli", "dispatcher.local", "dispatcher.testing")))
    assert bad == []


def test_the_runner_imports_no_stages_or_cli() -> None:
    loaded = modules_loaded_after("import job_runner.worker", ROOT)
    bad = sorted(m for m in loaded if m.split(".")[0] in ("typer", "rich", "moto")
                 or m.startswith(("dispatcher.stages", "dispatcher.cli", "dispatcher.testing")))
    assert bad == []


def run_cli(blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``longjobs ARGS`` as if ``blocked`` were not installed (None in sys.modules makes
    find_spec report it missing and any import of it fail)."""
    code = (f"import sys; sys.modules[{blocked!r}] = None; sys.argv = ['longjobs', *{args!r}]\n"
            "from dispatcher.cli.entry import main; main()")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("blocked", ["typer", "rich"])
def test_longjobs_without_the_cli_extra_says_so_in_one_line(blocked: str) -> None:
    result = run_cli(blocked, "stats")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "longjobs[cli]" in result.stderr
    assert blocked in result.stderr


@pytest.mark.parametrize("command", ["demo", "local"])
def test_local_mode_without_the_local_extra_says_so_in_one_line(command: str) -> None:
    result = run_cli("moto", command)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "longjobs[local]" in result.stderr
    assert f"longjobs {command}" in result.stderr
