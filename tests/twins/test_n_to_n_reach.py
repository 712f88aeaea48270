"""An element-wise array whose counterpart has ended far ahead of it is offered as far as the
tick can record, not a fixed window a tick: its children follow their counterparts in the
ticks a plain array of its size takes, however far its frontier has to move."""

from __future__ import annotations

from dispatcher.domain import arrays
from dispatcher.domain.arrays import Tally
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import Put
from dispatcher.stages.n_to_n import frontiers
from dispatcher.store import Store, codec
from dispatcher.store.array_jobs import OpenArray
from tests.twins import Twins
from tests.twins.test_array_jobs import run_launched
from tests.twins.test_n_to_n import _CountingTable, _recorded

SIZE = 3_000


def _ended_array(t: Twins, parent: str, size: int) -> None:
    """An array that ran to its end: its parent and every child SUCCEEDED."""
    t.table.write(Put(codec.job_record(Job(job_id=parent, kind="k", payload={},
                                           state=JobState.SUCCEEDED, array_size=size))))
    for i in range(size):
        t.table.write(Put(codec.job_record(Job(
            job_id=arrays.child_id(parent, i), kind="k", payload={},
            state=JobState.SUCCEEDED, array_parent=parent, array_index=i))))


def _ticks_to_record(t: Twins, parent: str, size: int, most: int = 20) -> int:
    """Ticks until every child of ``parent`` is recorded."""
    stages = t.stages(LONGJOBS_MAX_RUNNING_TASKS="40", LONGJOBS_TASK_CONCURRENCY="20")
    for n in range(1, most + 1):
        stages.tick.tick()
        run_launched(t)
        t.clock.advance(60)
        if sum(1 for j in t.jobs() if j.array_parent == parent) == size:
            return n
    return most + 1


def test_an_element_wise_array_behind_an_ended_one_records_as_a_plain_array_does(
        twins: Twins) -> None:
    _ended_array(twins, "a", SIZE)
    twins.client().submit("k", {}, job_id="plain", array_size=SIZE,
                          estimated_seconds=2)
    plain = _ticks_to_record(twins, "plain", SIZE)
    twins.client().submit("k", {}, job_id="b", array_size=SIZE,
                          depends_on=[{"job_id": "a", "n_to_n": True}], estimated_seconds=2)
    assert _ticks_to_record(twins, "b", SIZE) <= plain


def test_a_frontier_moves_on_a_bounded_read_at_a_time_from_where_it_stopped() -> None:
    table = _CountingTable()
    store = Store(table, clock=lambda: 0.0)
    _recorded(table, "a", JobState.RUNNING, array_size=2500)
    for i in range(2500):
        state = JobState.RUNNING if i == 1500 else \
            JobState.FAILED if i == 1200 else JobState.SUCCEEDED
        _recorded(table, arrays.child_id("a", i), state, array_parent="a", array_index=i)
    parent = _recorded(table, "b", JobState.PENDING, array_size=2500, depends_on=[
        {"job_id": "a", "condition": "succeeded", "n_to_n": True}])
    said = frontiers(store, [OpenArray(parent, 2500, 0, 0, Tally())], 0.0)["b"]
    assert said.limit == 1000 and said.more
    table.batch_gets = 0
    held = said.extend(store)  # from 1000 on, up to the element still running (its page)
    assert said.limit == 1500 and not said.more and table.batch_gets == 6
    assert held == {1200: [{"job_id": "a:1200", "condition": "succeeded"}]} == \
        {i: d for i, d in said.held.items() if i >= 1000}
    assert said.extend(store) == {} and said.limit == 1500 and table.batch_gets == 6
