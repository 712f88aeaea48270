"""Task-state events: duplicates and reordering are harmless; stale tasks cannot write."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher import wiring
from dispatcher.aws import ecs_events
from dispatcher.aws.dynamodb import open_store
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import JobState
from dispatcher.handlers import on_task_event
from dispatcher.ops.client import JobClient
from dispatcher.ports.store import Fence, JobUpdate, Store
from dispatcher.settings import Config
from dispatcher.stages.rerun import StopResult
from tests.conftest import Aws
from tests.helpers import launched


def _handle(event: dict[str, Any], cfg: Config) -> dict[str, Any]:
    """The task-event handler's work as a dict: ``{"ignored": reason}`` when nothing changed."""
    out = on_task_event(event, cfg.container, wiring.reruns(cfg))
    if isinstance(out, ecs_events.Ignored):
        return {"ignored": out.reason}
    result = out.as_dict()
    if out.result == StopResult.IGNORED:
        result["ignored"] = out.reason
    return result


def _launched(aws: Aws) -> tuple[Store, str, str]:
    store, bundle_id, arn = launched(aws, "ev-job")
    return store, bundle_id, arn


def test_malformed_and_running_events_are_ignored(aws: Aws) -> None:
    cfg = aws.config()
    assert _handle({"detail": {"nope": 1}}, cfg) == {"ignored": "malformed event"}
    _, _, arn = _launched(aws)
    notice = ecs_events.sample_event(arn, last_status="RUNNING", stop_code="TerminationNotice")
    assert _handle(notice, cfg) == {"ignored": "lastStatus RUNNING"}


def test_stop_before_claim_reruns_at_once_and_duplicates_are_ignored(aws: Aws) -> None:
    cfg = aws.config()
    store, bundle_id, arn = _launched(aws)
    stopped = ecs_events.sample_event(arn, stop_code="TaskFailedToStart",
                                  reason="Timeout waiting for network interface provisioning")
    stopped["detail"]["containers"] = []  # how TaskFailedToStart can arrive
    first = _handle(stopped, cfg)
    assert first["stop_class"] == "infrastructure" and first["relaunched"] is True
    bundle = store.get_bundle(bundle_id)
    assert bundle is not None and bundle.state == BundleState.LAUNCHED
    assert bundle.attempt == 2 and bundle.task_arn != arn
    job = store.get_job("ev-job")
    assert job is not None and job.infra_attempts == 1 and job.attempts == 0
    # The same event again, and an older one arriving late: no effect on the new attempt.
    assert "ignored" in _handle(stopped, cfg)
    older = ecs_events.sample_event(arn, stop_code="EssentialContainerExited", exit_code=1,
                                version=1)
    assert "ignored" in _handle(older, cfg)
    after = store.get_bundle(bundle_id)
    assert after is not None and (after.attempt, after.task_arn) == (2, bundle.task_arn)


def test_a_stale_task_cannot_write(aws: Aws) -> None:
    cfg = aws.config()
    store, bundle_id, arn = _launched(aws)
    _handle(ecs_events.sample_event(arn, stop_code="SpotInterruption"), cfg)
    stale = Fence(bundle_id, 1, arn)
    with pytest.raises(ConflictError):
        store.claim(stale)
    with pytest.raises(ConflictError):
        store.heartbeat(stale)
    with pytest.raises(ConflictError):
        store.apply(stale, [JobUpdate("ev-job", JobState.PENDING, JobState.SUCCEEDED,
                                      via=JobState.RUNNING)])
    with pytest.raises(ConflictError):
        store.save_checkpoint(stale, "ev-job", {"step": 1})
    job = store.get_job("ev-job")
    assert job is not None and job.state == JobState.PENDING and job.checkpoint is None


def test_cancel_of_an_unlaunched_job_is_immediate_and_closes_its_bundle(aws: Aws) -> None:
    aws.proxy.inject_runtask_failures(["RESOURCE:MEMORY"])
    client = JobClient()
    client.submit("k", {}, job_id="unlaunched")
    wiring.dispatcher(aws.config(LONGJOBS_LAUNCH_BACKOFF_SECONDS="3600")).tick()
    store = open_store(aws.env["LONGJOBS_TABLE"])
    job = client.cancel("unlaunched")
    assert job.state == JobState.CANCELLED
    assert job.bundle_id
    bundle = store.get_bundle(job.bundle_id)
    assert bundle is not None and bundle.state == BundleState.DONE
    with pytest.raises(Exception, match="already CANCELLED"):
        client.cancel("unlaunched")
    again = client.retry("unlaunched")
    assert again.state == JobState.PENDING and again.bundle_id != job.bundle_id
    assert wiring.dispatcher(aws.config()).tick().due_bundles == 1
