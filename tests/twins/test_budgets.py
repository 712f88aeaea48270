"""Budgets on the twins: no stop reruns a job past its own budget, and a job that kills a task
running several jobs at once does not spend its bundle-mates' attempts.

Seed 000: "one job that crashes its task must never cost more than its own budget".
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from dispatcher import settings
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import StopCode, TaskStop
from dispatcher.store import Fence, JobUpdate
from dispatcher.store.values import JobOutcomes
from job_runner import JobContext
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins

RUNNER = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
                                  "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                                  "LONGJOBS_ASSIGN_WAIT_SECONDS": "1"})
CRASH = ("EssentialContainerExited", "Essential container in task exited", 137)


def test_a_job_interrupted_again_and_again_fails_when_its_infrastructure_budget_is_spent(
        ) -> None:
    """Each SIGTERM (Spot) gives the attempt back and spends one infrastructure attempt; the
    runner records that itself, so the stop finds the job PENDING, not RUNNING. It must still
    be held to the budget, not rerun forever."""
    tw = Twins()
    stages = tw.stages(LONGJOBS_MAX_INFRA_ATTEMPTS="2")
    bundle_id, arn = tw.launched("j1", estimated_seconds=5000)
    stops = 0
    started = threading.Event()

    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        started.set()
        ctx.wait(30)
        ctx.raise_if_cancelled()

    while True:
        started.clear()
        worker = Worker(RUNNER, tw.store, HandlerRegistry({"k": handler}), arn)
        run = threading.Thread(target=worker.run)
        run.start()
        assert started.wait(30)
        worker.on_sigterm(signal.SIGTERM, None)
        run.join(30)
        stages.reruns.on_stop(TaskStop(arn, StopCode.SPOT_INTERRUPTION,
                                       "Your Spot Task was interrupted.", 0))
        stops += 1
        job = tw.job("j1")
        assert job is not None
        if job.state != JobState.PENDING:
            break
        bundle = tw.bundle(bundle_id)
        assert bundle is not None and bundle.state == BundleState.LAUNCHED and bundle.task_arn
        arn = bundle.task_arn
        assert stops < 10, "rerun past its infrastructure budget"
    assert stops == 3 and job.state == JobState.FAILED  # infrastructure attempts 1, 2, then 3 > 2
    assert job.infra_attempts == 3 and "infrastructure budget spent" in (job.reason or "")


def _running(tw: Twins, bundle_id: str, arn: str, job_ids: list[str]) -> None:
    """As a runner that writes through leaves it: the bundle claimed, these jobs RUNNING."""
    bundle = tw.bundle(bundle_id)
    assert bundle is not None
    fence = Fence(bundle_id, bundle.attempt, arn)
    if bundle.state == BundleState.LAUNCHED:
        tw.store.claim(fence)
    tw.store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.RUNNING, attempts_delta=1,
                                     history=[{"attempt": 1, "task_arn": arn}])
                           for j in job_ids])


def test_a_crash_with_several_jobs_running_charges_no_attempt_and_reruns_serially() -> None:
    tw = Twins()
    stages = tw.stages(LONGJOBS_TASK_CONCURRENCY="3")
    client = tw.client()
    for job_id in ("poison", "mate-1", "mate-2"):
        client.submit("k", {}, job_id=job_id, max_attempts=1, estimated_seconds=1)
    stages.tick.tick()
    (bundle,) = tw.bundles()
    assert bundle.task_arn is not None and sorted(bundle.job_ids) == ["mate-1", "mate-2",
                                                                     "poison"]
    _running(tw, bundle.bundle_id, bundle.task_arn, ["poison", "mate-1", "mate-2"])
    out = stages.reruns.on_stop(TaskStop(bundle.task_arn, *CRASH))
    # One of three ended the process; which cannot be told: none spends its only attempt.
    assert sorted(out.rerun) == ["mate-1", "mate-2", "poison"] and out.failed == []
    for job in tw.jobs():
        assert (job.state, job.attempts, job.infra_attempts) == (JobState.PENDING, 0, 1)
    rerun = tw.bundle(bundle.bundle_id)
    assert rerun is not None and rerun.slots == 1 and rerun.state == BundleState.LAUNCHED
    assert rerun.task_arn is not None
    # Run serially, the next crash names the job that was running: it alone is charged.
    _running(tw, bundle.bundle_id, rerun.task_arn, ["poison"])
    out = stages.reruns.on_stop(TaskStop(rerun.task_arn, *CRASH))
    assert out.failed == ["poison"] and sorted(out.rerun) == ["mate-1", "mate-2"]
    poison, mate = tw.job("poison"), tw.job("mate-1")
    assert poison is not None and poison.state == JobState.FAILED and poison.attempts == 1
    assert mate is not None and (mate.state, mate.attempts, mate.infra_attempts) == (
        JobState.PENDING, 0, 1)


def test_a_crash_with_one_job_running_charges_that_job_and_leaves_the_bundle_parallel() -> None:
    tw = Twins()
    stages = tw.stages(LONGJOBS_TASK_CONCURRENCY="3")
    client = tw.client()
    for job_id in ("poison", "mate"):
        client.submit("k", {}, job_id=job_id, max_attempts=2, estimated_seconds=1)
    stages.tick.tick()
    (bundle,) = tw.bundles()
    assert bundle.task_arn is not None
    # The first launch buffers its writes (a job it records RUNNING may have finished): it
    # dies before recording anything, is charged nobody, and the rerun writes through.
    _running(tw, bundle.bundle_id, bundle.task_arn, [])
    stages.reruns.on_stop(TaskStop(bundle.task_arn, *CRASH))
    rerun = tw.bundle(bundle.bundle_id)
    assert rerun is not None and rerun.attempt == 2 and rerun.task_arn is not None
    _running(tw, bundle.bundle_id, rerun.task_arn, ["poison"])
    out = stages.reruns.on_stop(TaskStop(rerun.task_arn, *CRASH))
    poison = tw.job("poison")
    assert poison is not None and (poison.attempts, poison.infra_attempts) == (1, 0)
    assert sorted(out.rerun) == ["mate", "poison"]
    rerun = tw.bundle(bundle.bundle_id)
    assert rerun is not None and rerun.slots == 0  # nothing ambiguous: it stays parallel


def test_a_redelivered_stop_event_reports_its_jobs_once() -> None:
    """EventBridge and Lambda's async retries can deliver an event twice: the second must not
    publish the same succeeded or failed jobs again (the dashboard's counts)."""
    tw = Twins()
    stages = tw.stages()
    bundle_id, arn = tw.launched("ends", max_attempts=1)
    _running(tw, bundle_id, arn, ["ends"])
    crash = TaskStop(arn, *CRASH)
    first = stages.reruns.on_stop(crash)
    assert first.failed == ["ends"]  # out of attempts: the settle ends the bundle DONE
    again = stages.reruns.on_stop(crash)
    assert (str(again.result), again.failed) == ("ignored", [])
    # A task that ended normally (its runner wrote DONE): reported by its first event only.
    bundle_id, arn = tw.launched("fine")
    bundle = tw.bundle(bundle_id)
    assert bundle is not None
    fence = Fence(bundle_id, bundle.attempt, arn)
    tw.store.claim(fence)
    tw.store.apply(fence, [JobUpdate("fine", JobState.PENDING, JobState.SUCCEEDED,
                                     via=JobState.RUNNING, attempts_delta=1)], BundleState.DONE)
    done = TaskStop(arn, *CRASH[:2], 0)
    assert stages.reruns.on_stop(done).finished == JobOutcomes(1, 0)
    assert str(stages.reruns.on_stop(done).result) == "ignored"
