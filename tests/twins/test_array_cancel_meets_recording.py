"""An array's cancel against the ticks that record its children: a child a tick recorded (one
that died before it counted the child on the parent, or one still recording while the cancel
runs) is cancelled with its array, and none starts after the cancel returned."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from dispatcher.domain import arrays
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import Job, JobState
from dispatcher.store import codec as r
from dispatcher.wiring import pipeline
from tests.twins import Twins
from tests.twins.test_array_jobs import run_launched

SIZE = 300


def children(t: Twins) -> list[Job]:
    return [j for j in t.jobs() if j.array_parent == "a"]


def counted(t: Twins) -> int:
    """The children the parent says are recorded (its ``array_next``)."""
    return int(t.table.snapshot()[r.job_key("a")].array_next or 0)


def none_ran_after(t: Twins, ticks: int = 4) -> Counter[str]:
    ran: Counter[str] = Counter()
    stages = t.stages(LONGJOBS_BUNDLE_MAX_JOBS="40", LONGJOBS_MAX_RUNNING_TASKS="4")
    for _ in range(ticks):
        t.clock.advance(3600)  # leases and the messages' holds run out
        stages.tick.tick()
        run_launched(t, ran=ran)
    return ran


def cancelled_while_recording(t: Twins, stages: pipeline.Stages) -> list[JobState]:
    """Array ``a`` of SIZE children submitted and its parent recorded; then a tick during
    which, right after its first recording of children, an operator cancels the array. The
    cancel's answers (one: the drain records from its pool's threads)."""
    client = t.client()
    client.submit("k", {}, job_id="a", array_size=SIZE, estimated_seconds=1)
    stages.tick.tick()  # the parent
    record = t.store.record
    cancelled: list[JobState] = []
    once = threading.Lock()

    def record_then_cancel(*args: object) -> set[str]:
        out = record(*args)  # type: ignore[arg-type]
        with once:
            if not cancelled:
                cancelled.append(client.cancel("a").state)
        return out

    t.store.record = record_then_cancel  # type: ignore[method-assign]
    try:
        stages.tick.tick()
    finally:
        t.store.record = record  # type: ignore[method-assign]
    return cancelled


def run_to_the_end(t: Twins, stages: pipeline.Stages, ticks: int) -> Counter[str]:
    """``ticks`` ticks a minute apart, every launched bundle run; the runs by job. The array
    ``a`` must end SUCCEEDED."""
    ran: Counter[str] = Counter()
    for _ in range(ticks):
        t.clock.advance(60)
        stages.tick.tick()
        run_launched(t, ran=ran)
    parent = t.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED, parent.reason
    return ran


def test_children_a_dead_tick_recorded_but_never_counted_are_cancelled_with_their_array(
        ) -> None:
    """The tick dies after each of its first writes in turn (a fresh world each time); some
    of those deaths leave children recorded past the parent's count (else this could not
    fail). The array's cancel then cancels every child that exists, and none runs."""
    from tests.model_faults import FaultyTable, LambdaDied, model_store, one_thread

    uncounted = []
    for writes in range(1, 10):
        t = Twins()
        t.table = FaultyTable(t.clock)
        t.store = model_store(t.table, t.clock)
        t.client().submit("k", {}, job_id="a", array_size=SIZE, estimated_seconds=1)
        stages = t.stages(LONGJOBS_BUNDLE_MAX_JOBS="40", LONGJOBS_MAX_RUNNING_TASKS="4")
        stages.tick.tick()  # the parent recorded; its children are recorded from the next tick
        t.table.crash_after(writes)
        with one_thread(), pytest.raises(LambdaDied):
            stages.tick.tick()
        t.table.revive()
        recorded = {j.job_id for j in children(t)}
        uncounted.append(len(recorded) - counted(t))
        assert t.client().cancel("a").state == JobState.CANCELLED
        assert none_ran_after(t) == Counter(), writes
        ended = children(t)
        assert {j.state for j in ended} <= {JobState.CANCELLED}, writes
        assert recorded <= {j.job_id for j in ended}
        assert counted(t) >= len(ended)  # every child that exists is counted on its parent
    assert max(uncounted) > 0


def test_a_tick_recording_children_while_the_array_is_cancelled_starts_none_after(
        twins: Twins) -> None:
    """The cancel runs between two of a tick's recordings of children: what that tick records
    after it (it read the array open at its start) never starts, and the cancel says so."""
    stages = twins.stages(LONGJOBS_BUNDLE_MAX_JOBS="40", LONGJOBS_MAX_RUNNING_TASKS="4")
    assert cancelled_while_recording(twins, stages) == [JobState.CANCELLED]
    assert none_ran_after(twins) == Counter()
    assert {j.state for j in children(twins)} == {JobState.CANCELLED}
    launched = {j for b in twins.bundles() if b.task_arn for j in b.job_ids}
    started = [j for j in children(twins) if j.job_id in launched and j.attempts]
    assert started == []


def test_a_cancelled_arrays_children_cancelled_before_recording_are_retried_with_it(
        twins: Twins) -> None:
    """Children the cancel found offered but not recorded are recorded CANCELLED (so a tick
    still holding them finds them taken); a retry of the array runs them like the others."""
    stages = twins.stages(LONGJOBS_BUNDLE_MAX_JOBS="40", LONGJOBS_MAX_RUNNING_TASKS="4")
    assert cancelled_while_recording(twins, stages) == [JobState.CANCELLED]
    assert twins.client().retry("a").state in (JobState.RUNNING, JobState.PENDING)
    ran = run_to_the_end(twins, stages, 12)
    assert sorted(ran) == sorted(arrays.child_id("a", i) for i in range(SIZE))
    assert set(ran.values()) == {1}


def test_a_cancelled_arrays_retry_waits_for_its_children_still_stopping(
        twins: Twins) -> None:
    """Cancelled while its children's task runs them: their cancel is a request their runner
    honours. A retry now would pass them by (not ended yet) and their runner would then cancel
    them, the array failing after a retry meant to run everything: it is refused, saying how
    many are still stopping and what to do; once they have stopped, the retry runs them all."""
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=4, estimated_seconds=1)
    stages = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="2")
    stages.tick.tick()  # the parent
    stages.tick.tick()  # its children, launched
    assert client.cancel("a").state == JobState.CANCELLED
    stopping = [j for j in children(twins) if j.state == JobState.PENDING]
    assert stopping  # requested of their task, not ended yet
    with pytest.raises(LongjobsError) as refused:
        client.retry("a")
    said = str(refused.value)
    assert f"{len(stopping)} of its children are still stopping" in said, said
    assert "longjobs jobs show a" in said
    run_launched(twins)  # the runner honours the requests
    assert {j.state for j in children(twins)} == {JobState.CANCELLED}
    assert client.retry("a").state in (JobState.RUNNING, JobState.PENDING)
    ran = run_to_the_end(twins, stages, 6)
    assert sorted(ran) == [arrays.child_id("a", i) for i in range(4)]
