"""`longjobs local` fires schedules as EventBridge Scheduler would on AWS: a schedule made with
`longjobs schedules create` runs its fires' jobs (ids `schedule/NAME/TIME`) in local tasks, and
a `--overlap skip` schedule whose jobs outlast its period skips the fires made while its last
run is live (CANCELLED, with the reason, listed by `schedules show`), never running two at
once. Local mode takes a rate in seconds for this."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import local_mode, wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def local(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    log = tmp_path / "executions.jsonl"
    with local_mode(ROOT, tmp_path, LONGJOBS_TEST_LOG=str(log),
                    LONGJOBS_HANDLERS="spell=tests.handlers:spell") as client_env:
        yield client_env, log


def longjobs(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", *args, "--json"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_local_mode_fires_a_schedule_and_keeps_its_overlap_rule(
        local: tuple[dict[str, str], Path]) -> None:
    env, log = local
    made = longjobs(env, "schedules", "create", "often", "spell", "--rate", "2 seconds",
                    "--payload", '{"seconds": 5}', "--overlap", "skip", "--estimated-seconds",
                    "5")
    assert made["expression"] == "rate(2 seconds)" and made["overlap"] == "skip"

    def fires() -> list[dict[str, Any]]:
        return list(longjobs(env, "schedules", "show", "often")["fires"])

    # A run of 5 s, fires every 2 s: the timeout guards against a hang only.
    wait_for(lambda: sum(f["job_state"] == "SUCCEEDED" for f in fires()) >= 2
             and any(f["outcome"] == "SKIPPED" for f in fires()), 240,
             "two fires run and one skipped")
    longjobs(env, "schedules", "pause", "often")
    shown = fires()
    for fire in shown:
        assert fire["job_id"] == f"schedule/often/{fire['at']}"
        if fire["outcome"] == "SKIPPED":
            assert fire["job_state"] == "CANCELLED"
            assert fire["reason"].startswith("skipped: schedule 'often' skips a fire")
            job = longjobs(env, "jobs", "show", fire["job_id"])
            assert job["state"] == "CANCELLED" and job["reason"] == fire["reason"]
    # The runs, from the handler's own record: never two at once.
    spans: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        spans.setdefault(entry["job_id"], []).append(entry["at"])
    ended = sorted(s for s in spans.values() if len(s) == 2)
    assert len(ended) >= 2
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(ended)), ended
