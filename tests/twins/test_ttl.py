"""Retention on the twins: DynamoDB's TTL deletes only what is finished.

``MemoryTable.expire`` deletes what DynamoDB's TTL would, at the very second each item expires
(the harshest case: DynamoDB deletes some time after). Whatever the clock does, a job that is
pending, scheduled or running must still find its bundle, its bundle's pages, and its task's
pointer.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.launches import Launch, LaunchState
from dispatcher.domain.stops import TaskStop
from dispatcher.ports.table import Op, Put, Record
from dispatcher.store import Fence, JobUpdate, LaunchOutcome
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins
from tests.twins.test_bundles_by_work import CrashAfter

DAY = 86_400.0
RUNNER = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_TASK_CONCURRENCY": "20",
                                  "LONGJOBS_FLUSH_SECONDS": "3600",
                                  "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                                  "LONGJOBS_ASSIGN_WAIT_SECONDS": "1"})
ARN = "arn:aws:ecs:us-east-1:000000000000:task/longjobs/"
CRASH = ("EssentialContainerExited", "Essential container in task exited", 137)


def small_jobs(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"kind": "k", "payload": {"i": i}, "job_id": f"j-{i:05d}",
             "estimated_seconds": 2.0, **extra} for i in range(n)]


def run_task(tw: Twins, arn: str) -> list[str]:
    """Run the task's runner to its end on the twins; the ids of the jobs it ran."""
    ran: list[str] = []
    Worker(RUNNER, tw.store, HandlerRegistry({"k": lambda p, ctx: ran.append(ctx.job_id)}),
           arn).run()
    return ran


def launched_arns(tw: Twins) -> list[str]:
    """The tasks whose bundle waits for them (a runner on any other exits at once)."""
    return [b.task_arn for b in tw.bundles()
            if b.state == BundleState.LAUNCHED and b.task_arn]


def needed(items: dict[str, Record]) -> dict[str, str]:
    """Every item something unfinished still needs, with who needs it: a non-terminal job's
    own item, its bundle, its bundle's pages, the pointer of the task its bundle is on; a
    launch not yet finished (a crashed tick's launch is retried from it)."""
    out: dict[str, str] = {}
    for rec in items.values():
        if rec.pk.startswith("JOB#") and rec.state not in TERMINAL_JOB_STATES:
            out[rec.pk] = "itself"
            if rec.bundle_id:
                out[r.bundle_key(rec.bundle_id)] = rec.pk
                bundle = items.get(r.bundle_key(rec.bundle_id))
                for n in range(int(bundle.pages or 0) if bundle else 0):
                    out[r.page_key(rec.bundle_id, n)] = rec.pk
                if bundle is not None and bundle.task_arn and bundle.state in {
                        str(s) for s in ACTIVE_BUNDLE_STATES}:
                    out[r.task_key(bundle.task_arn)] = rec.pk
        if rec.pk.startswith("LAUNCH#") and rec.state == LaunchState.STARTING:
            out[rec.pk] = "recovery of an unfinished launch"
    return out


def assert_nothing_needed_expires(tw: Twins) -> None:
    """Nothing needed carries ``expires_at`` at all: no clock, however far ahead, can make
    DynamoDB delete it."""
    items = tw.table.snapshot()
    doomed = {pk: who for pk, who in needed(items).items()
              if pk in items and items[pk].expires_at is not None}
    assert doomed == {}, f"needed but set to expire: {doomed}"


def test_the_twin_expires_what_dynamodb_would_and_nothing_else() -> None:
    table = MemoryTable()
    for pk, expires_at in (("A", 100), ("B", 101), ("C", None)):
        table.write(Put(Record(pk, expires_at=expires_at)))
    assert table.expire(99) == 0
    assert table.expire(100) == 1
    assert sorted(table.snapshot()) == ["B", "C"]
    assert table.expire(10**12) == 1
    assert sorted(table.snapshot()) == ["C"]  # no expires_at: kept forever


# -- a bundle scheduled far ahead ---------------------------------------------------------------
def test_a_far_scheduled_paged_bundle_keeps_its_pages_until_it_runs() -> None:
    tw = Twins()
    when = tw.clock() + 180 * DAY
    jobs = small_jobs(150, not_before=when)
    tw.client().submit_many(jobs)
    stages = tw.stages()
    stages.tick.tick()
    (bundle,) = tw.bundles()
    assert bundle.pages == 2 and bundle.state == BundleState.PENDING  # 98 + 52 ids
    assert_nothing_needed_expires(tw)
    # Past the pages' old lifetime (90 days + the 30 days' retention), as DynamoDB's TTL would.
    tw.clock.advance(125 * DAY)
    tw.table.expire(tw.clock())
    tw.clock.set(when + 1)
    stages.tick.tick()
    (arn,) = tw.task_arns()
    assert sorted(run_task(tw, arn)) == [j["job_id"] for j in jobs]
    assert {j.state for j in tw.jobs()} == {JobState.SUCCEEDED}
    (bundle,) = tw.bundles()
    assert bundle.state == BundleState.DONE and len(bundle.job_ids) == 150


def test_a_finished_paged_bundle_leaves_nothing_behind_after_the_retention() -> None:
    """Pages get their expiry when their bundle is DONE: kept until then, deleted with it."""
    tw = Twins()
    tw.client().submit_many(small_jobs(150))
    # One bundle of 150 (no follow-ons: the one below has them).
    tw.stages(LONGJOBS_MAX_RUNNING_TASKS="1", LONGJOBS_FOLLOW_ON_SECONDS="0").tick.tick()
    (arn,) = tw.task_arns()
    assert len(run_task(tw, arn)) == 150
    items = tw.table.snapshot()
    (done,) = [rec for rec in items.values() if rec.pk.startswith("BUNDLE#")]
    assert done.state == BundleState.DONE and done.expires_at is not None
    pages = [rec for rec in items.values() if rec.pk.startswith("PAGE#")]
    assert len(pages) == 2 and {p.expires_at for p in pages} == {done.expires_at}
    assert items[r.task_key(arn)].expires_at == done.expires_at
    tw.clock.advance(31 * DAY)
    tw.table.expire(tw.clock())
    leftovers = {pk for pk in tw.table.snapshot() if not pk.startswith("LEASE#")}
    assert leftovers == set()  # every job, the bundle, its pages, the pointer, the launch


def paged(tw: Twins, n: int, bundle_id: str = "big") -> Bundle:
    """A bundle of ``n`` jobs recorded in pages and launched on a task, through the store."""
    jobs = [Job(job_id=f"{bundle_id}-{i:05d}", kind="k", payload={}, estimated_seconds=0.01,
                bundle_id=bundle_id) for i in range(n)]
    bundle = Bundle(bundle_id, [j.job_id for j in jobs])
    tw.store.record([bundle], jobs)
    launch = Launch(f"L-{bundle_id}", [bundle_id], "longjobs-worker:1")
    tw.store.begin_launch(launch, [bundle])
    tw.store.finish_launch(launch, LaunchOutcome(assigned=[(bundle_id, ARN + bundle_id)]), {})
    got = tw.store.get_bundle(bundle_id)
    assert got is not None and got.pages == -(-n // 98)
    return got


def page_expiries(tw: Twins, bundle: Bundle) -> set[float | None]:
    pages = tw.table.get_many([r.page_key(bundle.bundle_id, n) for n in range(bundle.pages)])
    assert len(pages) == bundle.pages
    return {p.expires_at for p in pages}


def expiry(tw: Twins, pk: str) -> float | None:
    rec = tw.table.get(pk)
    assert rec is not None
    return rec.expires_at


def finished(bundle: Bundle) -> list[JobUpdate]:
    """The runner's last write: the bundle's last 98 jobs, started and ended together."""
    return [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED, via=JobState.RUNNING,
                      attempts_delta=1) for j in bundle.job_ids[-98:]]


def test_a_batch_run_as_follow_ons_leaves_nothing_behind_after_the_retention() -> None:
    """One task runs its bundle and then every follow-on of its batch (taken, not launched):
    each DONE follow-on, its pages, the batch's cursor and the task's pointer expire."""
    tw = Twins()
    tw.client().submit_many(small_jobs(400))  # under one slot's work limit (450 of 2 s)
    tw.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    (arn,) = tw.task_arns()
    assert len(run_task(tw, arn)) == 400  # one task ran them all
    items = tw.table.snapshot()
    bundles = [rec for rec in items.values() if rec.pk.startswith("BUNDLE#")]
    assert len(bundles) > 2 and {b.state for b in bundles} == {BundleState.DONE}
    assert len([pk for pk in items if pk.startswith("BATCH#")]) == 1
    last = tw.store.bundle_for_task(arn)
    assert last is not None and items[r.task_key(arn)].expires_at is not None
    tw.clock.advance(31 * DAY)
    tw.table.expire(tw.clock())
    leftovers = {pk for pk in tw.table.snapshot() if not pk.startswith(("LEASE#", "TICK#"))}
    assert leftovers == set()


def test_more_pages_than_a_transaction_holds_all_expire_when_the_runner_ends() -> None:
    """10,000 jobs make 103 pages: the runner's last transaction (98 job updates) has no room
    for them; they follow in transactions of their own, at most 100 items each."""
    tw = Twins()
    bundle = paged(tw, 10_000)
    assert page_expiries(tw, bundle) == {None}
    fence = Fence(bundle.bundle_id, bundle.attempt, ARN + "big", pages=bundle.pages)
    tw.store.claim(fence)
    tw.store.apply(fence, finished(bundle), BundleState.DONE)
    done = expiry(tw, r.bundle_key(bundle.bundle_id))
    assert done is not None and page_expiries(tw, bundle) == {done}
    assert expiry(tw, r.task_key(ARN + "big")) == done


def test_a_recording_cut_short_keeps_the_pages_it_wrote_and_expires_exactly_those() -> None:
    """A tick dies after the first page of three: the next one commits the bundle with that
    page; when it is DONE, its one page expires with it (no page item is made up for the
    two that were never written)."""
    tw = Twins()
    tw.table = tw.store.table = crashing = CrashAfter(0)
    tw.client().submit_many(small_jobs(250))
    env = {"LONGJOBS_TASK_CONCURRENCY": "50", "LONGJOBS_MAX_RUNNING_TASKS": "1",
           "LONGJOBS_HOLD_SECONDS": "60"}
    with contextlib.suppress(RuntimeError):
        tw.stages(**env).tick.tick()
    crashing.n = -1
    tw.clock.advance(61)
    ran: list[str] = []
    for _ in range(10):  # recover, then the redelivered rest, a task at a time
        tw.stages(**env).tick.tick()
        for arn in launched_arns(tw):
            ran += run_task(tw, arn)
        tw.clock.advance(61)
        if len(ran) == 250:
            break
    assert sorted(ran) == [j["job_id"] for j in small_jobs(250)]
    recovered = [b for b in tw.bundles() if b.pages == 1]
    assert len(recovered) == 1 and len(recovered[0].job_ids) == 98
    pages = tw.items("PAGE#")
    # Each a page written by a recording (a page whose jobs were all duplicates has none),
    # none made up by the DONE write, and each set to expire.
    assert all(p.bundle_id and p.created_at and p.expires_at is not None for p in pages), [
        (p.pk, p.bundle_id, p.expires_at) for p in pages]
    tw.clock.advance(31 * DAY)
    tw.table.expire(tw.clock())
    assert {pk for pk in tw.table.snapshot() if not pk.startswith("LEASE#")} == set()


class Counting(MemoryTable):
    """Counts TransactWriteItems calls."""

    def __init__(self) -> None:
        super().__init__()
        self.transactions = 0

    def _transact(self, ops: list[Op]) -> None:
        self.transactions += 1
        super()._transact(ops)


def test_the_pages_fit_in_a_stops_last_transaction_or_follow_it() -> None:
    tw = Twins()
    tw.table = tw.store.table = table = Counting()
    bundle = paged(tw, 196)  # two full pages
    tw.store.settle(bundle, finished(bundle), BundleState.DONE)  # no room left for them
    done = expiry(tw, r.bundle_key(bundle.bundle_id))
    assert done is not None and page_expiries(tw, bundle) == {done}
    assert expiry(tw, r.task_key(ARN + "big")) == done
    small = paged(tw, 100, bundle_id="small")  # 98 + 2: room in the stop's transaction
    calls = table.transactions
    tw.store.settle(small, [], BundleState.DONE)
    assert table.transactions == calls + 1
    assert page_expiries(tw, small) == {expiry(tw, r.bundle_key("small"))} != {None}


def test_cancelling_every_job_of_a_scheduled_paged_bundle_lets_its_pages_expire() -> None:
    tw = Twins()
    tw.client().submit_many(small_jobs(100, not_before=tw.clock() + 30 * DAY))
    tw.stages().tick.tick()
    (bundle,) = tw.bundles()
    assert bundle.pages == 2
    for job in tw.jobs():
        tw.store.cancel(job.job_id)
    (bundle,) = tw.bundles()
    assert bundle.state == BundleState.DONE
    assert all(p.expires_at is not None for p in tw.items("PAGE#"))


# -- a job running longer than a month ----------------------------------------------------------
@pytest.mark.parametrize("seen_by", ["stop event", "reconciliation"])
def test_a_job_running_past_thirty_days_keeps_its_tasks_pointer(seen_by: str) -> None:
    """A job may run for 10**7 s (116 days): its task's stop must still find its bundle,
    whether the stop event arrives or a tick's reconciliation finds the task stopped."""
    tw = Twins()
    stages = tw.stages()
    bundle_id, arn = tw.launched("long", estimated_seconds=100 * DAY,
                                 timeout_seconds=110 * DAY)
    bundle = tw.bundle(bundle_id)
    assert bundle is not None
    fence = Fence(bundle_id, bundle.attempt, arn)
    tw.store.claim(fence)
    tw.store.apply(fence, [JobUpdate("long", JobState.PENDING, JobState.RUNNING,
                                     attempts_delta=1,
                                     history=[{"attempt": 1, "task_arn": arn}])])
    assert_nothing_needed_expires(tw)
    tw.clock.advance(40 * DAY)
    tw.table.expire(tw.clock())
    if seen_by == "stop event":
        out = stages.reruns.on_stop(TaskStop(arn, *CRASH))
        assert out.bundle_id == bundle_id and out.rerun == ["long"], out.reason
    else:
        tw.launcher.stop_task(arn, *CRASH)
        stages.tick.tick()
    job = tw.job("long")
    assert job is not None and job.attempts == 1 and job.history[-1].get("exit_code") == 137
    rerun = tw.bundle(bundle_id)
    assert rerun is not None and rerun.attempt == 2 and rerun.task_arn != arn  # relaunched


# -- in general ---------------------------------------------------------------------------------
def test_nothing_an_unfinished_job_needs_ever_carries_an_expiry() -> None:
    """A mixed life: scheduled and due jobs, a crash and its rerun, a cancel, a retry, and
    finished bundles. After every step, nothing an unfinished job needs may
    expire; at the end, TTL deletes what is finished and every unfinished job still runs."""
    tw = Twins()
    stages = tw.stages(LONGJOBS_MAX_RUNNING_TASKS="10")
    client = tw.client()
    check = assert_nothing_needed_expires
    client.submit_many(small_jobs(150, not_before=tw.clock() + 60 * DAY))  # paged, far
    for job_id in ("done-1", "crash", "cancel-me"):
        client.submit("k", {}, job_id=job_id, estimated_seconds=1, max_attempts=1)
    stages.tick.tick()
    check(tw)
    arns = tw.task_arns()
    assert len(arns) == 1  # the three due ones share a bundle
    (first,) = arns
    # The task dies with "crash" running: the bundle is rerun at once on a new task.
    bundle = tw.store.bundle_for_task(first)
    assert bundle is not None
    fence = Fence(bundle.bundle_id, bundle.attempt, first)
    tw.store.claim(fence)
    tw.store.apply(fence, [JobUpdate("crash", JobState.PENDING, JobState.RUNNING,
                                     attempts_delta=1,
                                     history=[{"attempt": 1, "task_arn": first}])])
    check(tw)
    tw.client().cancel("cancel-me")  # a request, honoured by the next runner
    out = stages.reruns.on_stop(TaskStop(first, *CRASH))
    # A first launch of several jobs buffers its writes, so that crash is pinned on nobody: the
    # bundle reruns one job at a time, and the same crash on its next task is "crash"'s own.
    assert "crash" in out.rerun and out.relaunched
    check(tw)
    rerun = tw.bundle(bundle.bundle_id)
    assert rerun is not None and rerun.task_arn and rerun.task_arn != first
    fence = Fence(bundle.bundle_id, rerun.attempt, rerun.task_arn)
    tw.store.claim(fence)
    tw.store.apply(fence, [JobUpdate("crash", JobState.PENDING, JobState.RUNNING,
                                     attempts_delta=1,
                                     history=[{"attempt": 1, "task_arn": rerun.task_arn}])])
    out = stages.reruns.on_stop(TaskStop(rerun.task_arn, *CRASH))
    assert out.failed == ["crash"] and out.relaunched
    check(tw)
    retried = client.retry("crash")
    assert retried.state == JobState.PENDING
    check(tw)
    tw.clock.advance(40 * DAY)
    tw.table.expire(tw.clock())
    check(tw)
    stages.tick.tick()  # the retried job's bundle launches
    check(tw)
    ran: list[str] = []
    for arn in launched_arns(tw):
        ran += run_task(tw, arn)
        check(tw)
    assert sorted(ran) == ["crash", "done-1"]  # "cancel-me" was cancelled at the claim
    tw.clock.advance(40 * DAY)  # the scheduled bundle is due; the first ones expire
    assert tw.table.expire(tw.clock()) > 0
    check(tw)
    stages.tick.tick()
    for arn in launched_arns(tw):
        ran += run_task(tw, arn)
        check(tw)
    assert len(ran) == 2 + 150
    assert [j.job_id for j in tw.jobs() if j.state not in TERMINAL_JOB_STATES] == []
