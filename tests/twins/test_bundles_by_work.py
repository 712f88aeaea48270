"""Bundles sized by work, recorded in pages with a commit last, on the twins.

A crash is injected right after a chosen transaction commits: the table applies it and then the
caller gets an error, as if the process died on the way back.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.ports.table import Op, TableUnavailable
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins
from tests.twins.test_dependency_links import counting_twins

HOLD = 60  # LONGJOBS_HOLD_SECONDS: undeleted messages are delivered again after it


class CrashAfter(MemoryTable):
    """Commits the ``n``-th transaction (0-based), then fails its caller once."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n, self.calls = n, 0

    def _transact(self, ops: list[Op]) -> None:
        super()._transact(ops)
        self.calls += 1
        if self.calls - 1 == self.n:
            raise RuntimeError("InjectedCrash: the process died after this commit")


def small_jobs(n: int, seconds: float = 2.0, prefix: str = "j") -> list[dict[str, Any]]:
    return [{"kind": "k", "payload": {"i": i}, "job_id": f"{prefix}-{i:05d}",
             "estimated_seconds": seconds} for i in range(n)]


def settings(**extra: str) -> dict[str, str]:
    return {"LONGJOBS_HOLD_SECONDS": str(HOLD), **extra}


def drain(twins: Twins, ticks: int = 10, **env: str) -> None:
    """Tick, letting held messages come back between ticks, until nothing is left."""
    d = twins.stages(**settings(**env)).tick
    for _ in range(ticks):
        d.tick()
        if twins.queue_counts() == (0, 0) and not [
                b for b in twins.bundles() if b.state in (BundleState.PENDING,
                                                          BundleState.RECORDING)]:
            return
        twins.clock.advance(HOLD + 1)
    raise AssertionError("not drained")


def check_converged(twins: Twins, job_ids: list[str]) -> None:
    """Every job recorded once and in exactly one bundle; each bundle committed and launched
    once, on a task of its own; the queue empty."""
    assert sorted(j.job_id for j in twins.jobs()) == sorted(job_ids)
    assert twins.queue_counts() == (0, 0)
    bundles = twins.bundles()
    in_bundles = [j for b in bundles for j in b.job_ids]
    assert sorted(in_bundles) == sorted(job_ids)
    assert {b.state for b in bundles} == {BundleState.LAUNCHED}
    assert all(b.attempt == 1 for b in bundles)
    arns = sorted(b.task_arn or "" for b in bundles)
    assert len(set(arns)) == len(bundles)
    assert sorted(twins.task_arns()) == arns
    for job in twins.jobs():
        owner = [b.bundle_id for b in bundles if job.job_id in b.job_ids]
        assert owner == [job.bundle_id]


def test_a_bundle_holds_its_seconds_of_work_at_the_tasks_concurrency(twins: Twins) -> None:
    # 10 s of a task's time at 20 in parallel is 200 s of work: 100 jobs of 2 s.
    jobs = small_jobs(250)
    twins.client().submit_many(jobs)
    twins.stages(**settings(LONGJOBS_TASK_CONCURRENCY="20", LONGJOBS_BUNDLE_MAX_SECONDS="10",
                            LONGJOBS_MAX_RUNNING_TASKS="1")).tick.tick()
    (bundle,) = twins.bundles()
    assert len(bundle.job_ids) == 100 and bundle.estimated_seconds == 200
    assert twins.queue_counts()[0] == 150  # the rest waits in the queue for a free slot


def test_a_backlog_is_spread_evenly_over_the_free_task_slots(twins: Twins) -> None:
    jobs = small_jobs(300)
    twins.client().submit_many(jobs)
    twins.stages(**settings(LONGJOBS_TASK_CONCURRENCY="5",
                            LONGJOBS_MAX_RUNNING_TASKS="6")).tick.tick()
    assert sorted(len(b.job_ids) for b in twins.bundles()) == [50] * 6
    assert twins.queue_counts() == (0, 0)
    assert len(twins.task_arns()) == 6


def test_a_large_bundle_is_recorded_in_pages_and_read_back_whole(twins: Twins) -> None:
    jobs = small_jobs(250)
    twins.client().submit_many(jobs)
    twins.stages(**settings(LONGJOBS_TASK_CONCURRENCY="50",
                            LONGJOBS_MAX_RUNNING_TASKS="1")).tick.tick()
    (item,) = twins.items("BUNDLE#")
    assert item.job_ids is None and item.pages == 3  # 98 + 98 + 54 ids, in page items
    assert [p.pk for p in twins.items("PAGE#")] == [
        r.page_key(r.ident(item.pk), n) for n in range(3)]
    bundle = twins.store.get_bundle(r.ident(item.pk))
    assert bundle is not None and bundle.state == BundleState.LAUNCHED
    assert sorted(bundle.job_ids) == [j["job_id"] for j in jobs]  # whole
    pages = list(twins.store.bundle_jobs(bundle))  # what the runner reads, a page at a time
    assert [len(p) for p in pages] == [100, 100, 50]
    assert [j.job_id for p in pages for j in p] == bundle.job_ids  # in bundle order
    check_converged(twins, [j["job_id"] for j in jobs])


@pytest.mark.parametrize("crash_after", [0, 1, 2], ids=["first", "middle", "commit"])
def test_a_crash_after_any_recording_transaction_converges(crash_after: int) -> None:
    twins = Twins()
    twins.table = CrashAfter(crash_after)
    twins.store.table = twins.table
    jobs = small_jobs(250)
    twins.client().submit_many(jobs)
    env = {"LONGJOBS_TASK_CONCURRENCY": "50", "LONGJOBS_MAX_RUNNING_TASKS": "1"}
    twins.stages(**settings(**env)).tick.tick()
    # The crash left the messages undeleted and, unless it hit the commit, the bundle
    # RECORDING: nothing of it was launched.
    assert twins.launcher.requests == []
    states = {b.state for b in twins.bundles()}
    assert states == ({BundleState.PENDING} if crash_after == 2 else {BundleState.RECORDING})
    drain(twins, LONGJOBS_MAX_RUNNING_TASKS="5", LONGJOBS_TASK_CONCURRENCY="50")
    check_converged(twins, [j["job_id"] for j in jobs])


def test_duplicates_inside_a_paged_bundle_are_left_out(twins: Twins) -> None:
    first = small_jobs(20)
    twins.client().submit_many(first)
    twins.stages(**settings(LONGJOBS_MAX_RUNNING_TASKS="1")).tick.tick()
    # The same 20 again among 230 new ones: one paged bundle of the 230 new ones.
    everything = small_jobs(250)
    twins.client().submit_many(everything)
    d = twins.stages(**settings(LONGJOBS_TASK_CONCURRENCY="50",
                                LONGJOBS_MAX_RUNNING_TASKS="2")).tick.tick()
    assert d.intake.duplicates == 20 and d.intake.admitted == 230
    check_converged(twins, [j["job_id"] for j in everything])


def never_started(twins: Twins) -> tuple[Any, TaskStop]:
    """250 jobs in one launched bundle whose task failed to start (each job lost a launch:
    more job updates than one transaction holds). Returns the stages and the stop."""
    twins.client().submit_many(small_jobs(250))
    stages = twins.stages(**settings(LONGJOBS_TASK_CONCURRENCY="50",
                                     LONGJOBS_MAX_RUNNING_TASKS="1"))
    stages.tick.tick()
    (arn,) = twins.task_arns()
    twins.launcher.stop_task(arn, code="TaskFailedToStart", reason="CannotPullContainerError")
    return stages, TaskStop(arn, "TaskFailedToStart", "CannotPullContainerError", None)


def test_settling_a_large_bundle_writes_every_job(twins: Twins) -> None:
    """A stop that touches more jobs than one transaction holds (a task that never claimed
    its bundle charges each job a launch) is written in chunks, the bundle's update last."""
    stages, stop = never_started(twins)
    outcome = stages.reruns.on_stop(stop)
    assert len(outcome.rerun) == 250
    assert all(j.infra_attempts == 1 for j in twins.jobs())
    (bundle,) = twins.bundles()
    assert bundle.attempt == 2  # relaunched at once


def test_a_crash_part_way_through_a_large_settle_charges_each_job_once() -> None:
    """A settle in several transactions that dies after the first is handled again from the
    jobs as they are then; the jobs the first transaction charged are not charged again."""
    twins = Twins()
    twins.table = crashing = CrashAfter(10**9)
    twins.store.table = crashing
    stages, stop = never_started(twins)
    arn = stop.task_arn
    crashing.n = crashing.calls  # the settle's first transaction commits, then the crash
    with pytest.raises(RuntimeError, match="InjectedCrash"):
        stages.reruns.on_stop(stop)
    charged = [j for j in twins.jobs() if j.infra_attempts == 1]
    assert 0 < len(charged) < 250  # part-way: the bundle itself is still on the stopped task
    (bundle,) = twins.bundles()
    assert bundle.state == BundleState.LAUNCHED and bundle.task_arn == arn
    outcome = stages.reruns.on_stop(stop)  # the event retried
    assert len(outcome.rerun) == 250 and outcome.relaunched
    assert sorted(j.infra_attempts for j in twins.jobs()) == [1] * 250
    assert {j.state for j in twins.jobs()} == {JobState.PENDING}


def test_the_runner_runs_every_job_of_a_paged_bundle(twins: Twins) -> None:
    """The claim returns the bundle with its ids read from its pages: a runner that got none
    would mark the bundle DONE with every job still PENDING."""
    from dispatcher import settings as config
    from job_runner.kinds import HandlerRegistry
    from job_runner.worker import Worker

    jobs = small_jobs(250)
    twins.client().submit_many(jobs)
    twins.stages(**settings(LONGJOBS_TASK_CONCURRENCY="50",
                            LONGJOBS_MAX_RUNNING_TASKS="1")).tick.tick()
    (arn,) = twins.task_arns()
    cfg = config.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_TASK_CONCURRENCY": "20",
                                 "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                                 "LONGJOBS_FLUSH_SECONDS": "3600"})
    ran: list[str] = []
    handlers = HandlerRegistry({"k": lambda p, ctx: ran.append(ctx.job_id)})
    Worker(cfg, twins.store, handlers, arn).run()
    assert sorted(ran) == [j["job_id"] for j in jobs]
    assert {j.state for j in twins.jobs()} == {JobState.SUCCEEDED}
    (bundle,) = twins.bundles()
    assert bundle.state == BundleState.DONE


def test_a_small_capacity_never_receives_far_beyond_it(twins: Twins) -> None:
    """Each receive counts toward the DLQ's maxReceiveCount (5 in the template): a drain that
    received 40 messages for 8 slots of work and put 32 back, tick after tick, would send jobs
    to the DLQ without ever trying them. A drain receives no more than its slots can take, so
    every message here is received exactly once."""
    twins.client().submit_many(small_jobs(100))
    stages = twins.stages(**settings(LONGJOBS_MAX_RUNNING_TASKS="1",
                                     LONGJOBS_BUNDLE_MAX_JOBS="8"))
    received = 0
    for _ in range(20):
        d = stages.tick.tick()
        assert d.intake.waiting == 0, d.intake
        received += d.intake.received
        for b in twins.bundles():  # its task ends: the slot is free for the next tick
            if b.state == BundleState.LAUNCHED:
                twins.store.settle(b, [], BundleState.DONE)
        if twins.queue_counts() == (0, 0):
            break
    assert twins.queue_counts() == (0, 0)
    assert len(twins.jobs()) == 100 and received == 100


def test_jobs_received_beyond_the_free_slots_wait_in_the_table_in_order(twins: Twins) -> None:
    """A drain sizes its receives by the jobs it has seen: after small jobs, a free slot takes
    many, so a batch that turns out to hold long jobs (a slot each) brings more than the slots
    can launch. Those are recorded to wait (PENDING, in bundles due now), never sent back: with
    one slot for 30 long jobs a message sent back each tick would pass maxReceiveCount. Each
    message is received once, at most one task runs at a time, and a tick launches waiting
    jobs before it receives new ones."""
    small = small_jobs(5, prefix="small")
    jobs = small_jobs(30, seconds=3600, prefix="long")
    twins.client().submit_many(small)
    twins.client().submit_many(jobs)
    jobs = small + jobs
    stages = twins.stages(**settings(LONGJOBS_MAX_RUNNING_TASKS="1"))
    waiting, received, launched = 0, 0, []
    for _ in range(60):
        d = stages.tick.tick()
        waiting += d.intake.waiting
        received += d.intake.received
        assert d.launch.bundles_launched <= 1, d
        assert not (d.due_bundles and d.intake.received), d
        running = [b for b in twins.bundles() if b.state == BundleState.LAUNCHED]
        assert len(running) <= 1
        for b in running:
            launched += b.job_ids
            twins.store.settle(b, [], BundleState.DONE)
        if len(launched) == 35:
            break
    assert waiting >= 5  # the overflow happened, and was recorded
    assert twins.queue_counts() == (0, 0) and received == 35
    assert sorted(launched) == sorted(j["job_id"] for j in jobs)


@pytest.mark.parametrize("crash_after", [None, 0], ids=["whole", "recovered"])
def test_a_scheduled_bundle_in_pages_waits_for_its_time(crash_after: int | None) -> None:
    """150 jobs scheduled a day ahead need a paged bundle; its commit (or the recovery of a
    recording cut short) must keep it due then, not now."""
    twins = Twins()
    if crash_after is not None:
        twins.table = CrashAfter(crash_after)
        twins.store.table = twins.table
    when = twins.clock() + 86_400
    twins.client().submit_many([{**j, "not_before": when} for j in small_jobs(150)])
    stages = twins.stages(**settings())
    for _ in range(3):  # the crash, then redelivery and the recovery of the recording
        with contextlib.suppress(RuntimeError):
            stages.tick.tick()
        twins.clock.advance(HOLD + 1)
    bundles = twins.bundles()
    assert any(b.pages for b in bundles)  # a recovered recording keeps only its first page:
    # the rest of the jobs, redelivered, make a second bundle
    assert sorted(j for b in bundles for j in b.job_ids) == sorted(
        j["job_id"] for j in small_jobs(150))
    for bundle in bundles:
        assert bundle.state == BundleState.PENDING
        assert bundle.next_attempt_at == pytest.approx(when)
    assert twins.task_arns() == []
    twins.clock.set(when + 1)
    stages.tick.tick()
    assert len(twins.task_arns()) == len(bundles)


def test_the_look_for_recordings_cut_short_follows_a_tick_that_left_one_only() -> None:
    """Only a tick records, so a tick after one that gave the lease back having recorded all
    it began skips the query for RECORDING bundles; after one whose recording failed (or
    that died: it gave nothing back) the query runs and commits what was written."""
    twins, table = counting_twins()
    recording = r.bundle_status(BundleState.RECORDING)
    stages = twins.stages(**settings())
    stages.tick.tick()
    assert recording in table.queried  # the first tick knows nothing of those before it
    table.reset()
    stages.tick.tick()
    assert recording not in table.queried
    real = twins.store.record

    def refused(*args: Any) -> Any:
        twins.store.record = real  # type: ignore[method-assign]
        raise TableUnavailable("TransactWriteItems", "InternalServerError")

    twins.store.record = refused  # type: ignore[method-assign]
    twins.client().submit_many(small_jobs(3))
    assert stages.tick.tick().intake.record_failures == 1
    table.reset()
    assert stages.tick.tick().intake.admitted == 1  # given back at once, recorded now
    assert recording in table.queried
    assert all(twins.job(j["job_id"]) is not None for j in small_jobs(3))
    table.reset()
    stages.tick.tick()
    assert recording not in table.queried
