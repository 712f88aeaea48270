"""Names are unique: no two classes in dispatcher/ or job_runner/ share a name (nested and private
ones included), and no two of their modules share a file name (``__init__.py``, ``__main__.py``
aside), so a name in a traceback, a log line or a review points at one place."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dispatcher", "job_runner")
PACKAGE_FILES = frozenset({"__init__.py", "__main__.py"})

# Shared names accepted on purpose, each entry exactly the files that share it (none today); an
# entry whose collision is gone fails test_the_allowed_collisions_still_exist, so the list only
# shrinks.
ALLOWED_MODULES: dict[str, frozenset[str]] = {}
ALLOWED_CLASSES: dict[str, frozenset[str]] = {}


def sources(root: Path) -> list[Path]:
    return sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))


def shared_module_names(root: Path) -> dict[str, frozenset[str]]:
    """File name -> the modules that have it, for names held by more than one module."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sources(root):
        if path.name not in PACKAGE_FILES:
            found[path.name].add(path.relative_to(root).as_posix())
    return {name: frozenset(paths) for name, paths in found.items() if len(paths) > 1}


def shared_class_names(root: Path) -> dict[str, frozenset[str]]:
    """Class name -> the modules defining it, for names defined more than once (also twice in
    one module)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sources(root):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(path.relative_to(root).as_posix())
    return {name: frozenset(paths) for name, paths in found.items() if len(paths) > 1}


def collisions(root: Path) -> list[str]:
    """Every shared name not allowed exactly as it is, one readable line each."""
    out = []
    for kind, shared, allowed in (("module", shared_module_names(root), ALLOWED_MODULES),
                                  ("class", shared_class_names(root), ALLOWED_CLASSES)):
        for name, paths in sorted(shared.items()):
            if allowed.get(name) != paths:
                out.append(f"{kind} {name}: {', '.join(sorted(paths))}")
    return out


def test_no_two_classes_or_modules_share_a_name() -> None:
    assert len(sources(ROOT)) > 50, f"no project modules under {ROOT}"  # a wrong ROOT finds none
    found = collisions(ROOT)
    assert found == [], "names used twice (rename one side):\n" + "\n".join(found)


def test_the_allowed_collisions_still_exist() -> None:
    """An allow-list entry whose collision is gone must go too, so the list empties."""
    stale = [f"module {n}" for n, p in ALLOWED_MODULES.items()
             if shared_module_names(ROOT).get(n) != p]
    stale += [f"class {n}" for n, p in ALLOWED_CLASSES.items()
              if shared_class_names(ROOT).get(n) != p]
    assert stale == [], "no longer collide; remove from the allow-list: " + ", ".join(stale)


def test_a_shared_name_is_reported(tmp_path: Path) -> None:
    """A tree with a class defined twice and module names used twice and three times reports
    each, naming the files."""
    def write(relative: str, text: str = "") -> None:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    write("dispatcher/__init__.py")
    write("dispatcher/a/__init__.py")
    write("dispatcher/a/view.py", "class Frame:\n    pass\n")
    write("job_runner/__init__.py")
    write("job_runner/__main__.py")
    write("dispatcher/__main__.py")
    assert collisions(tmp_path) == []

    write("job_runner/view.py", "def f() -> None:\n    class Frame:\n        pass\n")
    for path in ("dispatcher/cli/top.py", "dispatcher/ops/top.py", "job_runner/top.py"):
        write(path)
    assert collisions(tmp_path) == [
        "module top.py: dispatcher/cli/top.py, dispatcher/ops/top.py, job_runner/top.py",
        "module view.py: dispatcher/a/view.py, job_runner/view.py",
        "class Frame: dispatcher/a/view.py, job_runner/view.py",
    ]
