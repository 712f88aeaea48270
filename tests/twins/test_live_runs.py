"""Live runs and budgets where the runner meets the dispatcher, on the twins with the real Worker:
no two runs of one job are alive at once (a retry waits for a task still running an abandoned
handler or an overdue job), a stop charges no finished bundle-mate for a killer, and every path
that gives a job back spends a budget."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from dispatcher import settings
from dispatcher.cli import jobs_commands as jobs_cli
from dispatcher.cli.app import app
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import Interrupted
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.launches import Launch
from dispatcher.domain.stops import TaskStop
from dispatcher.ports.table import Delete, Op, Put, Record, Update
from dispatcher.store import Fence, JobUpdate, LaunchOutcome, Store
from dispatcher.store.values import JobOutcomes
from dispatcher.testing.memory_table import MemoryTable
from job_runner import JobContext, executor
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins

CRASH = ("EssentialContainerExited", "Essential container in task exited", 137)
EXITED = ("EssentialContainerExited", "Essential container in task exited", 0)
WAIT = 30.0  # a deadline against a hang, never a measured duration


def runner(**env: str) -> settings.Config:
    return settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
                                    "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                                    "LONGJOBS_ASSIGN_WAIT_SECONDS": "1", **env})


def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def state_of(tw: Twins, job_id: str) -> JobState | None:
    job = tw.job(job_id)
    return job.state if job else None


# -- a retry never runs beside a run that may still be alive ----------------------------------

def test_a_retry_waits_for_the_task_that_still_runs_its_abandoned_handler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two jobs at once: one ignores its timeout and is recorded FAILED while its bundle-mate
    keeps the task running. `jobs retry` then must not launch it beside the abandoned thread;
    once the task is stopped, the next tick launches it."""
    monkeypatch.setattr(executor, "TIMEOUT_GRACE_SECONDS", 0.2)
    tw = Twins()
    stages = tw.stages(LONGJOBS_TASK_CONCURRENCY="2")
    client = tw.client()
    client.submit("stubborn", {}, job_id="stubborn", timeout_seconds=0.5, estimated_seconds=1)
    client.submit("mate", {}, job_id="mate", estimated_seconds=1)
    stages.tick.tick()
    (bundle,) = tw.bundles()
    arn = bundle.task_arn
    assert arn is not None and sorted(bundle.job_ids) == ["mate", "stubborn"]
    abandoned, mate_done = threading.Event(), threading.Event()

    def stubborn(payload: dict[str, Any], ctx: JobContext) -> None:
        abandoned.wait(WAIT)  # ignores ctx.cancelled()

    def mate(payload: dict[str, Any], ctx: JobContext) -> str:
        mate_done.wait(WAIT)
        return "done"

    worker = Worker(runner(LONGJOBS_TASK_CONCURRENCY="2", LONGJOBS_FLUSH_SECONDS="0.05"),
                    tw.store, HandlerRegistry({"stubborn": stubborn, "mate": mate}), arn)
    run = threading.Thread(target=worker.run)
    run.start()
    try:
        until(lambda: state_of(tw, "stubborn") == JobState.FAILED, "stubborn recorded FAILED")
        retried = client.retry("stubborn")
        stages.tick.tick()
        retry_bundle = tw.bundle(retried.bundle_id or "")
        assert retry_bundle is not None and retry_bundle.state == BundleState.PENDING, \
            "the retry was launched while its abandoned run is still alive"
        assert tw.launcher.running() == [arn]
        assert retried.live_task == arn
        assert "waits until task" in (retried.reason or "")
        # The bundle-mate ends, the runner exits, ECS reports the task stopped.
        mate_done.set()
        run.join(WAIT)
        assert not run.is_alive()
        tw.launcher.stop_task(arn, *EXITED)
        stages.tick.tick()  # its reconciliation sees the task stopped: launched
        retry_bundle = tw.bundle(retried.bundle_id or "")
        assert retry_bundle is not None and retry_bundle.state == BundleState.LAUNCHED
        assert retry_bundle.task_arn not in (None, arn)
        job = tw.job("stubborn")
        assert job is not None and job.live_task is None and job.state == JobState.PENDING
        assert job.reason == f"retried on request after FAILED; task {arn} has stopped"
    finally:
        abandoned.set()
        mate_done.set()
        run.join(WAIT)


def _claim_running(tw: Twins, bundle: Bundle, job_ids: list[str]) -> Fence:
    """As a runner that writes through leaves it: claimed, these jobs RUNNING since now."""
    assert bundle.task_arn is not None
    fence = Fence(bundle.bundle_id, bundle.attempt, bundle.task_arn)
    tw.store.claim(fence)
    tw.store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.RUNNING, attempts_delta=1,
                                     history=[{"attempt": 1, "task_arn": bundle.task_arn,
                                               "started_at": tw.clock()}])
                           for j in job_ids])
    return fence


def _overdue_beside_a_mate(**env: str) -> tuple[Twins, Any, str, Fence]:
    """Two jobs at once in one task; "slow" runs past its timeout and reconciliation fails it
    while "mate" keeps the task running: (twins, stages, the task's ARN, its fence)."""
    tw = Twins()
    stages = tw.stages(LONGJOBS_TASK_CONCURRENCY="2", **env)
    client = tw.client()
    client.submit("k", {}, job_id="slow", timeout_seconds=60, estimated_seconds=1)
    client.submit("k", {}, job_id="mate", estimated_seconds=1)
    stages.tick.tick()
    (bundle,) = tw.bundles()
    arn = bundle.task_arn
    assert arn is not None
    fence = _claim_running(tw, bundle, ["slow", "mate"])
    tw.clock.advance(600)  # past slow's timeout and reconciliation's margin
    tw.store.heartbeat(fence, ["slow", "mate"])  # the runner lives on for its mate
    assert stages.tick.tick().reconcile.timed_out == ["slow"]
    assert tw.launcher.stops == []  # its mate still runs there: the task is not stopped
    return tw, stages, arn, fence


def test_a_retry_of_a_job_failed_as_overdue_waits_for_its_task_still_running_mates() -> None:
    tw, stages, arn, _ = _overdue_beside_a_mate()
    client = tw.client()
    retried = client.retry("slow")
    stages.tick.tick()
    held = tw.bundle(retried.bundle_id or "")
    assert held is not None and held.state == BundleState.PENDING, \
        "the retry was launched while the overdue run may still be alive in its task"
    assert tw.launcher.running() == [arn] and retried.live_task == arn
    tw.launcher.stop_task(arn, *EXITED)
    decision = stages.tick.tick()
    assert decision.reconcile.released == ["slow"]
    launched = tw.bundle(retried.bundle_id or "")
    assert launched is not None and launched.state == BundleState.LAUNCHED



def _expires_at(tw: Twins, job_id: str) -> object:
    rec = tw.table.snapshot().get(f"JOB#{job_id}")
    assert rec is not None
    return rec.expires_at


def test_a_job_failed_as_overdue_keeps_no_expiry_while_its_task_runs_on() -> None:
    """TTL must not delete the record of a job whose run may go on in its task (a resubmit of
    the same id would be admitted beside it): its expiry waits for the task's stop, which
    also ends its ``live_task``."""
    tw, stages, arn, fence = _overdue_beside_a_mate(LONGJOBS_RETENTION_DAYS="1")
    assert _expires_at(tw, "slow") is None
    tw.clock.advance(2 * 86_400)  # past the retention: the task still runs for its mate
    tw.table.expire(tw.clock())
    slow = tw.job("slow")
    assert slow is not None and slow.state == JobState.FAILED and slow.live_task == arn
    tw.store.apply(fence, [JobUpdate("mate", JobState.RUNNING, JobState.SUCCEEDED)],
                   bundle_to=BundleState.DONE)
    tw.launcher.stop_task(arn, *EXITED)
    # No count of its runner's on the pointer (a runner whose result for slow the table
    # refused gives none): the jobs are read, slow's run ended, and slow counted FAILED.
    assert stages.reruns.on_stop(TaskStop(arn, *EXITED)).finished == JobOutcomes(1, 1)
    slow = tw.job("slow")
    assert slow is not None and slow.live_task is None and _expires_at(tw, "slow") is not None


def test_the_stop_of_the_task_that_held_an_abandoned_run_ends_its_live_task() -> None:
    """A handler abandoned after SIGTERM is given back PENDING with its task's ARN; once that
    task's stop is handled the run is over, so a later retry of the job has nothing to wait
    for."""
    tw = Twins()
    stages = tw.stages()
    tw.client().submit("k", {}, job_id="j", estimated_seconds=1)
    stages.tick.tick()
    (bundle,) = tw.bundles()
    arn = bundle.task_arn
    assert arn is not None
    fence = _claim_running(tw, bundle, ["j"])
    tw.store.apply(fence, [JobUpdate("j", JobState.RUNNING, JobState.PENDING,
                                     attempts_delta=-1, infra_delta=1,
                                     reason="interrupted: task stopping (SIGTERM)",
                                     live_task=arn)])
    job = tw.job("j")
    assert job is not None and job.live_task == arn
    tw.launcher.stop_task(arn, "SpotInterruption", "Your Spot Task was interrupted.", 0)
    out = stages.reruns.on_stop(TaskStop(arn, "SpotInterruption",
                                         "Your Spot Task was interrupted.", 0))
    assert out.rerun == ["j"]
    job = tw.job("j")
    assert job is not None and job.live_task is None and job.state == JobState.PENDING

def test_jobs_retry_says_when_the_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    tw = Twins()
    tw.client().submit("k", {}, job_id="j", estimated_seconds=1)
    tw.client().submit("k", {}, job_id="other", estimated_seconds=1)
    tw.stages().tick.tick()
    for rec in tw.items("JOB#"):  # one failed and left a run behind, one failed cleanly
        rec.state, rec.status_key = "FAILED", "JOB#FAILED"
        rec.live_task = "arn:aws:ecs:us-east-1:000000000000:task/longjobs/old" \
            if rec.job_id == "j" else None
        tw.table.write(Put(rec))
    monkeypatch.setattr(jobs_cli, "client", tw.client)
    out = CliRunner().invoke(app, ["jobs", "retry", "j"])
    assert out.exit_code == 0, out.output
    assert "waits until task arn:aws:ecs:us-east-1:000000000000:task/longjobs/old is known " \
        "stopped" in out.output
    out = CliRunner().invoke(app, ["jobs", "retry", "other"])
    assert out.exit_code == 0 and "the next tick launches it" in out.output


# -- a finished bundle-mate is not charged for a killer ----------------------------------------

class Killable(MemoryTable):
    """Once ``dead``, nothing more is written: the task's process was killed. While ``hold``
    is set, a write waits for the kill (it was still in flight when the process died)."""

    def __init__(self) -> None:
        super().__init__()
        self.dead = threading.Event()
        self.hold = False

    def _alive(self) -> None:
        if self.hold:
            self.dead.wait(WAIT)
        if self.dead.is_set():
            raise RuntimeError("killed: the process is gone")

    def _transact(self, ops: list[Op]) -> None:
        self._alive()
        super()._transact(ops)

    def write(self, op: Put | Update | Delete) -> Record | None:
        self._alive()
        return super().write(op)

    def revive(self) -> None:
        """The table outlives the task: the stop event and the next task use it."""
        self.hold = False
        self.dead.clear()


def _record(store: Store, jobs: list[Job], arn: str) -> Bundle:
    """A bundle of these jobs, in this order, recorded and launched on ``arn``."""
    bundle = Bundle("b1", [j.job_id for j in jobs])
    for j in jobs:
        j.bundle_id = bundle.bundle_id
    store.record([bundle], jobs)
    launch = Launch("L-b1", [bundle.bundle_id], "longjobs-worker:1")
    store.begin_launch(launch, [bundle])
    store.finish_launch(launch, LaunchOutcome(assigned=[(bundle.bundle_id, arn)]), {})
    return bundle


def test_a_bundle_mate_that_finished_is_not_failed_for_a_killer() -> None:
    """Default settings (one job at a time, grouped writes on the first launch). quick ends;
    innocent's start is flushed with quick's result while it runs, it returns, its result is
    still buffered; poison then kills the process (137). Innocent must not be failed "out of
    attempts" for it; poison is charged once a launch can name it."""
    tw = Twins()
    tw.table = Killable()
    tw.store = Store(tw.table, clock=tw.clock)
    stages = tw.stages()
    table = tw.table
    arn = "arn:aws:ecs:us-east-1:000000000000:task/longjobs/first"
    _record(tw.store, [Job(job_id=i, kind=i, payload={}, estimated_seconds=1, max_attempts=1)
                       for i in ("quick", "innocent", "poison")], arn)

    runs: list[str] = []

    def innocent(payload: dict[str, Any], ctx: JobContext) -> str:
        runs.append(ctx.job_id)
        if len(runs) == 1:  # the first launch
            until(lambda: state_of(tw, "innocent") == JobState.RUNNING,
                  "the flusher wrote innocent's start")
            table.hold = True  # its result is not written before poison's kill, however slow
        return "done"

    def poison(payload: dict[str, Any], ctx: JobContext) -> None:
        table.dead.set()  # SIGKILL: whatever is still buffered or in flight is lost

    handlers = HandlerRegistry({"quick": lambda p, ctx: "done", "innocent": innocent,
                         "poison": poison})
    with contextlib.suppress(RuntimeError):
        Worker(runner(LONGJOBS_FLUSH_SECONDS="0.2"), tw.store, handlers, arn).run()
    table.revive()
    assert [state_of(tw, i) for i in ("quick", "innocent", "poison")] == [
        JobState.SUCCEEDED, JobState.RUNNING, JobState.PENDING]  # as the kill left them
    out = stages.reruns.on_stop(TaskStop(arn, *CRASH))
    innocent_job = tw.job("innocent")
    assert innocent_job is not None
    assert innocent_job.state == JobState.PENDING, \
        f"the finished bundle-mate was charged for the killer: {innocent_job.reason}"
    assert out.failed == [] and (innocent_job.attempts, innocent_job.infra_attempts) == (0, 1)
    # The rerun writes through: the killer is named and fails; innocent's result is kept.
    bundle = tw.bundle("b1")
    assert bundle is not None and bundle.state == BundleState.LAUNCHED and bundle.task_arn
    rerun_arn = bundle.task_arn
    with contextlib.suppress(RuntimeError):
        Worker(runner(), tw.store, handlers, rerun_arn).run()
    table.revive()
    out = stages.reruns.on_stop(TaskStop(rerun_arn, *CRASH))
    assert out.failed == ["poison"]
    poison_job = tw.job("poison")
    assert poison_job is not None and "out of attempts" in (poison_job.reason or "")
    assert state_of(tw, "innocent") == JobState.SUCCEEDED and len(runs) == 2


# -- every give-back spends a budget ------------------------------------------------------------

def test_a_handler_that_raises_interrupted_by_itself_fails_when_its_budget_is_spent() -> None:
    """No cancel, no SIGTERM: the handler raises Interrupted on every run. Each run gives the
    attempt back and spends an infrastructure attempt; with LONGJOBS_MAX_INFRA_ATTEMPTS=2 the
    job ends FAILED, with the reason, after three launches."""
    tw = Twins()
    stages = tw.stages(LONGJOBS_MAX_INFRA_ATTEMPTS="2")
    bundle_id, arn = tw.launched("j1", max_attempts=1, estimated_seconds=5000)

    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        raise Interrupted("upstream unavailable")

    launches = 1
    while True:
        Worker(runner(), tw.store, HandlerRegistry({"k": handler}), arn).run()
        tw.launcher.stop_task(arn, *EXITED)
        stages.reruns.on_stop(TaskStop(arn, *EXITED))  # the task's stop event
        stages.tick.tick()
        job = tw.job("j1")
        assert job is not None
        if job.state != JobState.PENDING:
            break
        bundle = tw.bundle(bundle_id)
        assert bundle is not None and bundle.task_arn and bundle.task_arn != arn
        arn = bundle.task_arn
        launches += 1
        assert launches < 10, "relaunched past its infrastructure budget"
    assert (launches, job.state, job.infra_attempts) == (3, JobState.FAILED, 3)
    assert "infrastructure budget spent" in (job.reason or "")
    assert "upstream unavailable" in (job.reason or "")
