"""Task-state events: duplicates and reordering are harmless; stale tasks cannot write.

In-process on the twins: the handler's parse-and-act (``on_task_event``) on the real stages.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain import task_events
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.handlers import on_task_event
from dispatcher.stages.rerun import StopResult
from dispatcher.store import Fence, JobUpdate
from dispatcher.wiring.pipeline import Stages
from tests.twins import Twins

CONTAINER = "worker"


def _handle(event: dict[str, Any], stages: Stages) -> dict[str, Any]:
    """The task-event handler's work as a dict: ``{"ignored": reason}`` when nothing changed."""
    out = on_task_event(event, CONTAINER, stages.reruns)
    if isinstance(out, task_events.Ignored):
        return {"ignored": out.reason}
    result = out.as_dict()
    if out.result == StopResult.IGNORED:
        result["ignored"] = out.reason
    return result


def test_malformed_and_running_events_are_ignored(twins: Twins) -> None:
    stages = twins.stages()
    assert twins.config().container == CONTAINER
    assert _handle({"detail": {"nope": 1}}, stages) == {"ignored": "malformed event"}
    _, arn = twins.launched("ev-job")
    before = twins.table.snapshot()
    notice = task_events.sample_event(arn, last_status="RUNNING", stop_code="TerminationNotice")
    assert _handle(notice, stages) == {"ignored": "lastStatus RUNNING"}
    assert twins.table.snapshot() == before
    assert len(twins.launcher.requests) == 1


def test_stop_before_claim_reruns_at_once_and_duplicates_are_ignored(twins: Twins) -> None:
    stages = twins.stages()
    bundle_id, arn = twins.launched("ev-job")
    twins.launcher.stop_task(arn, "TaskFailedToStart",
                             "Timeout waiting for network interface provisioning", None)
    stopped = task_events.sample_event(arn, stop_code="TaskFailedToStart",
                                      reason="Timeout waiting for network interface provisioning")
    stopped["detail"]["containers"] = []  # how TaskFailedToStart can arrive
    first = _handle(stopped, stages)
    assert first["stop_class"] == "infrastructure" and first["relaunched"] is True
    bundle = twins.bundle(bundle_id)
    assert bundle is not None and bundle.state == BundleState.LAUNCHED
    assert bundle.attempt == 2 and bundle.task_arn != arn
    assert bundle.task_arn in twins.launcher.running()
    job = twins.job("ev-job")
    assert job is not None and job.infra_attempts == 1 and job.attempts == 0
    # The same event again, and an older one arriving late: no effect on the new attempt.
    assert "ignored" in _handle(stopped, stages)
    older = task_events.sample_event(arn, stop_code="EssentialContainerExited", exit_code=1,
                                    version=1)
    assert "ignored" in _handle(older, stages)
    after = twins.bundle(bundle_id)
    assert after is not None and (after.attempt, after.task_arn) == (2, bundle.task_arn)
    assert len(twins.launcher.tasks) == 2  # one relaunch, not one per event
    job = twins.job("ev-job")
    assert job is not None and (job.infra_attempts, job.attempts) == (1, 0)


def test_a_stale_task_cannot_write(twins: Twins) -> None:
    from dispatcher.store import Fence, JobUpdate

    stages = twins.stages()
    bundle_id, arn = twins.launched("ev-job")
    _handle(task_events.sample_event(arn, stop_code="SpotInterruption"), stages)
    store = twins.store
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
    job = twins.job("ev-job")
    assert job is not None and job.state == JobState.PENDING and job.checkpoint is None
    bundle = twins.bundle(bundle_id)
    assert bundle is not None and bundle.attempt == 2 and bundle.heartbeat_at is None


def test_cancel_of_an_unlaunched_job_is_immediate_and_closes_its_bundle(twins: Twins) -> None:
    twins.launcher.inject_failures(["RESOURCE:MEMORY"])
    client = twins.client()
    client.submit("k", {}, job_id="unlaunched")
    twins.stages(LONGJOBS_LAUNCH_BACKOFF_SECONDS="3600").tick.tick()
    job = client.cancel("unlaunched")
    assert job.state == JobState.CANCELLED
    assert job.bundle_id
    stored = twins.job("unlaunched")
    assert stored is not None and stored.state == JobState.CANCELLED
    bundle = twins.bundle(job.bundle_id)
    assert bundle is not None and bundle.state == BundleState.DONE
    with pytest.raises(Exception, match="already CANCELLED"):
        client.cancel("unlaunched")
    again = client.retry("unlaunched")
    assert again.state == JobState.PENDING and again.bundle_id != job.bundle_id
    assert twins.stages().tick.tick().due_bundles == 1
    assert len(twins.launcher.tasks) == 1


def _second_launch_with(twins: Twins, finished_first: bool) -> tuple[str, str]:
    """A two-job bundle on its second launch (write-through), claimed, whose task then exits
    0 with no job RUNNING; ``finished_first``: its first job was recorded finished by it."""
    twins.client().submit_many([{"kind": "k", "payload": {}, "job_id": j,
                                 "estimated_seconds": 1} for j in ("first", "second")])
    stages = twins.stages()
    stages.tick.tick()
    job = twins.job("first")
    assert job is not None and job.bundle_id
    bundle = twins.bundle(job.bundle_id)
    assert bundle is not None and bundle.task_arn
    twins.store.claim(Fence(bundle.bundle_id, bundle.attempt, bundle.task_arn))
    # Spot takes the first task between jobs, its results buffered: nobody is charged.
    twins.launcher.stop_task(bundle.task_arn, "SpotInterruption", "spot", None)
    stages.reruns.on_stop(TaskStop(bundle.task_arn, "SpotInterruption", "spot", None))
    bundle = twins.bundle(job.bundle_id)
    assert bundle is not None and bundle.attempt == 2 and bundle.task_arn
    fence = Fence(bundle.bundle_id, bundle.attempt, bundle.task_arn)
    twins.store.claim(fence)
    if finished_first:
        twins.store.apply(fence, [JobUpdate("first", JobState.PENDING, JobState.SUCCEEDED,
                                            via=JobState.RUNNING, attempts_delta=1,
                                            history=[{"task_arn": bundle.task_arn}])])
    stages.reruns.on_stop(TaskStop(bundle.task_arn, "EssentialContainerExited",
                                   "Essential container in task exited", 0))
    return bundle.bundle_id, bundle.task_arn


@pytest.mark.parametrize("finished_first", [False, True])
def test_a_later_launch_that_stops_with_no_culprit_costs_a_budget_unless_it_made_progress(
        twins: Twins, finished_first: bool) -> None:
    """Every rerun is bounded: from a bundle's second launch on (every start and result
    written at once), a stop with no job RUNNING charges the first unfinished job's
    infrastructure budget, unless the task recorded progress (a job of the bundle finished
    there), e.g. after a handler it abandoned ended the task."""
    _second_launch_with(twins, finished_first)
    first, second = twins.job("first"), twins.job("second")
    assert first is not None and second is not None and second.state == JobState.PENDING
    assert second.infra_attempts == 0
    if finished_first:
        assert first.state == JobState.SUCCEEDED and first.infra_attempts == 0
    else:
        assert first.state == JobState.PENDING and first.infra_attempts == 1


def test_a_stop_already_settled_is_said_plainly_and_logged_at_debug(
        twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second delivery of a stop the handler settled: nothing to do, said in plain words,
    and at debug (a normal rerun is not news); the first, at info."""
    from dispatcher import handlers

    said: list[tuple[str, str]] = []
    monkeypatch.setattr(handlers.logger, "info", lambda msg, **kw: said.append(("info", msg)))
    monkeypatch.setattr(handlers.logger, "debug",
                        lambda msg, **kw: said.append(("debug", kw["extra"]["reason"])))
    stages = twins.stages()
    _, arn = twins.launched("ev-job")
    twins.launcher.stop_task(arn, "EssentialContainerExited", "killed", 137)
    stopped = task_events.sample_event(arn, stop_code="EssentialContainerExited", exit_code=137)
    _handle(stopped, stages)
    _handle(stopped, stages)
    assert said[0] == ("info", "task stopped")
    level, reason = said[1]
    assert level == "debug" and reason.startswith("already handled: bundle ")
    assert "stale" not in reason
