"""An array's retry carried page by page on its parent (dispatcher/store/array_retry.py): cut
short at any write, it leaves no child running that its parent counts ended and no parent
decided from children not yet retried, and the next tick carries it to its end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from dispatcher.domain import arrays
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.ports.table import Set, Update
from dispatcher.store import array_retry
from dispatcher.store import codec as r
from dispatcher.store.array_ops import array_counts
from tests.model_arrays import array_problems
from tests.model_checks import View
from tests.model_faults import FaultyTable, LambdaDied, model_store
from tests.twins import Twins
from tests.twins.test_array_jobs import drive

SIZE = 250  # three pages of children
FAILING = len(range(0, SIZE, 3))


def failing_first(ran: Counter[str]) -> Callable[[Job], JobState]:
    """Every third child fails its first run; every other run succeeds."""
    def outcome(job: Job) -> JobState:
        first = ran[job.job_id] == 1  # counted before the outcome is asked
        return JobState.FAILED if first and (job.array_index or 0) % 3 == 0 \
            else JobState.SUCCEEDED
    return outcome


def failed_array(t: Twins) -> Counter[str]:
    """Array ``a`` of SIZE children, each run once, every third FAILED: one more than it
    tolerates, so the parent is FAILED once the last of them is read."""
    t.client().submit("k", {}, job_id="a", array_size=SIZE, max_attempts=1,
                      estimated_seconds=1, tolerated_failures=FAILING - 1)
    ran: Counter[str] = Counter()
    drive(t, 8, failing_first(ran), ran)
    parent = t.job("a")
    assert parent is not None and parent.state == JobState.FAILED, parent
    assert len(ran) == SIZE
    return ran


def problems(t: Twins) -> list[str]:
    """What the system model checks of every array after each step (tests/model_arrays.py):
    no child the parent counts ended is unfinished, the parent is its children's aggregate,
    an undecided parent has its open marker, no recorded child is gone."""
    return array_problems(View.read(t.table, t.queue), ())


@pytest.mark.parametrize("writes", [0, 1, 2, 3])
def test_a_retry_cut_short_at_any_write_is_carried_to_its_end_by_the_ticks(
        writes: int) -> None:
    """Its writes: the parent reopened, then one transaction a page (three pages)."""
    t = Twins()
    t.table = FaultyTable(t.clock)
    t.store = model_store(t.table, t.clock)
    ran = failed_array(t)
    t.table.crash_after(writes)
    with pytest.raises(LambdaDied):
        t.client().retry("a")
    t.table.revive()
    assert problems(t) == []
    cursor = t.table.snapshot()[r.job_key("a")].array_retry_next
    assert cursor == (None if writes == 3 else min(100 * writes, SIZE))
    for _ in range(12):  # 84 retried children, each in a bundle of its own, 10 tasks at once
        drive(t, 1, ran=ran)
        assert problems(t) == []
    parent = t.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED, parent.reason
    assert {j for j, n in ran.items() if n == 2} == {
        arrays.child_id("a", i) for i in range(0, SIZE, 3)}
    assert set(ran.values()) == {1, 2}
    assert t.table.snapshot()[r.job_key("a")].array_retry_next is None


def cut_after_its_first_page() -> tuple[Twins, Counter[str]]:
    """A failed array whose retry died after reopening it and retrying its first page."""
    t = Twins()
    t.table = FaultyTable(t.clock)
    t.store = model_store(t.table, t.clock)
    ran = failed_array(t)
    t.table.crash_after(1)
    with pytest.raises(LambdaDied):
        t.client().retry("a")
    t.table.revive()
    assert t.table.snapshot()[r.job_key("a")].array_retry_next == 100
    # `jobs show` says so.
    assert array_counts("a", t.table.snapshot()[r.job_key("a")])["retrying"] == \
        f"100 of {SIZE} children looked at"
    return t, ran


def test_a_cancel_ends_a_retry_in_progress_and_cancels_what_it_retried() -> None:
    t, ran = cut_after_its_first_page()
    t.client().cancel("a")
    parent = t.job("a")
    assert parent is not None and parent.state == JobState.CANCELLED
    assert t.table.snapshot()[r.job_key("a")].array_retry_next is None
    children = [t.job(arrays.child_id("a", i)) for i in range(SIZE)]
    assert all(c is not None and c.state in TERMINAL_JOB_STATES for c in children)
    before = Counter(ran)
    drive(t, 4, ran=ran)
    assert ran == before  # no child runs again, and the later pages were never retried
    assert r.array_key("a") not in t.table.snapshot()  # settled and closed


def test_children_failing_again_past_the_tolerance_decide_the_parent_and_end_the_retry(
        ) -> None:
    t, _ = cut_after_its_first_page()
    # The first page's retried children run and fail again; the parent now tolerates 10.
    for i in range(0, 100, 3):
        job = t.job(arrays.child_id("a", i))
        assert job is not None and job.state == JobState.PENDING
        t.table.write(Update(r.job_key(job.job_id), [Set("state", "FAILED")]))
    t.table.write(Update(r.job_key("a"), [Set("array_tolerated", 10)]))
    [array] = t.store.open_arrays()
    settled = t.store.settle_array(array, pages=1)  # one more page retried, then read
    assert settled.parent.state == JobState.FAILED
    rec = t.table.snapshot()[r.job_key("a")]
    assert rec.array_retry_next is None and rec.state == "FAILED"
    assert rec.reason is not None and rec.reason.endswith(
        f"; its retry ended at child 200 of {SIZE}")
    assert problems(t) == []
    # The page after it was never retried: its failed children are as they were.
    assert {t.job(arrays.child_id("a", i)).state  # type: ignore[union-attr]
            for i in range(201, SIZE, 3)} == {JobState.FAILED}
    t.stages().tick.tick()  # it settles the rest, and closes the array
    assert problems(t) == []


def test_two_processes_carrying_one_retry_never_retry_a_child_twice() -> None:
    t, _ = cut_after_its_first_page()
    [array] = t.store.open_arrays()
    assert array.retry is not None
    t.store.settle_array(array, pages=1)  # the tick carries the second page...
    assert t.table.snapshot()[r.job_key("a")].array_retry_next == 200
    # ...while another process, still at the second page, is refused and stops.
    assert array_retry.go_on(t.store, array.retry) == 100
    retried = [j for j in t.jobs() if j.array_parent == "a" and j.state == JobState.PENDING]
    assert len(retried) == len(range(0, 200, 3))
    assert all(len([h for h in j.history if "retried_at" in h]) == 1 for j in retried)


def test_a_page_of_more_ended_children_than_a_transaction_holds_retries_each_once() -> None:
    """100 FAILED children: two transactions a page (49 retries fill one). The carrier dies
    after the first; those children run and fail again before the next carrier reads the
    page: they are below the cursor, so they are not retried again."""
    t = Twins()
    t.table = FaultyTable(t.clock)
    t.store = model_store(t.table, t.clock)
    t.client().submit("k", {}, job_id="a", array_size=100, max_attempts=1,
                      estimated_seconds=1, tolerated_failures=99)
    drive(t, 4, lambda job: JobState.FAILED)
    t.table.write(Update(r.job_key("a"), [Set("array_tolerated", 0), Set("state", "FAILED")]))
    t.table.crash_after(1)  # the reopening, then the first transaction of the page
    with pytest.raises(LambdaDied):
        t.client().retry("a")
    t.table.revive()
    cursor = t.table.snapshot()[r.job_key("a")].array_retry_next
    assert cursor is not None and 0 < cursor < 100
    for i in range(int(cursor)):  # the first transaction's children fail again
        t.table.write(Update(r.job_key(arrays.child_id("a", i)), [Set("state", "FAILED")]))
    [array] = t.store.open_arrays()
    t.store.settle_array(array)
    retried = Counter(len([h for h in job.history if "retried_at" in h])
                      for job in t.jobs() if job.array_parent == "a")
    assert retried == Counter({1: 100})
    assert t.table.snapshot()[r.job_key("a")].array_retry_next is None
