"""The Lambda handlers as Lambda calls them: config from the environment, EMF metrics on stdout."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dispatcher import handlers
from dispatcher.domain import task_events
from dispatcher.ops import metrics
from dispatcher.ops.client import JobClient
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws


def _value(v: Any) -> float:
    return float(v[0] if isinstance(v, list) else v)  # EMF may hold a value or a list


def _emf(out: str) -> list[dict[str, Any]]:
    blobs = []
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            blobs.append(json.loads(line))
    return blobs


class Context:
    def get_remaining_time_in_millis(self) -> int:
        return 50_000


def test_dispatch_handler_ticks_and_publishes_metrics(aws: Aws,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"h{i}"} for i in range(3)])
    result = handlers.dispatch({}, Context())
    assert result["launch"]["bundles_launched"] == 3
    blobs = _emf(capsys.readouterr().out)
    names = {m["Name"] for b in blobs for d in b["_aws"]["CloudWatchMetrics"]
             for m in d["Metrics"]}
    assert {"TickCompleted", "JobsAdmitted", "BundlesLaunched", "RunningTasks"} <= names
    tick = next(b for b in blobs if "JobsAdmitted" in b)
    assert _value(tick["JobsAdmitted"]) == 3
    assert _value(tick["BundlesLaunched"]) == 3
    assert _value(tick["RunningTasks"]) == 3


def test_a_throttled_figure_read_costs_the_figures_not_the_tick(
        aws: Aws, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The backlog is read after the tick's work: a throttle there leaves the launches made and
    the heartbeat published, without the backlog figures."""
    def throttled(queues: object) -> None:  # the tick reads backlogs too: refuse only this read
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}},
                          "GetQueueAttributes")

    monkeypatch.setattr(metrics, "backlogs_by_priority", throttled)
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"t{i}"} for i in range(2)])
    result = handlers.dispatch({}, Context())
    assert result["launch"]["bundles_launched"] == 2
    captured = capsys.readouterr()
    names = {m["Name"] for b in _emf(captured.out) for d in b["_aws"]["CloudWatchMetrics"]
             for m in d["Metrics"]}
    assert {"TickCompleted", "BundlesLaunched"} <= names
    assert "Backlog" not in names
    assert "tick figures not read" in caplog.text


def test_task_event_handler_reruns_and_publishes(aws: Aws,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    JobClient().submit("k", {}, job_id="spot")
    handlers.dispatch({}, Context())
    job = open_store(aws.env["LONGJOBS_TABLE"]).get_job("spot")
    assert job is not None and job.bundle_id
    bundle = open_store(aws.env["LONGJOBS_TABLE"]).get_bundle(job.bundle_id)
    assert bundle is not None and bundle.task_arn
    capsys.readouterr()
    spot = task_events.sample_event(bundle.task_arn, stop_code="SpotInterruption")
    out = handlers.task_event(spot, None)
    assert out["stop_class"] == "infrastructure" and out["relaunched"] is True
    blobs = _emf(capsys.readouterr().out)
    assert any("Reruns" in b and _value(b["Reruns"]) == 1
               and b.get("StopClass") == "infrastructure" for b in blobs)


def test_missing_configuration_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LONGJOBS_QUEUE_URL", raising=False)
    with pytest.raises(Exception, match="LONGJOBS_QUEUE_URL is not set"):
        handlers.dispatch({}, None)


def test_a_normally_finished_task_reports_its_results(aws: Aws,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from dispatcher.domain.bundles import BundleState
    from dispatcher.domain.jobs import JobState
    from dispatcher.store import Fence, JobUpdate
    from tests.helpers import launched

    store, bundle_id, arn = launched(aws, "fine")
    fence = Fence(bundle_id, 1, arn)
    store.claim(fence)
    store.apply(fence, [JobUpdate("fine", JobState.PENDING, JobState.SUCCEEDED,
                                  via=JobState.RUNNING, attempts_delta=1, result={"ok": 1})],
                bundle_to=BundleState.DONE)
    capsys.readouterr()
    out = handlers.task_event(task_events.sample_event(arn, stop_code="EssentialContainerExited",
                                                  exit_code=0), None)
    assert out["finished"] == {"succeeded": 1, "failed": 0} and out["failed"] == []
    blob = next(b for b in _emf(capsys.readouterr().out) if "JobsSucceeded" in b)
    assert _value(blob["JobsSucceeded"]) == 1 and _value(blob["JobsFailed"]) == 0
