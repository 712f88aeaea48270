"""Free task slots, kind limits and priorities together, on the twins.

A kind with a little room must not hide the due bundles of other kinds; a bundle counts the jobs
it can run at once, decided when it launches (the limit and concurrency then, not at recording);
and every priority with work gets a slot within a bounded number of ticks, even when one slot
frees per tick.
"""

from __future__ import annotations

import itertools
import random
import threading

import pytest

from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.fairness import allocate, patience
from dispatcher.domain.jobs import PRIORITY_ORDER, Job, JobState, Priority
from dispatcher.domain.launches import Launch
from dispatcher.ops.top import Top
from dispatcher.ports.table import Update
from dispatcher.stages.launch import launch_slots
from dispatcher.store import LaunchOutcome, Store
from dispatcher.store import codec as r
from dispatcher.store.base import status
from dispatcher.testing.memory_table import MemoryTable
from job_runner import JobContext
from tests.twins.test_concurrency import BOUND, Gauge, job, worker
from tests.twins.test_shapes import Shapes
from tests.twins.test_worker import ARN

# LONGJOBS_PRIORITY_WEIGHTS' default.
DEFAULT_WEIGHTS = {"high": 6, "normal": 3, "low": 1}


def small(kind: str, job_id: str, **extra: object) -> dict[str, object]:
    return {"kind": kind, "job_id": job_id, "estimated_seconds": 1, **extra}


def long(kind: str, job_id: str, **extra: object) -> dict[str, object]:
    return {"kind": kind, "job_id": job_id, "estimated_seconds": 3600, **extra}


def finish(shapes: Shapes, bundle_id: str) -> None:
    """One task ends: its bundle DONE (the runner's last write)."""
    shapes.table.write(Update(r.bundle_key(bundle_id),
                              status(r.bundle_status(BundleState.DONE), shapes.clock())))


def active_slots(shapes: Shapes, kind: str) -> int:
    return sum(b.slots for b in shapes.bundles()
               if b.state in ACTIVE_BUNDLE_STATES and b.kind == kind)


def test_a_kind_with_a_little_room_does_not_hide_other_kinds() -> None:
    """report=10 at 4 jobs a task: two bundles of 4 run, the room left (2) is too little for
    the next bundle of 4, and hundreds of them wait, more than a tick reads past its slots. A
    due bundle of another kind must still launch, while the reports stay within their limit."""
    shapes = Shapes()
    env = {"LONGJOBS_KIND_LIMITS": "report=10", "LONGJOBS_TASK_CONCURRENCY": "4",
           "LONGJOBS_BUNDLE_MAX_JOBS": "4", "LONGJOBS_MAX_RUNNING_TASKS": "50"}
    stages = shapes.stages(**env)
    reports = [f"report-{i}" for i in range(1200)]
    # Bundled 4 at a time: sent in batches of 4, one tick each, so every bundle is full.
    shapes.send(shapes.queue, [small("report", j) for j in reports[:8]])
    stages.tick.tick()
    assert active_slots(shapes, "report") == 8
    shapes.send(shapes.queue, [small("report", j) for j in reports[8:]])
    stages.tick.tick()
    waiting = [b for b in shapes.bundles() if b.state == BundleState.PENDING]
    assert len(waiting) > 250
    for b in shapes.bundles():  # a bundle sized to the room left ends: room 2 < 4 is left
        if b.state in ACTIVE_BUNDLE_STATES and b.slots < 4:
            finish(shapes, b.bundle_id)
    assert active_slots(shapes, "report") == 8
    shapes.send(shapes.queue, [long("resize", "resize", not_before=shapes.clock() + 30)])
    stages.tick.tick()  # recorded, scheduled
    shapes.clock.advance(60)
    stages.tick.tick()
    assert "resize" in shapes.launched_jobs()
    assert active_slots(shapes, "report") <= 10


def test_one_job_bundles_count_one_slot_each() -> None:
    """Long reports (a bundle each) at concurrency 20 and report=10: ten run at once, and top
    shows the slots they hold, not the limit once per bundle."""
    shapes = Shapes()
    env = {"LONGJOBS_KIND_LIMITS": "report=10", "LONGJOBS_TASK_CONCURRENCY": "20",
           "LONGJOBS_MAX_RUNNING_TASKS": "50"}
    shapes.send(shapes.queue, [long("report", f"r-{i}") for i in range(3)])
    shapes.stages(**env).tick.tick()
    assert len(shapes.launched_jobs()) == 3
    assert active_slots(shapes, "report") == 3
    top = Top(shapes.store, queue=shapes.queue, clock=shapes.clock,
              kind_limits={"report": 10}).snapshot()
    [row] = top.kinds
    assert (row.kind, row.running, row.at_limit) == ("report", 3, False)
    shapes.send(shapes.queue, [long("report", f"more-{i}") for i in range(12)])
    shapes.stages(**env).tick.tick()
    assert active_slots(shapes, "report") == 10
    assert len(shapes.launched_jobs()) == 10


def test_a_lowered_kind_limit_applies_to_bundles_recorded_before() -> None:
    """Bundles of 10 reports recorded while report=10 was full wait in the table; the operator
    lowers the limit to 5. They launch when room frees, each running at most 5 at once (its
    ``slots``, which the runner keeps to), never more than 5 reports in all."""
    shapes = Shapes()
    env = {"LONGJOBS_TASK_CONCURRENCY": "10", "LONGJOBS_BUNDLE_MAX_JOBS": "10",
           "LONGJOBS_MAX_RUNNING_TASKS": "20"}
    shapes.send(shapes.queue, [small("report", f"r-{i}") for i in range(30)])
    shapes.stages(LONGJOBS_KIND_LIMITS="report=10", **env).tick.tick()
    assert active_slots(shapes, "report") == 10
    assert len([b for b in shapes.bundles() if b.state == BundleState.PENDING]) == 2
    lowered = shapes.stages(LONGJOBS_KIND_LIMITS="report=5", **env).tick
    launched = 0
    for _ in range(3):
        shapes.finish_active()
        lowered.tick()
        running = [b for b in shapes.bundles()
                   if b.state in ACTIVE_BUNDLE_STATES and b.kind == "report"]
        assert sum(b.slots for b in running) <= 5
        assert all(b.slots == 5 for b in running)
        launched += len(running)
    assert launched == 2
    assert {b.state for b in shapes.bundles()} == {BundleState.DONE}


def test_a_rerun_of_one_job_at_a_time_keeps_running_one_at_a_time() -> None:
    """A bundle set to run serially (``slots`` 1 after an ambiguous stop) keeps it when it is
    launched again, whatever the kind's limit and the concurrency."""
    shapes = Shapes()
    env = {"LONGJOBS_KIND_LIMITS": "report=10", "LONGJOBS_TASK_CONCURRENCY": "4",
           "LONGJOBS_BUNDLE_MAX_JOBS": "4"}
    shapes.send(shapes.queue, [small("report", f"r-{i}") for i in range(4)])
    d = shapes.stages(**env).tick
    d.tick()
    [bundle] = shapes.bundles()
    assert bundle.slots == 4
    shapes.store.settle(bundle, [], BundleState.PENDING, retry_at=shapes.clock(), serial=True)
    d.tick()
    [bundle] = shapes.bundles()
    assert bundle.state == BundleState.LAUNCHED and bundle.slots == 1


def test_low_priority_gets_a_slot_when_one_frees_per_tick() -> None:
    """One task slot frees per tick and high always has more: low still launches, within the
    bound (:func:`patience`), and keeps launching at about its weight's share."""
    shapes = Shapes()
    shapes.send(shapes.high, [long("k", f"high-{i}", priority="high") for i in range(40)])
    shapes.send(shapes.low, [long("k", f"low-{i}", priority="low") for i in range(5)])
    d = shapes.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick
    bound = patience(Priority.LOW, DEFAULT_WEIGHTS) + 1  # ticks until its first launch
    assert bound == 12
    lows: list[int] = []
    for tick in range(1, 21):
        d.tick()
        if any(j.startswith("low") for j in shapes.launched_jobs()):
            lows.append(tick)
        shapes.finish_active()
    assert lows and lows[0] <= bound
    assert all(b - a <= bound for a, b in itertools.pairwise(lows))
    assert len(lows) >= 2


def test_due_bundles_of_low_priority_are_not_starved_by_high_ones() -> None:
    """The same with the work already waiting in the table (received once every slot was
    taken): due bundles of each priority share the free slot by weight too."""
    shapes = Shapes()
    due = shapes.clock() + 30
    shapes.send(shapes.high, [long("k", f"high-{i}", priority="high", not_before=due)
                              for i in range(30)])
    shapes.send(shapes.low, [long("k", f"low-{i}", priority="low", not_before=due)
                             for i in range(30)])
    d = shapes.stages(LONGJOBS_MAX_RUNNING_TASKS="2").tick
    d.tick()  # every job recorded, scheduled: each waits in the table
    assert shapes.launched_jobs() == set()
    shapes.clock.advance(60)
    bound = patience(Priority.LOW, DEFAULT_WEIGHTS) + 1
    launched: dict[str, int] = {"high": 0, "low": 0}
    first_low = None
    for tick in range(1, 11):
        d.tick()
        for j in shapes.launched_jobs():
            launched[j.split("-")[0]] += 1
            if j.startswith("low") and first_low is None:
                first_low = tick
        shapes.finish_active()
    assert first_low is not None and first_low <= bound
    assert launched["low"] >= 2
    assert launched["high"] > launched["low"]


def test_a_deep_backlog_of_one_priority_in_the_table_does_not_hide_another() -> None:
    """More due high bundles than a tick reads, all older than one due low bundle: the low one
    is still found, and launched within the bound."""
    shapes = Shapes()
    due = shapes.clock() + 30
    shapes.send(shapes.high, [long("k", f"high-{i}", priority="high", not_before=due)
                              for i in range(260)])
    shapes.send(shapes.low, [long("k", "low", priority="low", not_before=due + 10)])
    d = shapes.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick
    for _ in range(3):
        d.tick()
    assert shapes.launched_jobs() == set()
    assert len([b for b in shapes.bundles() if b.state == BundleState.PENDING]) == 261
    shapes.clock.advance(60)
    bound = patience(Priority.LOW, DEFAULT_WEIGHTS) + 1
    for _ in range(bound):
        d.tick()
        if "low" in shapes.launched_jobs():
            break
        shapes.finish_active()
    else:
        raise AssertionError(f"low not launched in {bound} ticks")


@pytest.mark.parametrize("always", [True, False], ids=["every tick", "when levels compete"])
def test_every_backlogged_level_gets_a_slot_within_its_patience(always: bool) -> None:
    """The allocation alone, under random demand and capacity: a level with work never goes
    more than ``patience`` ticks without a slot, for any weights; whether it shares every
    tick's slots or, as the tick does, only those of ticks where levels compete."""
    rnd = random.Random(7)
    for _ in range(300):
        weights = {str(p): rnd.choice([1, 1, 2, 3, 6, 10, 50]) for p in PRIORITY_ORDER}
        credit: dict[str, float] = {}
        waited = dict.fromkeys(PRIORITY_ORDER, 0)
        for _tick in range(200):
            demand = {p: rnd.choice([0, 1, 1, 2, 100]) for p in PRIORITY_ORDER}
            capacity = rnd.choice([1, 1, 2, 3])
            compete = sum(demand.values()) > capacity and sum(map(bool, demand.values())) > 1
            if always or compete:
                slots, credit = allocate(capacity, demand, weights, credit)
            else:  # one level with work, or work for every slot: each gets all it has
                slots = {p: min(n, capacity) for p, n in demand.items()}
            assert sum(slots.values()) <= min(capacity, sum(demand.values()))
            for p in PRIORITY_ORDER:
                waited[p] = waited[p] + 1 if demand[p] and not slots[p] else 0
                assert waited[p] <= patience(p, weights)


def test_the_allocation_is_work_conserving_and_weighted() -> None:
    slots, _ = allocate(10, {Priority.HIGH: 100, Priority.LOW: 2}, DEFAULT_WEIGHTS, {})
    assert slots == {Priority.HIGH: 9, Priority.NORMAL: 0, Priority.LOW: 1}  # 6 : 1
    slots, _ = allocate(3, {Priority.HIGH: 1, Priority.LOW: 5}, DEFAULT_WEIGHTS, {})
    assert slots == {Priority.HIGH: 1, Priority.NORMAL: 0, Priority.LOW: 2}  # none idle
    slots, _ = allocate(10, {Priority.HIGH: 100, Priority.NORMAL: 100, Priority.LOW: 100},
                        DEFAULT_WEIGHTS, {})
    assert slots == {Priority.HIGH: 6, Priority.NORMAL: 3, Priority.LOW: 1}
    slots, _ = allocate(3, {Priority.LOW: 100}, DEFAULT_WEIGHTS, {})
    assert slots[Priority.LOW] == 3


def test_the_runner_keeps_to_the_slots_its_bundle_launched_with() -> None:
    """A bundle of 10 reports launched under report=5 at concurrency 10: its runner runs five
    at once (each five meet at a barrier), never more."""
    store = Store(MemoryTable())
    ids = [f"r{i}" for i in range(10)]
    jobs = [Job(job_id=i, kind="report", payload={}, estimated_seconds=0.1) for i in ids]
    bundle = Bundle("b1", ids, kind="report")
    for j in jobs:
        j.bundle_id = "b1"
    store.record([bundle], jobs)
    bundle.slots = launch_slots(bundle, 10, {"report": 5})
    assert bundle.slots == 5
    launch = Launch("L-b1", ["b1"], "longjobs-worker:1")
    store.begin_launch(launch, [bundle])
    store.finish_launch(launch, LaunchOutcome(assigned=[("b1", ARN)]), {})
    together = threading.Barrier(5, timeout=BOUND)
    gauge = Gauge()

    def handler(payload: dict[str, object], ctx: JobContext) -> str:
        gauge.enter()
        try:
            together.wait()
        finally:
            gauge.leave()
        return "ok"

    worker(store, 10, {"report": handler}).run()
    assert all(job(store, i).state == JobState.SUCCEEDED for i in ids)
    assert gauge.most["all"] == 5
