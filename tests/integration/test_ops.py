"""Operator surface: `longjobs jobs|stats|dlq` through typer's runner against moto, and the EMF
metrics of a tick and of a task stop.

Jobs reach every state through the production paths: SQS + tick (PENDING/LAUNCHED, REJECTED,
launch failures), fenced runner writes (RUNNING, SUCCEEDED, FAILED, checkpoints), the task-event
handler (a Spot rerun) and the operators' cancel/retry.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from dispatcher.cli.app import app
from dispatcher.domain import task_events
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import StopClass
from dispatcher.handlers import on_task_event
from dispatcher.ops.client import JobClient
from dispatcher.ops.metrics import publish_stop, publish_tick
from dispatcher.stages.rerun import StopOutcome, StopResult
from dispatcher.store import Fence, JobUpdate, Store
from dispatcher.wiring import pipeline
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws
from tests.helpers import client

runner = CliRunner()


def cli(*args: str, code: int = 0) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, (result.output, result.exception)
    return result


def cli_json(*args: str) -> Any:
    return json.loads(cli(*args, "--json").stdout)


def _fence(store: Store, job_id: str) -> Fence:
    job = store.get_job(job_id)
    assert job is not None and job.bundle_id
    bundle = store.get_bundle(job.bundle_id)
    assert bundle is not None and bundle.task_arn
    return Fence(bundle.bundle_id, bundle.attempt, bundle.task_arn)


def _start(store: Store, job_id: str) -> Fence:
    """What the runner does: claim the bundle, record the job's start."""
    fence = _fence(store, job_id)
    store.claim(fence)
    start = {"attempt": 1, "task_arn": fence.task_arn, "task_definition": "longjobs-worker:1",
             "started_at": time.time()}
    store.apply(fence, [JobUpdate(job_id, JobState.PENDING, JobState.RUNNING, attempts_delta=1,
                                  history=[start])])
    return fence


def _finish(store: Store, job_id: str, target: JobState, **extra: Any) -> None:
    fence = _fence(store, job_id)
    store.claim(fence)
    entry = {"attempt": 1, "task_arn": fence.task_arn, "task_definition": "longjobs-worker:1",
             "started_at": time.time() - 5, "ended_at": time.time(), "outcome": str(target),
             "reason": extra.get("reason")}
    store.apply(fence, [JobUpdate(job_id, JobState.PENDING, target, via=JobState.RUNNING,
                                  attempts_delta=1, history=[entry], **extra)],
                bundle_to=BundleState.DONE)


@pytest.fixture
def populated(aws: Aws) -> Store:
    """Jobs in every state, created in three ticks so creation order is known."""
    cfg = aws.config()
    d = pipeline.aws_tick(cfg)
    c = JobClient()
    sqs = client("sqs", aws.proxy.url)
    c.submit_many([{"kind": "resize", "payload": {"n": i, "blob": "x" * 3000 if i == 0 else ""},
                    "job_id": f"old-{i}"} for i in range(2)])
    sqs.send_message(QueueUrl=aws.env["LONGJOBS_QUEUE_URL"], MessageBody="{not json")
    d.tick()
    time.sleep(0.01)  # distinct creation times: the newest-first order is then exact
    c.submit_many([{"kind": "report", "payload": {}, "job_id": j}
                   for j in ("ok-1", "bad-1", "run-1", "spot-1")])
    d.tick()
    store = open_store(aws.env["LONGJOBS_TABLE"])
    _finish(store, "ok-1", JobState.SUCCEEDED, result={"rows": 42})
    _finish(store, "bad-1", JobState.FAILED, error={"type": "ValueError", "message": "boom"},
            reason="permanent error: boom")
    fence = _start(store, "run-1")
    store.save_checkpoint(fence, "run-1", {"done": 7})
    spot = _start(store, "spot-1")
    on_task_event(task_events.sample_event(spot.task_arn, stop_code="SpotInterruption",
                                          reason="Your Spot Task was interrupted."),
                  cfg.container, pipeline.for_aws(cfg).reruns)
    time.sleep(0.01)  # distinct creation times, as above
    aws.proxy.inject_runtask_failures(["RESOURCE:MEMORY"])
    c.submit("resize", {}, job_id="new-1")
    d.tick()  # RunTask refuses it: its bundle waits in PENDING with the reason
    return store


def test_jobs_list_newest_first_with_filters(populated: Store) -> None:
    out = cli_json("jobs", "list")
    assert out["count"] == len(out["jobs"]) == 8
    assert set(out["jobs"][0]) == {"job_id", "state", "kind", "created_at", "updated_at",
                                   "attempts", "max_attempts", "infra_attempts", "bundle_id",
                                   "reason", "waiting_for", "progress", "tenant"}
    created = [j["created_at"] for j in out["jobs"]]
    assert created == sorted(created, reverse=True)
    ids = [j["job_id"] for j in out["jobs"]]
    assert ids[0] == "new-1" and set(ids[-3:]) >= {"old-0", "old-1"}
    states = {j["job_id"]: j["state"] for j in out["jobs"]}
    assert states["ok-1"] == "SUCCEEDED" and states["bad-1"] == "FAILED"
    assert states["run-1"] == "RUNNING" and states["spot-1"] == "PENDING"
    waits = {j["job_id"]: j["waiting_for"] for j in out["jobs"]}
    assert waits["run-1"] is None and waits["ok-1"] is None
    assert waits["spot-1"] is not None and waits["spot-1"]["reason"]
    assert list(states.values()).count("REJECTED") == 1

    failed = cli_json("jobs", "list", "--status", "failed")["jobs"]
    assert [j["job_id"] for j in failed] == ["bad-1"] and failed[0]["reason"]
    resize = cli_json("jobs", "list", "--kind", "resize", "--limit", "2")["jobs"]
    assert len(resize) == 2 and resize[0]["job_id"] == "new-1"
    assert cli_json("jobs", "list", "--since", "1d", "--status", "PENDING")["count"] == 4
    assert cli_json("jobs", "list", "--since", "0s")["count"] == 0

    table = cli("jobs", "list").stdout
    assert "bad-1" in table and "FAILED" in table and "8 job(s)" in table


def test_jobs_show_attempts_payload_and_rejections(populated: Store) -> None:
    spot = cli_json("jobs", "show", "spot-1")
    assert spot["state"] == "PENDING" and spot["infra_attempts"] == 1 and spot["attempts"] == 0
    [attempt] = spot["history"]
    assert attempt["stop_code"] == "SpotInterruption" and attempt["stop_class"] == "infrastructure"
    assert attempt["task_definition"] == "longjobs-worker:1" and attempt["stopped_at"]
    assert spot["bundle"]["attempt"] == 2 and spot["bundle"]["state"] == "LAUNCHED"
    # Its path: made, run, stopped under it (rerun): as many transitions as events published.
    assert [(c["previous"], c["state"]) for c in spot["state_changes"]] == [
        (None, "PENDING"), ("PENDING", "RUNNING"), ("RUNNING", "PENDING")]
    assert spot["sequence"] == 3

    ok = cli_json("jobs", "show", "ok-1")
    assert ok["attempts"] == 1 and ok["max_attempts"] == 3
    assert ok["result"] == {"rows": 42} and ok["history"][0]["outcome"] == "SUCCEEDED"
    run = cli_json("jobs", "show", "run-1")
    assert run["checkpoint"] == {"done": 7} and run["checkpoint_at"]
    big = cli_json("jobs", "show", "old-0")  # --json keeps the whole payload, as an object
    assert big["payload_truncated"] and isinstance(big["payload"], dict)

    rejected = cli_json("jobs", "list", "--status", "REJECTED")["jobs"][0]
    shown = cli_json("jobs", "show", rejected["job_id"])
    assert shown["state"] == "REJECTED" and "not JSON" in shown["reason"]
    assert shown["body"] == "{not json" and shown["history"] == []
    text = cli("jobs", "show", "bad-1").stdout
    assert "boom" in text and "attempts" in text
    assert "path: PENDING " in text and " -> RUNNING " in text and " -> FAILED " in text
    assert "(3 events)" in text


def test_cancel_and_retry_through_the_cli(populated: Store) -> None:
    assert cli("jobs", "cancel", "new-1").stdout.strip() == "new-1: CANCELLED"
    assert "cancel requested" in cli("jobs", "cancel", "run-1").stdout
    retried = cli_json("jobs", "retry", "new-1")
    assert retried["state"] == "PENDING" and retried["bundle_id"]
    result = cli("jobs", "retry", "ok-1", code=2)
    assert result.stdout == "" and result.stderr.startswith("error: ok-1: only FAILED")
    assert "Traceback" not in result.output


def test_stats(populated: Store) -> None:
    s = cli_json("stats")
    assert s["jobs"] == {"PENDING": 4, "RUNNING": 1, "SUCCEEDED": 1, "FAILED": 1,
                         "CANCELLED": 0, "REJECTED": 1}
    # old-0, old-1 launched and never claimed; spot-1 relaunched; run-1 claimed.
    assert s["running_by_revision"] == {"longjobs-worker:1": {"LAUNCHED": 3, "RUNNING": 1}}
    assert s["launch_failures_last_hour"] == {"bundles": 1, "by_reason": {"RESOURCE:MEMORY": 1}}
    assert s["reruns_last_hour"] == {"jobs": 1, "by_stop_class": {"infrastructure": 1}}
    assert s["backlog"] == {"visible": 0, "in_flight": 0, "delayed": 0,
                            "oldest_age_seconds": None, "dead_letters": 0}
    text = cli("stats").stdout
    assert "longjobs-worker:1" in text and "RESOURCE:MEMORY=1" in text
    # The backlog is every priority's queue, not the normal one's alone.
    JobClient().submit_many([{"kind": "k", "payload": {}, "priority": p}
                             for p in ("high", "normal", "low", "low")])
    assert cli_json("stats")["backlog"]["visible"] == 4


def test_dlq_list_and_redrive(aws: Aws) -> None:
    sqs = client("sqs", aws.proxy.url)
    dlq, queue = aws.env["LONGJOBS_DLQ_URL"], aws.env["LONGJOBS_QUEUE_URL"]
    for i in range(12):
        sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(
            {"schema_version": 1, "job_id": f"dead-{i}", "kind": "k", "payload": {}}))
    peek = cli_json("dlq", "list", "--limit", "5")
    assert peek["count"] == 5 and peek["messages"][0]["job_id"].startswith("dead-")
    assert set(peek["messages"][0]) == {"message_id", "sent_at", "receive_count", "job_id",
                                        "kind", "body", "body_truncated"}
    assert "dead-" in cli("dlq", "list").stdout
    assert cli_json("dlq", "redrive", "--limit", "11") == {"moved": 11, "failed": {}}
    assert cli("dlq", "redrive").stdout.strip() == "moved 1 message(s) back to their job queues"
    # An urgent dead letter goes back to the high-priority queue, not behind the normal backlog.
    high = aws.env["LONGJOBS_HIGH_QUEUE_URL"]
    sqs.send_message(QueueUrl=dlq, MessageBody=json.dumps(
        {"schema_version": 1, "job_id": "dead-urgent", "kind": "k", "payload": {},
         "priority": "high"}))
    assert cli_json("dlq", "redrive") == {"moved": 1, "failed": {}}
    got = sqs.receive_message(QueueUrl=high, VisibilityTimeout=0).get("Messages", [])
    assert [json.loads(m["Body"])["job_id"] for m in got] == ["dead-urgent"]
    decision = pipeline.aws_tick(aws.config()).tick()
    assert decision.intake.admitted == 10  # capacity 10; the rest waits in SQS
    assert decision.intake.admitted_by_priority.get("high") == 1  # the urgent one first
    attrs = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["All"])["Attributes"]
    assert int(attrs["ApproximateNumberOfMessages"]) == 0
    assert queue != dlq


def test_errors_are_one_line(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    result = cli("jobs", "show", "no-such-job", code=2)
    assert result.stderr.startswith("error: no-such-job: no such job; ") and result.stdout == ""
    assert "`longjobs jobs list`" in result.stderr and result.stderr.count("\n") == 1
    result = cli("jobs", "list", "--status", "DONE", code=2)
    assert result.stderr.startswith("error: unknown status 'DONE'")
    assert cli("jobs", "list", "--since", "soon", code=2).stderr.count("\n") == 1
    assert cli("jobs", "list", "--since", "800000d", code=2).stderr == (
        "error: --since '800000d' is longer than 100 years\n")
    monkeypatch.setenv("LONGJOBS_DLQ_URL", "")
    assert "LONGJOBS_DLQ_URL is not set" in cli("dlq", "list", code=2).stderr
    monkeypatch.delenv("LONGJOBS_TABLE")
    result = cli("stats", code=2)
    assert result.stderr.startswith("error: invalid configuration: LONGJOBS_TABLE is not set")
    monkeypatch.setenv("LONGJOBS_TABLE", aws.env["LONGJOBS_TABLE"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    for args in (["jobs", "show", "x"], ["stats"]):
        result = cli(*args, code=2)
        assert result.stderr.startswith("error: cannot reach the AWS endpoint"), result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"_aws"')]


def _values(blob: dict[str, Any]) -> dict[str, float]:
    names = [m["Name"] for m in blob["_aws"]["CloudWatchMetrics"][0]["Metrics"]]
    return {n: blob[n][0] for n in names}


def test_tick_emf_carries_the_decision(aws: Aws, capsys: pytest.CaptureFixture[str]) -> None:
    c = JobClient()
    sqs = client("sqs", aws.proxy.url)
    c.submit_many([{"kind": "k", "payload": {}, "job_id": j} for j in ("m1", "m2", "m1")])
    sqs.send_message(QueueUrl=aws.env["LONGJOBS_QUEUE_URL"], MessageBody="[1]")
    aws.proxy.inject_runtask_failures(["RESOURCE:MEMORY because"])
    stages = pipeline.for_aws(aws.config())
    decision = stages.tick.tick()
    capsys.readouterr()
    main = publish_tick(decision, backlog=stages.queue.backlog(), running_tasks=1,
                        namespace="ops-test")
    blobs = _lines(capsys.readouterr().out)
    assert blobs[0] == main and len(blobs) == 3
    cw = main["_aws"]["CloudWatchMetrics"][0]
    assert cw["Namespace"] == "ops-test" and cw["Dimensions"] == [["service", "Queue"]]
    assert main["service"] == "longjobs" and main["Queue"] == "longjobs-jobs"
    values = _values(main)
    assert {k: values[k] for k in ("JobsAdmitted", "JobsRejected", "JobsDeduplicated",
                                   "BundlesLaunched", "LaunchFailures", "RunningTasks",
                                   "Backlog")} == {
        "JobsAdmitted": 2, "JobsRejected": 1, "JobsDeduplicated": 1, "BundlesLaunched": 1,
        "LaunchFailures": 1, "RunningTasks": 1, "Backlog": 0}
    assert values["TickDurationMs"] == decision.elapsed_ms > 0
    assert 0 <= values["DispatchLagSeconds"] == values["OldestMessageAgeSeconds"] < 60
    heartbeat, by_reason = blobs[1], blobs[2]
    assert heartbeat["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
    assert _values(heartbeat) == {"TickCompleted": 1}
    assert by_reason["Reason"] == "RESOURCE:MEMORY" and _values(by_reason) == {
        "LaunchFailures": 1}


def test_stop_emf(capsys: pytest.CaptureFixture[str]) -> None:
    assert publish_stop(StopOutcome(StopResult.IGNORED, "arn", reason="stale event")) == {}
    blob = publish_stop(StopOutcome(StopResult.SETTLED, "arn", "b", StopClass.APPLICATION,
                                    rerun=["a"], failed=["c", "d"], relaunched=True), queue="q")
    assert _lines(capsys.readouterr().out) == [blob]
    cw = blob["_aws"]["CloudWatchMetrics"][0]
    assert cw["Namespace"] == "longjobs"
    assert cw["Dimensions"] == [["service", "Queue", "StopClass"], ["service", "Queue"]]
    assert blob["StopClass"] == "application" and blob["Queue"] == "q"
    assert _values(blob) == {"Reruns": 1, "JobsFailed": 2, "BundlesRerun": 1,
                             "TasksNeverStarted": 0, "SpotFallbacks": 0, "LaunchFailures": 0}
