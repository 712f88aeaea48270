"""The demo scenario at small settings: its verdict is computed, so assert it.

Small settings keep the story whole (a burst held back by admission, bundles, a SIGKILL and its
rerun from a checkpoint, a deploy, poison, malformed, duplicate) in well under a minute.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from dispatcher.local.demo import run
from dispatcher.testing.moto import MotoEndpoint


def _children() -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(os.getpid())],
                         capture_output=True, text=True, check=False).stdout
    return [line for line in out.splitlines() if "job_runner" in line]


def test_demo_verdict_holds(moto_server: MotoEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    # moto's backends are per process: the demo's own endpoint would otherwise start with what
    # an earlier test left in the same-named table (active bundles take the demo's task slots).
    moto_server.reset()
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)  # the demo starts its own endpoint
    lines: list[str] = []
    saved = dict(os.environ)
    try:
        # The timeout only guards against a hang (about 40 s alone, longer beside three other
        # test workers on two cores): the verdict is checked, not how fast it came.
        ok, verdict = run(small=40, long=2, seed=3, max_running=3, bundle_jobs=8, map_size=20,
                          long_seconds=(6, 7), timeout=300, say=lines.append)
    finally:  # local mode exports its settings to the process environment
        os.environ.clear()
        os.environ.update(saved)
    text = "\n".join(lines)
    # 40 small, 2 long, 10 urgent (priority high), 8 reports (a kind limited to 2 at once).
    assert verdict == ("demo: 60 jobs, 60 succeeded exactly once, 1 failed as expected, "
                       "1 rejected, 0 lost, 0 duplicate runs; and an array of 20 children "
                       "with its reduce (the live table counts them, their parent too)"), text
    assert ok, text
    assert any("SIGKILL task" in line for line in lines), text
    # An array of 20 from one message, its flaky child retried, and the reduce after it.
    assert any("mapreduce: 20 of 20 children succeeded once" in line
               and "raised 1 time(s)" in line and "ran 1 time(s)" in line for line in lines), text
    # moto's backends are per process: after other tests the family may already have revisions,
    # so the deploy is "one more than was current", not a fixed number.
    assert any("deploy: registered longjobs-worker:" in line and "was current" in line
               for line in lines), text
    assert "all " in next(line for line in lines if line.strip().startswith("checks")), text
    # Each check by name, and the runs the execution log counts, told apart (the summary
    # wraps its rows at the terminal's width).
    flat = " ".join(text.split())
    assert "held nothing lost" in flat and "held no duplicate runs" in flat, text
    assert ("runs ended: 60 of the 60 jobs sent one by one, 21 of the array's children and its "
            "reduce; 0 job(s) ran twice") in flat, text
    assert not _children(), "the demo left task processes behind"
