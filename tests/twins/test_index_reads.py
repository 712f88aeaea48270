"""Lists over the status index read about what they show: each partition of a state (and
each state, for a list of every state) is read a short run at a time, only as the merge
reaches its end. Counts of the rows the table returns are asserted, and every page, followed
by its cursor, is the brute-force answer (newest first, nothing repeated, nothing missed)."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from dispatcher.domain.jobs import Job, JobState
from dispatcher.ops.queries import Queries
from dispatcher.ports.table import Record
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable

NOW = 1_800_000_000.0
STATES = [JobState.SUCCEEDED, JobState.FAILED, JobState.PENDING, JobState.CANCELLED,
          JobState.RUNNING]


class Counting(MemoryTable):
    """The table twin, counting the index rows its queries return."""

    def __init__(self) -> None:
        super().__init__(clock=lambda: NOW)
        self.rows = 0

    def query(self, *args: Any, **kwargs: Any) -> list[Record]:
        out = super().query(*args, **kwargs)
        self.rows += len(out)
        return out


def table_of(n: int, seed: int, kinds: int = 20) -> tuple[Counting, list[Record]]:
    rng = random.Random(seed)
    table = Counting()
    for i in range(n):
        state = rng.choices(STATES, [80, 6, 6, 4, 4])[0]
        # A few share a creation time: the cursor is (time, key), not time alone.
        job = Job(f"j{i:05d}", f"kind-{i % kinds}", {}, state=state,
                  created_at=NOW - 10_000 + (i // 3))
        rec = r.job_record(job)
        table._items[rec.pk] = rec
    return table, list(table._items.values())


def pages(q: Queries, **filters: Any) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = q.page_jobs(limit=50, after=after, **filters)
        seen += [j.job_id for j in page.jobs]
        if page.next is None:
            return seen
        after = page.next


def newest(rows: list[Record], state: str | None = None, kind: str | None = None) -> list[str]:
    chosen = [x for x in rows if (state is None or x.state == state)
              and (kind is None or x.kind == kind)]
    return [x.job_id or "" for x in sorted(chosen, key=lambda x: (x.status_at, x.pk),
                                           reverse=True)]


@pytest.mark.parametrize(("seed", "at_once"), [(1, False), (2, False), (3, True)])
def test_every_page_followed_by_its_cursor_is_the_whole_answer_in_order(
        seed: int, at_once: bool) -> None:
    table, rows = table_of(1500, seed)
    store = Store(table, clock=lambda: NOW)
    if at_once:  # as an operator's client reads: each list's first runs at once
        store.fan_out = ThreadPoolExecutor(max_workers=8)
    q = Queries(store, queue=MemoryQueue(), clock=lambda: NOW)
    assert pages(q) == newest(rows)
    assert pages(q, status="FAILED") == newest(rows, "FAILED")
    assert pages(q, status="SUCCEEDED", kind="kind-7") == newest(rows, "SUCCEEDED", "kind-7")
    assert pages(q, kind="kind-3") == newest(rows, kind="kind-3")
    # Created at least 2,000 s ago (the table's jobs span 10,000 s), with and without a kind.
    old = [x for x in rows if (x.created_at or 0) <= NOW - 2000]
    assert pages(q, until_seconds=2000) == newest(old)
    assert pages(q, status="SUCCEEDED", kind="kind-7", until_seconds=2000) == \
        newest(old, "SUCCEEDED", "kind-7")


def test_a_page_of_every_state_reads_about_what_it_shows() -> None:
    table, _ = table_of(20_000, 7)
    q = Queries(Store(table, clock=lambda: NOW), queue=MemoryQueue(), clock=lambda: NOW)
    partitions = len(JobState) * len(r.job_statuses(JobState.PENDING))
    q.page_jobs(limit=50)
    # 50 shown, the first short run (2 rows) of each partition, and a few runs more where
    # the newest are: every partition read to 51 would be 54 x 51.
    assert table.rows <= 51 + 2 * partitions + 100, table.rows


def test_a_rare_kind_of_a_finished_state_reads_in_proportion_to_its_page() -> None:
    table, _ = table_of(20_000, 7)
    q = Queries(Store(table, clock=lambda: NOW), queue=MemoryQueue(), clock=lambda: NOW)
    page = q.page_jobs(limit=50, status="SUCCEEDED", kind="kind-7")
    assert len(page.jobs) == 50
    # One job in 20 is of the kind: about 20 rows per job shown, plus a run per partition;
    # 50 matches from each of the 9 partitions would be over 9,000.
    assert table.rows <= 20 * 51 * 2, table.rows


class Strict(Counting):
    """Refuses a start key outside the query's range, as DynamoDB does ("The provided starting
    key does not match the range key predicate"); the twin and moto return rows or nothing."""

    def query(self, *args: Any, **kwargs: Any) -> list[Record]:
        after, lo, hi = kwargs.get("after"), kwargs.get("at_least"), kwargs.get("at_most")
        if after is not None and ((lo is not None and (after.status_at or "") < lo)
                                  or (hi is not None and (after.status_at or "") > hi)):
            raise AssertionError(f"start key {after.status_at} outside [{lo}, {hi}]")
        return super().query(*args, **kwargs)


def test_a_cursor_outside_the_window_reads_nothing_rather_than_a_refused_start() -> None:
    table = Strict()
    for i in range(300):
        rec = r.job_record(Job(f"j{i:05d}", "k", {}, state=JobState.SUCCEEDED,
                               created_at=NOW - 10_000 + 30 * i))
        table._items[rec.pk] = rec
    q = Queries(Store(table, clock=lambda: NOW), queue=MemoryQueue(), clock=lambda: NOW)
    # An `until` older than the `since`: nothing, with no refused query.
    assert q.page_jobs(since_seconds=3600, until_seconds=7200).jobs == []
    # A window that moved on since the page before: its cursor is past the window's far end.
    first = q.page_jobs(status="SUCCEEDED", since_seconds=3600, limit=10)
    assert first.next is not None
    later = Queries(Store(table, clock=lambda: NOW + 7200), queue=MemoryQueue(),
                    clock=lambda: NOW + 7200)
    assert later.page_jobs(status="SUCCEEDED", since_seconds=3600, after=first.next).jobs == []
    # Within the window, a cursor pages on as before.
    second = q.page_jobs(status="SUCCEEDED", since_seconds=3600, limit=10, after=first.next)
    assert len(second.jobs) == 10
