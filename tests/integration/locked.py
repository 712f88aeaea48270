"""What uv.lock pins, read from the lock itself (for the tests of what is built from it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def normal(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_pins(lock: Path = ROOT / "uv.lock") -> dict[str, str]:
    """What uv.lock pins for the project's runtime dependencies (no extras): the closure of
    ``[project] dependencies`` through each package's own, read from the lock itself."""
    packages = {normal(p["name"]): p for p in tomllib.loads(lock.read_text())["package"]}
    todo = [normal(d["name"]) for d in packages["longjobs"]["dependencies"]]
    pins: dict[str, str] = {}
    while todo:
        name = todo.pop()
        if name in pins:
            continue
        pins[name] = packages[name]["version"]
        needs = packages[name].get("dependencies", [])
        # None is for some platforms only (a marker): the closure would have to weigh them.
        assert not [d for d in needs if "marker" in d], (name, needs)
        todo += [normal(d["name"]) for d in needs]
    return pins
