"""``longjobs top`` against moto through the real adapters (its snapshot, rendering and errors
on the twins are in ``tests/twins/test_top.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from dispatcher.cli.app import app
from dispatcher.wiring import pipeline
from tests.conftest import Aws
from tests.helpers import client

runner = CliRunner()


def _job(job_id: str, kind: str = "resize") -> str:
    """A message as a producer sends it (no estimate: the job runs alone)."""
    return json.dumps({"schema_version": 1, "job_id": job_id, "kind": kind, "payload": {}})


def _cli(*args: str, code: int = 0) -> Any:
    result = runner.invoke(app, ["top", *args])
    assert result.exit_code == code, (result.output, result.exception)
    return result


def test_top_on_moto(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real adapters: every priority's queue, the table and the DLQ from the settings;
    a queue that does not exist is one error line."""
    sqs = client("sqs", aws.proxy.url)
    monkeypatch.delenv("LONGJOBS_LOW_QUEUE_URL", raising=False)  # low shares the normal queue
    monkeypatch.setenv("LONGJOBS_HIGH_QUEUE_URL",
                       aws.env["LONGJOBS_QUEUE_URL"].replace("longjobs-jobs", "nope-high"))
    result = _cli("--once", code=2)
    assert result.stderr.startswith("error: SQS queue ") and "nope-high" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output

    high = sqs.create_queue(QueueName="longjobs-jobs-high")["QueueUrl"]
    monkeypatch.setenv("LONGJOBS_HIGH_QUEUE_URL", high)
    sqs.send_message(QueueUrl=high, MessageBody=_job("h"))
    sqs.send_message(QueueUrl=aws.env["LONGJOBS_QUEUE_URL"], MessageBody=_job("n"))
    pipeline.aws_tick(aws.config(LONGJOBS_HIGH_QUEUE_URL=high,
                                 LONGJOBS_LOW_QUEUE_URL="")).tick()
    sqs.send_message(QueueUrl=high, MessageBody=_job("h2"))
    out = json.loads(_cli("--json").stdout)
    assert out["queues"] == {"high": {"visible": 1, "in_flight": 0, "delayed": 0},
                             "normal": {"visible": 0, "in_flight": 0, "delayed": 0},
                             "low": None}
    assert out["dead_letters"] == 0
    assert out["running_tasks"] == 2 and list(out["tasks_by_revision"]) == [
        "longjobs-worker:1"]
    assert out["admitted"] == {"jobs": 2, "rejected": 0, "by_state": {
        "PENDING": 2, "RUNNING": 0, "SUCCEEDED": 0, "FAILED": 0, "CANCELLED": 0}}
    assert "tasks: 2 running" in _cli("--once").stdout
