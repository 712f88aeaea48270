"""The twin table with a long history behind it, cheap to hold, counting the items it reads.

A million finished jobs as :class:`~dispatcher.testing.memory_table.MemoryTable` items take
~2 GB and ~13 s of CPU to build, and every query of the twin walks them all; the operator reads
under test only need them to be there, in the status index, answering as the twin would. So
:class:`HistoryTable` holds them arithmetically: history job ``i`` is ``h<i>``, finished in
``TERMINAL_JOB_STATES[i % 4]``, created at ``start + i * step`` (its index time), in its shard
(the index keeps each partition as a sorted array of ``i``), with a DONE bundle per
:data:`JOBS_PER_BUNDLE` jobs, relaunched once (``attempt`` 2). A history item becomes a
:class:`Record` only when a read reaches it. ``tests/twins/test_bounded_reads.py`` checks at a
small size that every read answers exactly as the plain twin holding the same items does.

``items_read`` counts what DynamoDB would read and charge for: a GetItem or a BatchGetItem key,
one each; a COUNT query, every item its key condition matches (a filter is applied after the
read: "A filter expression is applied after a Query finishes, but before the results are
returned ... the same amount of read capacity is consumed"); a query, the items its key
condition reaches in index order until ``limit`` of them passed the filter.
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.FilterExpression.html
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from array import array
from collections.abc import Callable, Iterator
from typing import Any

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.ports.table import Condition, Record
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable, evaluate

JOBS_PER_BUNDLE = 10


class History:
    """``jobs`` finished jobs created ``step`` seconds apart from ``start``, and their bundles."""

    def __init__(self, jobs: int, start: float, step: float = 1.0) -> None:
        self.jobs, self.start, self.step = jobs, start, step
        self.parts: dict[str, array[int]] = {}
        for i in range(jobs):  # ascending i: each partition sorted by index time
            self.parts.setdefault(self.status_key(i), array("l")).append(i)
        # Bundles are negative numbers: -1 - b for bundle b (one partition: BUNDLE#DONE).
        self.parts[r.bundle_status(BundleState.DONE)] = array(
            "l", range(-1, -1 - -(-jobs // JOBS_PER_BUNDLE), -1))

    @staticmethod
    def state(i: int) -> JobState:
        return TERMINAL_JOB_STATES[i % len(TERMINAL_JOB_STATES)]

    def status_key(self, i: int) -> str:
        if i < 0:
            return r.bundle_status(BundleState.DONE)
        return r.job_status(self.state(i), f"h{i:07}")

    def at(self, i: int) -> float:
        """Item ``i``'s index time (a bundle's: when its last job was created)."""
        if i < 0:
            return self.start + ((-1 - i) * JOBS_PER_BUNDLE + JOBS_PER_BUNDLE - 1) * self.step
        return self.start + i * self.step

    def pk(self, i: int) -> str:
        if i < 0:
            return r.bundle_key(f"hb{-1 - i:06}")
        job_id = f"h{i:07}"
        return r.rejection_key(job_id) if self.state(i) == JobState.REJECTED \
            else r.job_key(job_id)

    def record(self, i: int) -> Record:
        """Item ``i`` as the index holds it (its keys and the projected attributes)."""
        t = self.at(i)
        if i < 0:
            b = -1 - i
            ids = [f"h{j:07}" for j in range(b * JOBS_PER_BUNDLE,
                                             min(self.jobs, (b + 1) * JOBS_PER_BUNDLE))]
            return Record(self.pk(i), status_key=self.status_key(i), status_at=r.iso(t),
                          state=str(BundleState.DONE), created_at=t, updated_at=t,
                          job_ids=ids, attempt=2, task_definition="longjobs-worker:1",
                          task_arn=f"arn:history:{b}")
        state = self.state(i)
        return Record(self.pk(i), status_key=self.status_key(i), status_at=r.iso(t),
                      state=str(state), job_id=f"h{i:07}",
                      kind=None if state == JobState.REJECTED else "history",
                      created_at=t, updated_at=t, attempts=1, max_attempts=3,
                      bundle_id=None if state == JobState.REJECTED
                      else f"hb{i // JOBS_PER_BUNDLE:06}")

    def span(self, status_key: str, at_most: str | None, at_least: str | None) -> array[int]:
        """The items of ``status_key`` its key condition matches, in index order."""
        part = self.parts.get(status_key)
        if part is None:
            return array("l")
        order: Callable[[int], str] = lambda i: r.iso(self.at(i))  # noqa: E731
        lo = 0 if at_least is None else bisect.bisect_left(part, at_least, key=order)
        hi = len(part) if at_most is None else bisect.bisect_right(part, at_most, key=order)
        return part[lo:hi]

    def find(self, pk: str) -> int | None:
        kind, _, ident = pk.partition("#")
        try:
            if kind == "BUNDLE" and ident.startswith("hb"):
                b = int(ident[2:])
                return -1 - b if b * JOBS_PER_BUNDLE < self.jobs else None
            if kind in ("JOB", "REJECT") and ident.startswith("h"):
                i = int(ident[1:])
                return i if 0 <= i < self.jobs and self.pk(i) == pk else None
        except ValueError:
            return None
        return None


def _order(rec: Record) -> tuple[str, str]:
    return rec.status_at or "", rec.pk


class HistoryTable(MemoryTable):
    """The twin, with ``history`` behind its own items, counting the items read."""

    def __init__(self, clock: Callable[[], float], history: History | None = None) -> None:
        super().__init__(clock)
        self.history = history or History(0, 0.0)
        self.items_read = 0

    def get(self, pk: str) -> Record | None:
        self.items_read += 1
        i = self.history.find(pk)
        return super().get(pk) if i is None else self.history.record(i)

    def get_many(self, pks: list[str]) -> list[Record]:
        keys = list(dict.fromkeys(pks))
        self.items_read += len(keys)
        mine = {rec.pk: rec for rec in super().get_many(keys)}
        found = [(pk, self.history.find(pk)) for pk in keys]
        return [rec for pk, i in found
                if (rec := mine.get(pk) if i is None else self.history.record(i)) is not None]

    def _rows(self, status_key: str, at_most: str | None, at_least: str | None,
              newest_first: bool, after: Record | None) -> Iterator[Record]:
        """Every item the key condition matches past ``after`` (DynamoDB's ExclusiveStartKey:
        reading starts there), the twin's and the history's, in index order (the history's
        made only as the reader reaches them)."""
        mine = self._filtered(self._in_range(status_key, at_most, at_least), None, None)
        span = self.history.span(status_key, at_most, at_least)
        if after is not None:
            mark = _order(after)
            mine = [rec for rec in mine
                    if (_order(rec) < mark if newest_first else _order(rec) > mark)]
            h = self.history
            cut = (bisect.bisect_left if newest_first else bisect.bisect_right)(
                span, mark, key=lambda i: (r.iso(h.at(i)), h.pk(i)))
            span = span[:cut] if newest_first else span[cut:]
        old = (self.history.record(i) for i in (reversed(span) if newest_first else span))
        return heapq.merge(reversed(mine) if newest_first else mine, old, key=_order,
                           reverse=newest_first)

    def count(self, status_key: str, *, at_least: str | None = None,
              where: Condition | None = None) -> int:
        mine = self._filtered(self._in_range(status_key, None, at_least), None, None)
        span = self.history.span(status_key, None, at_least)
        self.items_read += len(mine) + len(span)  # a COUNT reads every item it matches
        if where is None:
            return len(mine) + len(span)
        return sum(1 for rec in itertools.chain(mine, map(self.history.record, span))
                   if evaluate(where, rec))

    def query(self, status_key: str, *, at_most: str | None = None,
              at_least: str | None = None, limit: int | None = None,
              newest_first: bool = False, where: Condition | None = None,
              after: Record | None = None) -> list[Record]:
        if limit is not None and limit <= 0:
            return []
        out: list[Record] = []
        for rec in self._rows(status_key, at_most, at_least, newest_first, after):
            self.items_read += 1
            if evaluate(where, rec):
                out.append(rec)
                if limit is not None and len(out) >= limit:
                    break
        return out

    def reads(self, call: Callable[[], Any]) -> tuple[Any, int]:
        """What ``call`` returns, and the items it read."""
        before = self.items_read
        result = call()
        return result, self.items_read - before
