"""Local mode delivers the job state-change events the stack publishes on AWS: read from the
job table's stream (moto's), turned into events by the publisher's own stage, one JSON line
each (`longjobs local --events FILE`), per job numbered 1, 2, 3... with none missing and the
last one the job's stored state."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dispatcher.domain.job_events import BILLED_DETAIL_TYPE, DETAIL_TYPE
from dispatcher.domain.jobs import JobState
from dispatcher.local.environment import LocalEnv
from dispatcher.local.event_feed import PrintingSink
from dispatcher.ops.client import JobClient
from dispatcher.testing.moto import MotoEndpoint
from dispatcher.wiring.adapters import open_store
from tests.helpers import exits_within, wait_for

ROOT = Path(__file__).resolve().parents[2]


def told(lines: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each job's state-change events, in order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for line in list(lines):
        event = json.loads(line)
        assert event["detail-type"] in (DETAIL_TYPE, BILLED_DETAIL_TYPE)
        if event["detail-type"] == DETAIL_TYPE:
            out.setdefault(event["detail"]["job_id"], []).append(event["detail"])
    return out


def bills(lines: list[str]) -> dict[str, dict[str, Any]]:
    """Each stopped task's bill, by its ARN."""
    events = [json.loads(line) for line in list(lines)]
    return {e["detail"]["task_arn"]: e["detail"] for e in events
            if e["detail-type"] == BILLED_DETAIL_TYPE}


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
        # A job's dollars from its events alone: its seconds on each task (its end event)
        # times that task's rate (the task's bill, once it stopped) are what `jobs show` says.
        ran = told(lines)["ok"][-1]["task_seconds"]
        assert ran and all(s > 0 for s in ran.values())
        wait_for(lambda: set(ran) <= set(bills(lines)), 120, "the bills of ok's tasks")
        cost = client.show("ok").cost
        assert cost is not None and cost.final
        from_events = sum(s * bills(lines)[arn]["rate"] for arn, s in ran.items())
        assert from_events == pytest.approx(cost.dollars, rel=1e-9) and cost.dollars > 0
        assert all(b["bill"]["cpu"] > 0 and b["cost"] > 0 for b in bills(lines).values())
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


def test_longjobs_local_events_writes_them_to_a_file_and_stdout_holds_only_exports(
        tmp_path: Path) -> None:
    """The command as a user runs it: `longjobs local --events FILE > env-file`, a job
    submitted from another process; its events are in FILE, one JSON line each, and stdout
    holds only the export lines, so a shell can `eval` it whole."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LONGJOBS_", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), LONGJOBS_TEST_LOG=str(tmp_path / "executions.jsonl"),
               LONGJOBS_HANDLERS="echo=tests.handlers:echo", POWERTOOLS_LOG_LEVEL="WARNING")
    stderr, feed = tmp_path / "stderr", tmp_path / "events.jsonl"
    with stderr.open("w") as err_file:
        local = subprocess.Popen([sys.executable, "-m", "dispatcher.cli.entry", "local",
                                  "--tick-seconds", "0.5", "--events", str(feed),
                                  "--keep-output"],
                                 env=env, cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=err_file,
                                 stdin=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    try:
        assert local.stdout is not None
        reader = threading.Thread(target=lambda: lines.extend(iter(local.stdout.readline, "")),
                                  daemon=True)
        reader.start()
        wait_for(lambda: any(line.startswith("export LONGJOBS_TASK_FAMILY=") for line in lines),
                 120, "local mode's export lines")
        exports = dict(line.removeprefix("export ").strip().partition("=")[::2]
                       for line in list(lines) if line.startswith("export "))
        subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", "submit", "echo",
                        "--payload", "{}", "--job-id", "cli-1"], env={**env, **exports},
                       cwd=ROOT, check=True, capture_output=True, timeout=60)
        wait_for(lambda: feed.exists() and '"SUCCEEDED"' in feed.read_text(), 120,
                 "the job's last event")
        local.send_signal(signal.SIGINT)
        assert exits_within(local, 120, stderr) == 0
    finally:
        if local.poll() is None:
            local.kill()
    assert lines and all(line.startswith("export ") for line in lines), lines
    kept = Path(next(line for line in lines if line.startswith("export LONGJOBS_LOCAL_LOG="))
                .strip().partition("=")[2])
    try:  # --keep-output: the tasks' output outlives local mode, as it said
        assert kept.is_file() and kept.read_text(), kept
        assert f"the tasks' output stays in {kept}" in stderr.read_text()
    finally:
        shutil.rmtree(kept.parent, ignore_errors=True)
    events = told(feed.read_text().splitlines())
    assert [(e["state"], e["sequence"]) for e in events["cli-1"]] == [
        ("PENDING", 1), ("RUNNING", 2), ("SUCCEEDED", 3)]
