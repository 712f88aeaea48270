"""Jobs in parallel within one task: the worker in-process on the in-memory
table twin, with LONGJOBS_TASK_CONCURRENCY above 1.

Handlers wait on events and barriers, never on the clock; every wait has a generous bound so a
broken worker fails the test instead of hanging it. What is asserted is counts and orderings,
mostly read back from what the worker recorded (each job's ``history`` in the table)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import Add, Update
from dispatcher.settings import Config
from dispatcher.store import Beat, Fence, Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from job_runner import JobContext, executor
from job_runner.kinds import HandlerRegistry
from job_runner.schedule import Schedule
from job_runner.worker import Worker
from tests.twins.test_worker import ARN, launched, small

BOUND = 30.0  # seconds: a safety net against a hang, never an expectation


def config(concurrency: int, **extra: str) -> Config:
    return settings.load("runner", {
        "LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
        "LONGJOBS_HEARTBEAT_SECONDS": "3600", "LONGJOBS_ASSIGN_WAIT_SECONDS": "1",
        "LONGJOBS_TASK_CONCURRENCY": str(concurrency), **extra})


def worker(store: Store, concurrency: int, handlers: dict[str, Callable[..., Any]],
           **extra: str) -> Worker:
    return Worker(config(concurrency, **extra), store, HandlerRegistry(handlers), ARN)


def in_background(w: Worker) -> threading.Thread:
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    return thread


def finish(thread: threading.Thread) -> None:
    thread.join(BOUND)
    assert not thread.is_alive(), "the worker did not finish"


def job(store: Store, job_id: str) -> Job:
    found = store.get_job(job_id)
    assert found is not None
    return found


def intervals(store: Store, job_ids: Collection[str]) -> list[tuple[float, float]]:
    """Each job's recorded run (its last history entry)."""
    out = []
    for job_id in job_ids:
        run = job(store, job_id).history[-1]
        out.append((float(run["started_at"]), float(run["ended_at"])))
    return out


def max_overlap(runs: list[tuple[float, float]]) -> int:
    """Most runs open at one instant (an end at the same instant as a start closes first)."""
    events = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


class Gauge:
    """How many handlers run now, by kind, and the most at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: Counter[str] = Counter()
        self.most: Counter[str] = Counter()

    def enter(self, kind: str = "all") -> None:
        with self._lock:
            self.now[kind] += 1
            self.most[kind] = max(self.most[kind], self.now[kind])

    def leave(self, kind: str = "all") -> None:
        with self._lock:
            self.now[kind] -= 1


def test_twenty_jobs_run_at_once_and_never_more() -> None:
    store = Store(MemoryTable())
    ids = [f"j{i:02}" for i in range(40)]
    launched(store, [small(i) for i in ids])
    together = threading.Barrier(20, timeout=BOUND)  # trips once per 20 running at once
    gauge = Gauge()

    def handler(payload: dict[str, Any], ctx: JobContext) -> str:
        gauge.enter()
        try:
            together.wait()
        finally:
            gauge.leave()
        return "done"

    worker(store, 20, {"ok": handler}).run()
    assert all(job(store, i).state == JobState.SUCCEEDED for i in ids)
    assert max_overlap(intervals(store, ids)) == 20  # as recorded in the table
    assert gauge.most["all"] == 20  # as the handlers saw it
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.DONE


def test_a_timeout_stops_that_job_only() -> None:
    store = Store(MemoryTable())
    mates = ["m1", "m2", "m3"]
    launched(store, [small("late", "late", timeout_seconds=0.2),
                     *[small(m, "mate") for m in mates]])
    all_in = threading.Barrier(4, timeout=BOUND)
    stopped = threading.Event()
    mates_cancelled: list[bool] = []

    def late(payload: dict[str, Any], ctx: JobContext) -> None:
        all_in.wait()
        assert ctx.wait(BOUND)  # its timeout cancels it
        stopped.set()
        ctx.raise_if_cancelled()

    def mate(payload: dict[str, Any], ctx: JobContext) -> str:
        all_in.wait()
        assert stopped.wait(BOUND)  # still running when the timeout stopped the other one
        mates_cancelled.append(ctx.cancelled())
        return "done"

    worker(store, 4, {"late": late, "mate": mate}).run()
    timed_out = job(store, "late")
    assert timed_out.state == JobState.FAILED
    assert (timed_out.reason or "").startswith("timed out after")
    assert all(job(store, m).state == JobState.SUCCEEDED for m in mates)
    assert mates_cancelled == [False, False, False]
    assert max_overlap(intervals(store, ["late", *mates])) == 4


def test_a_cancel_request_stops_that_job_only() -> None:
    store = Store(MemoryTable())
    mates = ["m1", "m2"]
    launched(store, [small("victim", "victim"), *[small(m, "mate") for m in mates]])
    all_in = threading.Barrier(3, timeout=BOUND)
    running = threading.Event()
    stopped = threading.Event()
    mates_cancelled: list[bool] = []

    def victim(payload: dict[str, Any], ctx: JobContext) -> None:
        all_in.wait()
        running.set()
        assert ctx.wait(BOUND)  # the operator's request, read by the heartbeat
        stopped.set()
        ctx.raise_if_cancelled()

    def mate(payload: dict[str, Any], ctx: JobContext) -> str:
        all_in.wait()
        assert stopped.wait(BOUND)
        mates_cancelled.append(ctx.cancelled())
        return "done"

    w = worker(store, 3, {"victim": victim, "mate": mate},
               LONGJOBS_HEARTBEAT_SECONDS="0.02")
    thread = in_background(w)
    assert running.wait(BOUND)
    assert store.cancel("victim").state != JobState.CANCELLED  # requested of its task
    finish(thread)
    cancelled = job(store, "victim")
    assert cancelled.state == JobState.CANCELLED and cancelled.reason == "cancelled on request"
    assert all(job(store, m).state == JobState.SUCCEEDED for m in mates)
    assert mates_cancelled == [False, False]


def test_async_handlers_run_at_once_on_one_loop() -> None:
    store = Store(MemoryTable())
    ids = [f"a{i}" for i in range(10)]
    launched(store, [small(i, "aio") for i in ids])
    seen: list[tuple[int, asyncio.AbstractEventLoop]] = []
    all_in = asyncio.Event()  # usable from one loop only: a second loop would raise

    async def aio(payload: dict[str, Any], ctx: JobContext) -> str:
        seen.append((threading.get_ident(), asyncio.get_running_loop()))
        if len(seen) == len(ids):
            all_in.set()
        await asyncio.wait_for(all_in.wait(), BOUND)
        await asyncio.sleep(0)
        return ctx.job_id

    w = worker(store, 10, {"aio": aio})
    w.run()
    assert [job(store, i).result for i in ids] == ids
    assert max_overlap(intervals(store, ids)) == 10
    assert len({thread for thread, _ in seen}) == 1 and len({id(loop) for _, loop in seen}) == 1
    assert w.executor.loop.thread is not None
    assert seen[0][0] == w.executor.loop.thread.ident != threading.get_ident()


def test_an_async_timeout_cancels_its_task_only() -> None:
    store = Store(MemoryTable())
    launched(store, [small("late", "late", timeout_seconds=0.2), small("mate", "mate")])
    got: list[str] = []
    late_stopped = threading.Event()  # the loop's thread sets it; the mate awaits it

    async def late(payload: dict[str, Any], ctx: JobContext) -> None:
        try:
            await asyncio.sleep(BOUND)
        except asyncio.CancelledError:
            got.append(f"late cancelled, ctx cancelled: {ctx.cancelled()}")
            late_stopped.set()
            raise

    async def mate(payload: dict[str, Any], ctx: JobContext) -> str:
        while not late_stopped.is_set():
            await asyncio.sleep(0.01)  # yields the loop until the other job was cancelled
        got.append(f"mate ctx cancelled: {ctx.cancelled()}")
        return "done"

    worker(store, 2, {"late": late, "mate": mate}).run()
    assert got == ["late cancelled, ctx cancelled: True", "mate ctx cancelled: False"]
    timed_out = job(store, "late")
    assert timed_out.state == JobState.FAILED
    assert (timed_out.reason or "").startswith("timed out after")
    assert timed_out.error is not None and timed_out.error["type"] == "CancelledError"
    assert job(store, "mate").state == JobState.SUCCEEDED


def test_an_async_handler_blocking_the_loop_is_abandoned_with_a_recorded_outcome(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "TIMEOUT_GRACE_SECONDS", 0.2)
    store = Store(MemoryTable())
    launched(store, [small("blocker", "blocker", timeout_seconds=0.2), small("next")])
    release = threading.Event()

    async def blocker(payload: dict[str, Any], ctx: JobContext) -> None:
        release.wait(BOUND)  # blocks the loop's thread: its task cannot even be cancelled

    try:
        worker(store, 1, {"blocker": blocker, "ok": lambda p, ctx: "done"}).run()
        blocked = job(store, "blocker")
        assert blocked.state == JobState.FAILED
        assert (blocked.reason or "").startswith("timed out after")
        assert job(store, "next").state == JobState.PENDING  # nothing new after an abandon
        bundle = store.get_bundle("b1")
        assert bundle is not None and bundle.state == BundleState.RUNNING
    finally:
        release.set()


def test_a_kind_at_its_cap_does_not_hold_up_the_others() -> None:
    store = Store(MemoryTable())
    slow = [f"s{i}" for i in range(6)]
    fast = [f"f{i}" for i in range(6)]
    launched(store, [small(i, "slow") for i in slow] + [small(i, "fast") for i in fast])
    gauge = Gauge()
    fast_done = threading.Event()
    finished_fast: list[str] = []

    def slow_handler(payload: dict[str, Any], ctx: JobContext) -> str:
        gauge.enter("slow")
        try:
            # The first two slow jobs wait for every fast job: had the cap held the fast jobs
            # up behind the third slow one, this would never happen.
            assert fast_done.wait(BOUND)
        finally:
            gauge.leave("slow")
        return "slow"

    def fast_handler(payload: dict[str, Any], ctx: JobContext) -> str:
        gauge.enter("fast")
        gauge.leave("fast")
        finished_fast.append(ctx.job_id)
        if len(finished_fast) == len(fast):
            fast_done.set()
        return "fast"

    worker(store, 6, {"slow": slow_handler, "fast": fast_handler},
           LONGJOBS_TASK_KIND_CONCURRENCY="slow=2").run()
    assert all(job(store, i).state == JobState.SUCCEEDED for i in slow + fast)
    assert gauge.most["slow"] == 2
    assert max_overlap(intervals(store, slow)) == 2
    # Two slow jobs started, then every fast one, all before the third slow one.
    third_slow = float(job(store, "s2").history[-1]["started_at"])
    assert all(float(job(store, f).history[-1]["started_at"]) < third_slow for f in fast)
    assert {s for s in slow if float(job(store, s).history[-1]["started_at"]) < third_slow} \
        == {"s0", "s1"}


def test_the_plan_skips_a_capped_kind_and_keeps_bundle_order() -> None:
    """Read a page at a time; a capped kind's jobs are set aside (whole up to ``held``, then
    as ids read again at their turn) and come first once the kind has room."""
    jobs = [small(job_id, job_id[0]) for job_id in ("s0", "f1", "s2", "s3", "f4", "f5")]
    pulled: list[int] = []
    reads: list[list[str]] = []

    def pages() -> Iterator[list[Job]]:
        for start in range(0, len(jobs), 2):
            pulled.append(start)
            yield jobs[start:start + 2]

    def read(ids: list[str]) -> list[Job]:
        reads.append(ids)
        return [j for j in jobs if j.job_id in ids and j.job_id != "s3"]  # s3 is gone

    plan = Schedule(pages(), read, held=1)

    def take(capped: str = "") -> str | None:
        got = plan.next(lambda kind: kind in capped)
        return got.job_id if got else None

    assert take("s") == "f1" and pulled == [0]  # s0 set aside, held whole
    assert take("s") == "f4" and pulled == [0, 2, 4]  # s2, s3 set aside as ids (held=1)
    assert take() == "s0"  # set-aside jobs first, in bundle order
    assert take() == "s2" and reads == [["s2"]]  # read again at its turn
    assert take() == "f5" and reads == [["s2"], ["s3"]]  # s3 is gone: skipped
    assert take() is None and plan.exhausted


def test_the_heartbeat_reports_the_running_jobs() -> None:
    table = MemoryTable()
    ids = ["a", "b", "c"]
    reported: list[list[str]] = []
    all_reported = threading.Event()

    class Watched(Store):
        def heartbeat(self, fence: Fence, running: Collection[str] = (),
                      progress: Mapping[str, dict[str, Any]] | None = None) -> Beat:
            got = super().heartbeat(fence, running, progress)
            reported.append(sorted(running))
            if sorted(running) == ids:
                all_reported.set()
            return got

    store = Watched(table)
    launched(store, [small(i) for i in ids])

    def handler(payload: dict[str, Any], ctx: JobContext) -> str:
        assert all_reported.wait(BOUND)
        return "done"

    w = worker(store, 3, {"ok": handler}, LONGJOBS_HEARTBEAT_SECONDS="0.02")
    thread = in_background(w)
    assert all_reported.wait(BOUND)
    rec = table.get(r.bundle_key("b1"))
    assert rec is not None and rec.running_jobs == ids  # on the bundle item, for operators
    finish(thread)
    assert all(job(store, i).state == JobState.SUCCEEDED for i in ids)
    assert all(set(beat) <= set(ids) for beat in reported)


def test_sigterm_cancels_every_running_job_and_starts_no_new_one() -> None:
    store = Store(MemoryTable())
    ids = [f"j{i}" for i in range(6)]
    launched(store, [small(i) for i in ids])
    all_in = threading.Event()
    together = threading.Barrier(3, timeout=BOUND, action=all_in.set)
    ran: list[str] = []

    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append(ctx.job_id)
        together.wait()
        assert ctx.wait(BOUND)
        ctx.raise_if_cancelled()

    w = worker(store, 3, {"ok": handler})
    thread = in_background(w)
    assert all_in.wait(BOUND)
    w.on_sigterm(signal.SIGTERM, None)
    finish(thread)
    assert sorted(ran) == ids[:3]
    for i in ids[:3]:  # interrupted: given back to the stop event's rerun, not charged
        stopped = job(store, i)
        assert stopped.state == JobState.PENDING and stopped.attempts == 0
        assert stopped.infra_attempts == 1
        assert stopped.reason == "interrupted: task stopping (SIGTERM)"
    for i in ids[3:]:
        untouched = job(store, i)
        assert untouched.state == JobState.PENDING and untouched.history == []
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.RUNNING  # the stop reruns


def test_an_abandoned_handler_lets_the_running_ones_finish_and_starts_nothing_new(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "TIMEOUT_GRACE_SECONDS", 0.2)
    store = Store(MemoryTable())
    launched(store, [small("stubborn", "stubborn", timeout_seconds=0.2), small("mate", "mate"),
                     small("next")])
    release = threading.Event()
    holder: list[Worker] = []

    def stubborn(payload: dict[str, Any], ctx: JobContext) -> None:
        release.wait(BOUND)  # ignores ctx.cancelled()

    def mate(payload: dict[str, Any], ctx: JobContext) -> str:
        assert holder[0].abandoned.wait(BOUND)  # still running once the other is abandoned
        return "done"

    w = worker(store, 2, {"stubborn": stubborn, "mate": mate, "ok": lambda p, ctx: "done"})
    holder.append(w)
    try:
        w.run()
        abandoned = job(store, "stubborn")
        assert abandoned.state == JobState.FAILED
        assert (abandoned.reason or "").startswith("timed out after")
        assert job(store, "mate").state == JobState.SUCCEEDED  # finished and recorded
        assert job(store, "next").history == []  # never started beside the abandoned one
        bundle = store.get_bundle("b1")
        assert bundle is not None and bundle.state == BundleState.RUNNING  # the stop reruns
    finally:
        release.set()


def test_a_lost_claim_cancels_every_running_job_and_writes_nothing_more() -> None:
    table = MemoryTable()
    store = Store(table)
    ids = ["a", "b", "c"]
    launched(store, [small(i) for i in ids])
    all_in = threading.Event()
    together = threading.Barrier(3, timeout=BOUND, action=all_in.set)
    reasons: list[str | None] = []

    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        together.wait()
        assert ctx.wait(BOUND)
        reasons.append(ctx.cancel_reason)
        ctx.raise_if_cancelled()

    w = worker(store, 3, {"ok": handler}, LONGJOBS_HEARTBEAT_SECONDS="0.02")
    thread = in_background(w)
    assert all_in.wait(BOUND)
    table.write(Update(r.bundle_key("b1"), [Add("attempt", 1)]))  # a newer attempt owns it
    finish(thread)
    assert reasons == ["claim lost"] * 3
    for i in ids:  # the buffered starts and results were never written
        untouched = job(store, i)
        assert untouched.state == JobState.PENDING and untouched.history == []
