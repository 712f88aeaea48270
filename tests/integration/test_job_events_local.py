"""Local mode delivers the job state-change events the stack publishes on AWS: read from the
job table's stream (moto's), turned into events by the publisher's own stage, one JSON line
each (`longjobs local --events`), per job numbered 1, 2, 3... with none missing and the
last one the job's stored state."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from dispatcher.aws.dynamodb import open_store
from dispatcher.domain.job_events import DETAIL_TYPE
from dispatcher.domain.jobs import JobState
from dispatcher.local.environment import LocalEnv
from dispatcher.local.event_feed import PrintingSink
from dispatcher.ops.client import JobClient
from dispatcher.testing.moto import MotoEndpoint
from tests.helpers import wait_for

ROOT = Path(__file__).resolve().parents[2]


def told(lines: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        event = json.loads(line)
        assert event["detail-type"] == DETAIL_TYPE
        out.setdefault(event["detail"]["job_id"], []).append(event["detail"])
    return out


def test_local_mode_prints_each_jobs_state_changes_in_sequence(
        moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moto_server.reset()
    monkeypatch.setenv("LONGJOBS_TEST_LOG", str(tmp_path / "executions.jsonl"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    monkeypatch.delenv("LONGJOBS_HANDLERS", raising=False)
    saved = dict(os.environ)
    lines: list[str] = []
    env = LocalEnv(endpoint=moto_server.url, tick_seconds=0.5, job_events=PrintingSink(
        lines.append), settings={"LONGJOBS_HANDLERS": "echo=tests.handlers:echo,"
                                 "fail=tests.handlers:fail"})
    try:
        env.start()
        store = open_store(env.cfg.table)
        client = JobClient()
        client.submit("echo", {}, job_id="ok", max_attempts=1)
        client.submit("fail", {}, job_id="bad", max_attempts=1)
        client.submit("echo", {}, job_id="later", not_before=time.time() + 3600)

        def state(job_id: str) -> JobState | None:
            job = store.get_job(job_id)
            return job.state if job else None

        # The timeouts guard against a hang only (test workers share two cores).
        wait_for(lambda: (state("ok"), state("bad"), state("later")) == (
            JobState.SUCCEEDED, JobState.FAILED, JobState.PENDING), 120, "the jobs settled")
        client.cancel("later")  # before it starts: scheduled an hour ahead
        client.retry("later")
        client.retry("bad")
        wait_for(lambda: len(told(lines).get("bad", [])) == 6
                 and len(told(lines).get("later", [])) == 3, 120, "the events of the retries")
    finally:
        env.stop()
        os.environ.clear()
        os.environ.update(saved)
    by_job = told(lines)
    assert {job: [e["state"] for e in events] for job, events in by_job.items()} == {
        "ok": ["PENDING", "RUNNING", "SUCCEEDED"],
        "bad": ["PENDING", "RUNNING", "FAILED", "PENDING", "RUNNING", "FAILED"],
        "later": ["PENDING", "CANCELLED", "PENDING"],
    }
    for events in by_job.values():
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
        assert [e["previous_state"] for e in events] == [None] + [e["state"]
                                                                 for e in events[:-1]]
    assert "poison" in (by_job["bad"][2]["reason"] or "")
