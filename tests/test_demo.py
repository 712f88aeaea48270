"""The demo scenario at small settings: its verdict is computed, so assert it."""

from __future__ import annotations

import os

import pytest

from dispatcher.local.demo import run


def test_demo_verdict_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)  # the demo starts its own endpoint
    lines: list[str] = []
    saved = dict(os.environ)
    try:
        ok, verdict = run(small=30, long=1, seed=3, say=lines.append)
    finally:  # local mode exports its settings to the process environment
        os.environ.clear()
        os.environ.update(saved)
    assert verdict == ("demo: 31 jobs, 31 succeeded exactly once, 1 failed as expected, "
                       "1 rejected, 0 lost, 0 duplicate runs"), lines
    assert ok
    assert any(line.startswith("SIGKILL task") for line in lines)
    assert any("longjobs-worker:2" in line for line in lines)
