"""Reads of the status index over several partition keys: one state of the jobs is spread over
shards (:func:`dispatcher.store.codec.job_statuses`), and a reader wants them as one index.

The Table port queries one partition key; merging is the store's, written once for every
backend. Each partition answers in ``status_at`` order, so the merge is ``heapq.merge`` of
the partitions' answers, cut at ``limit``: the first ``limit`` items overall are among the
first ``limit`` of each partition, so :func:`query` reads no partition past ``limit`` items
(whatever the table holds), and each only as far as the merge takes from it;
:func:`newest_matching` reads each at most ``read_at_most``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from functools import partial

from dispatcher.ports.table import Condition, Record, Table

# Rows per query of a walk through every item (pages): 100, one BatchGetItem's worth.
PAGE = 100


def _order(rec: Record) -> tuple[str, str]:
    # The twin's order within one partition (status_at, ties by pk); the merge keeps it.
    return rec.status_at or "", rec.pk


def start(key: str, after: tuple[str, str] | None) -> Record | None:
    """Where a read of partition ``key`` goes on past ``after`` (``(status_at, pk)`` of the
    last row of a merged page, which may be of another partition): the port's ``after`` takes
    any position within the query's range, not only an item it returned (:func:`query` keeps
    it within)."""
    return None if after is None else Record(pk=after[1], status_key=key, status_at=after[0])


def query(table: Table, keys: list[str], *, at_most: str | None = None,
          at_least: str | None = None, limit: int | None = None,
          newest_first: bool = False, where: Condition | None = None,
          after: tuple[str, str] | None = None, fan_out: Executor | None = None
          ) -> list[Record]:
    """``Table.query`` over every key of ``keys`` as one index: ordered by ``status_at``
    (newest first if asked), at most ``limit`` items after the filter ``where``; ``after``:
    past this position (``(status_at, pk)``, in the order asked), a page's cursor.

    With a ``limit``, each partition is read a short run at a time, only as the merge reaches
    its end: the first run ``ceil(limit / len(keys)) + 1`` rows, each next one twice as long
    (at most ``limit``), so a page of 50 over 54 partitions reads about 50 rows plus two per
    partition, not 50 per partition. ``fan_out``: the first runs are read at once on it (an
    operator far from the table's region waits for a round trip per ``fan_out`` worker's share
    of them, not one a partition; later runs are read one at a time)."""
    if limit is not None and limit <= 0:
        return []
    # DynamoDB refuses a start key outside the query's range ("The provided starting key does
    # not match the range key predicate"): a cursor past the range's far end leaves nothing to
    # read, one before its near end starts at that end (a window that moved since the page
    # before, or an `until` older than a `since`).
    if after is not None:
        far, near = (at_least, at_most) if newest_first else (at_most, at_least)
        if far is not None and (after[0] < far if newest_first else after[0] > far):
            return []
        if near is not None and (after[0] > near if newest_first else after[0] < near):
            after = None
    if limit is None or len(keys) == 1:
        answers = [table.query(k, at_most=at_most, at_least=at_least, limit=limit,
                               newest_first=newest_first, where=where, after=start(k, after))
                   for k in keys]
        if len(answers) == 1:
            return answers[0]
        return list(heapq.merge(*answers, key=_order, reverse=newest_first))
    first = min(limit, -(-limit // len(keys)) + 1)

    def run(key: str, past: Record | None, size: int) -> list[Record]:
        return table.query(key, at_most=at_most, at_least=at_least, limit=size,
                           newest_first=newest_first, where=where, after=past)

    def runs(key: str, ready: list[Record] | None) -> Iterator[Record]:
        past, size, read = start(key, after), first, 0
        while read < limit:
            rows = run(key, past, size) if ready is None else ready
            ready = None
            yield from rows
            read += len(rows)
            if len(rows) < size:
                return
            past, size = rows[-1], min(2 * size, limit - read)

    firsts = _at_once(fan_out, [partial(run, k, start(k, after), first) for k in keys])
    merged = heapq.merge(*(runs(k, f) for k, f in zip(keys, firsts, strict=True)), key=_order,
                         reverse=newest_first)
    return list(itertools.islice(merged, limit))


def _at_once(fan_out: Executor | None,
             reads: list[Callable[[], list[Record]]]) -> list[list[Record] | None]:
    """Each read's answer, made at once on ``fan_out``; without one, none made yet (each is
    made when its partition is first reached)."""
    if fan_out is None:
        return [None] * len(reads)
    return list(fan_out.map(lambda read: read(), reads))


def newest_matching(table: Table, keys: list[str], match: Callable[[Record], bool], *,
                    limit: int, read_at_most: int, after: tuple[str, str] | None = None,
                    fan_out: Executor | None = None) -> list[Record]:
    """The newest ``limit`` rows of ``keys`` that ``match``, among the newest ``read_at_most``
    of each key: a bounded search where a filter would read a whole partition.

    DynamoDB reads, and charges for, every row a filtered query passes over before it finds
    ``limit`` matches (with a Limit of six, "DynamoDB reads up to six items, and then returns
    only those that match the filter expression":
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Other.html); the
    port's ``limit`` counts matches, so a filter that matches little would read the partition
    to its end. Here each key is read newest first with no filter, a short run at a time
    and only as the merge reaches its end (as :func:`query`: ``ceil(limit / len(keys)) + 1``
    rows first, then twice as many a query up to :data:`PAGE`), until the merge has ``limit``
    matches or the key's ``read_at_most`` rows were read; ``after``: past that position (a
    page's cursor). So a filter that matches one row in 20 reads at least 20 rows per match shown
    (plus a run per key), not ``limit`` matches' worth from every key. ``fan_out``: the first
    runs are read at once on it."""
    first = min(limit, -(-limit // len(keys)) + 1, PAGE, read_at_most)

    def run(key: str, past: Record | None, size: int) -> list[Record]:
        return table.query(key, limit=size, newest_first=True, after=past)

    def matches(key: str, ready: list[Record] | None) -> Iterator[Record]:
        past, size, read = start(key, after), first, 0
        while read < read_at_most:
            size = min(size, PAGE, read_at_most - read)
            rows = run(key, past, size) if ready is None else ready
            ready = None
            read += len(rows)
            yield from (rec for rec in rows if match(rec))
            if len(rows) < size:
                return
            past, size = rows[-1], 2 * size

    firsts = _at_once(fan_out, [partial(run, k, start(k, after), first) for k in keys])
    merged = heapq.merge(*(matches(k, f) for k, f in zip(keys, firsts, strict=True)),
                         key=_order, reverse=True)
    return list(itertools.islice(merged, limit))


def pages(table: Table, keys: list[str], *, at_least: str | None = None,
          where: Condition | None = None, page: int = PAGE) -> Iterator[list[Record]]:
    """Every item of ``keys`` (after the filter ``where``), key by key, each key in its order
    (``status_at``, then ``pk``), ``page`` rows per query: a reader holds one page, whatever
    the table holds. Each query starts after the last row of the one before (``after``), so
    rows that stay in the index (not acted on, or acted on and still there) are not met
    again, and rows that leave it are not skipped over."""
    for key in keys:
        after: Record | None = None
        while True:
            rows = table.query(key, at_least=at_least, where=where, limit=page, after=after)
            if rows:
                yield rows
            if len(rows) < page:
                break
            after = rows[-1]


def count(table: Table, keys: list[str], *, at_least: str | None = None,
          where: Condition | None = None, fan_out: Executor | None = None) -> int:
    """``Table.count`` summed over ``keys`` (one COUNT query each; at once on ``fan_out``)."""
    if fan_out is None:
        return sum(table.count(k, at_least=at_least, where=where) for k in keys)
    return sum(fan_out.map(lambda k: table.count(k, at_least=at_least, where=where), keys))


def full(table: Table, rows: list[Record]) -> list[Record]:
    """The whole items of index rows (the index projects only what its readers filter and
    show: ``dispatcher.ports.record.INDEX_ATTRIBUTES``), in the rows' order: one BatchGetItem
    per 100 (strongly consistent). An item gone since the query is left out."""
    if not rows:
        return []
    found = {rec.pk: rec for rec in table.get_many([rec.pk for rec in rows])}
    return [found[rec.pk] for rec in rows if rec.pk in found]
