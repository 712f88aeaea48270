"""Reconciliation: lost events and stuck tasks are found by asking ECS, every tick.

In-process on the twins: the launcher twin plays ECS (DescribeTasks, StopTask)."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import LastStatus
from dispatcher.ports.launcher import TaskStatus
from dispatcher.stages.reconcile import TIMEOUT_MARGIN_SECONDS
from dispatcher.stages.rerun import StopOutcome, StopResult
from dispatcher.store import Fence, JobUpdate
from tests.twins import Twins


def _task_status(twins: Twins, arn: str) -> LastStatus:
    (status,) = twins.launcher.describe([arn])
    return status.last_status


def test_lost_stop_event_is_found_and_the_bundle_rerun(twins: Twins) -> None:
    bundle_id, arn = twins.launched("rc-job")
    twins.launcher.stop(arn, "host failure")  # StopTask; its event never arrives
    decision = twins.stages(LONGJOBS_START_TIMEOUT_SECONDS="0").tick.tick()
    assert decision.reconcile.stopped_found == 1
    bundle = twins.bundle(bundle_id)
    assert bundle is not None and bundle.state == BundleState.LAUNCHED
    assert bundle.attempt == 2 and bundle.task_arn != arn
    assert bundle.task_arn in twins.launcher.running()
    job = twins.job("rc-job")
    assert job is not None and job.infra_attempts == 1 and job.attempts == 0


def test_a_task_that_stopped_heartbeating_is_stopped_and_rerun(twins: Twins) -> None:
    bundle_id, arn = twins.launched("rc-job")
    fence = Fence(bundle_id, 1, arn)
    twins.store.claim(fence)  # as its runner would, then it hangs: no more heartbeats
    twins.store.apply(fence, [JobUpdate("rc-job", JobState.PENDING, JobState.RUNNING,
                                        attempts_delta=1, history=[{"task_arn": arn}])])
    twins.clock.advance(1)  # many heartbeat periods of 1 ms
    stages = twins.stages(LONGJOBS_HEARTBEAT_SECONDS="0.001")
    decision = stages.tick.tick()
    assert decision.reconcile.stuck_stopped == 1
    assert _task_status(twins, arn) == LastStatus.STOPPED
    assert [a for a, _ in twins.launcher.stops] == [arn]
    held = twins.bundle(bundle_id)  # not rerun while the old task might still run
    assert held is not None and held.attempt == 1 and held.state == BundleState.RUNNING
    # Its STOPPED event is lost too: the next tick sees the task stopped and reruns.
    assert stages.tick.tick().reconcile.stopped_found == 1
    bundle = twins.bundle(bundle_id)
    assert bundle is not None and bundle.attempt == 2 and bundle.task_arn != arn
    job = twins.job("rc-job")
    assert job is not None and job.state == JobState.PENDING
    assert (job.attempts, job.infra_attempts) == (0, 1)  # not the job's fault
    assert job.history[-1]["stop_class"] == "infrastructure"


def test_healthy_tasks_are_left_alone(twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    twins.launched("rc-job")
    calls: list[list[str]] = []
    describe = twins.launcher.describe

    def counting(task_arns: list[str]) -> list[TaskStatus]:
        calls.append(task_arns)
        return describe(task_arns)

    monkeypatch.setattr(twins.launcher, "describe", counting)
    twins.clock.advance(59)
    decision = twins.stages().tick.tick()  # not yet looked at
    assert decision.reconcile.checked == 0
    assert calls == []  # no DescribeTasks
    twins.clock.advance(540)  # 599 s: looked at, alive, within its start timeout of 600 s
    decision = twins.stages().tick.tick()
    assert decision.reconcile.checked == 1 and len(calls) == 1
    assert decision.reconcile.stopped_found == decision.reconcile.stuck_stopped == 0
    assert twins.launcher.stops == []


def test_a_task_gone_before_its_claim_is_found_a_minute_after_launch(twins: Twins) -> None:
    """Not only after the start timeout (600 s): e.g. a launch recovered after a crashed tick,
    whose tasks gave up waiting for their assignment long before it came."""
    bundle_id, arn = twins.launched("rc-job")
    twins.launcher.stop(arn, "gave up waiting for its assignment")  # its event is lost
    twins.clock.advance(61)
    decision = twins.stages().tick.tick()
    assert decision.reconcile.stopped_found == 1
    bundle = twins.bundle(bundle_id)
    assert bundle is not None and bundle.attempt == 2 and bundle.task_arn != arn


def test_a_job_past_its_timeout_is_failed_and_its_lone_task_stopped(twins: Twins) -> None:
    bundle_id, arn = twins.launched("overdue", timeout_seconds=1)
    fence = Fence(bundle_id, 1, arn)
    twins.store.claim(fence)
    twins.store.apply(fence, [JobUpdate("overdue", JobState.PENDING, JobState.RUNNING,
                                        attempts_delta=1, history=[{"task_arn": arn,
                                                                    "started_at": twins.clock()}])])
    # Past its timeout and the margin (5 s and two 30 s heartbeats); wedged, yet heartbeating.
    twins.clock.advance(1 + TIMEOUT_MARGIN_SECONDS + 2 * 30 + 1)
    twins.store.heartbeat(fence)
    decision = twins.stages(LONGJOBS_HEARTBEAT_SECONDS="30").tick.tick()
    assert decision.reconcile.timed_out == ["overdue"]
    failed = twins.job("overdue")
    assert failed is not None and failed.state == JobState.FAILED
    assert (failed.reason or "").startswith("timed out after 1 s")
    assert _task_status(twins, arn) == LastStatus.STOPPED


def test_an_ignored_reconciled_stop_frees_no_capacity(twins: Twins,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped task whose stop changes nothing (stale: its bundle moved
    on meanwhile) must not count as a freed slot, or admission overshoots the limit."""
    _, arn = twins.launched("held")
    twins.launcher.stop(arn, "host failure")  # its event is lost
    twins.client().submit("k", {}, job_id="waiting")
    stages = twins.stages(LONGJOBS_START_TIMEOUT_SECONDS="0", LONGJOBS_MAX_RUNNING_TASKS="1")
    monkeypatch.setattr(stages.reruns, "on_stop", lambda stop: StopOutcome(
        StopResult.IGNORED, stop.task_arn, reason="stale event: bundle moved on"))
    decision = stages.tick.tick()
    assert decision.reconcile.stopped_found == 1
    assert decision.active_bundles == 1 and decision.capacity == 0
    assert decision.intake.admitted == 0 and twins.job("waiting") is None


def test_the_running_jobs_are_read_only_while_a_job_with_a_timeout_may_run(
        twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    """The timeouts' read of the running index (nine partitions) is made only while an active
    bundle holds a job with a timeout (its bundle keeps the smallest): not by an idle tick,
    nor by one whose tasks run no job with a timeout."""
    read: list[str] = []
    query = twins.table.query

    def counted(status_key: str, **kwargs: object) -> object:
        read.append(status_key)
        return query(status_key, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(twins.table, "query", counted)
    stages = twins.stages()
    stages.tick.tick()
    assert not [k for k in read if k.startswith("JOB#RUNNING")]
    twins.launched("busy")
    read.clear()
    stages.tick.tick()
    assert not [k for k in read if k.startswith("JOB#RUNNING")]
    bundle_id, _ = twins.launched("limited", timeout_seconds=600)
    limited = twins.bundle(bundle_id)
    assert limited is not None and limited.timeout_seconds == 600
    read.clear()
    stages.tick.tick()
    assert len([k for k in read if k.startswith("JOB#RUNNING")]) == 9
