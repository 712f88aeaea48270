"""DynamoDB's write limit per partition key in the model of AWS
(dispatcher/simulation/partitions.py): what each write costs which key, that a key past its
limit in a second is throttled and tried again as the adapters do, and that the model's tables
share the count."""

from __future__ import annotations

import pytest

from dispatcher.ports.record import Record
from dispatcher.ports.table import Put, Set, TableUnavailable, TransactionCancelled, Update
from dispatcher.simulation.aws_model import Calls, ItemTimes, Latencies, ModelTable
from dispatcher.simulation.partitions import Partitions
from dispatcher.simulation.virtual_time import VirtualClock
from dispatcher.testing.memory_table import MemoryTable

T0 = 1_700_000_000.0
PENDING, RUNNING = "JOB#PENDING#3", "JOB#RUNNING#3"


def job(pk: str, status_key: str = PENDING) -> Put:
    return Put(Record(pk=pk, status_key=status_key, status_at="2026-12-05T00:00:00Z"))


def world(limit: float) -> tuple[VirtualClock, MemoryTable, Partitions, ModelTable]:
    clock = VirtualClock(T0)
    inner = MemoryTable(clock=clock)
    partitions = Partitions(inner.status_key_of, limit=limit)
    table = ModelTable(inner, Calls(clock, Latencies(), seed=1), ItemTimes(), partitions)
    return clock, inner, partitions, table


def test_a_write_costs_its_item_and_the_index_entries_it_puts_or_moves() -> None:
    inner = MemoryTable()
    partitions = Partitions(inner.status_key_of)
    bundle = "BUNDLE#a"  # an item written often (a job's own key is not counted: see there)
    assert partitions.charges([job(bundle)], transaction=False) == {bundle: 1, PENDING: 1}
    assert partitions.charges([job(bundle)], transaction=True) == {bundle: 2, PENDING: 1}
    assert partitions.charges([job("JOB#a")], transaction=True) == {PENDING: 1}
    inner.write(job(bundle))
    moved = Update(bundle, [Set("status_key", RUNNING)])
    assert partitions.charges([moved], transaction=False) == {
        bundle: 1, PENDING: 1, RUNNING: 1}  # a delete from one key, a put to the other
    kept = Update(bundle, [Set("attempts", 1)])
    assert partitions.charges([kept], transaction=False) == {bundle: 1, PENDING: 1}


def test_a_key_past_its_limit_in_a_second_is_refused_until_the_next() -> None:
    partitions = Partitions(lambda pk: None, limit=3)
    assert partitions.take(T0, {PENDING: 2, "JOB#a": 1})
    assert not partitions.take(T0 + 0.5, {PENDING: 2, "JOB#b": 1})  # 4 > 3: nothing charged
    assert partitions.take(T0 + 0.9, {PENDING: 1, "JOB#b": 1})
    assert partitions.take(T0 + 1.0, {PENDING: 3})  # a new second
    assert partitions.throttled == 1
    assert (partitions.hottest.key, partitions.hottest.wcu) == (PENDING, 3)


def test_a_throttled_write_is_tried_again_later_as_botocore_does() -> None:
    clock, inner, partitions, table = world(limit=2)
    table.write(job("JOB#a"))  # PENDING: 1
    table.write(job("JOB#b"))  # PENDING: 2, its limit in this second
    before = clock()
    table.write(job("JOB#c"))  # throttled until its retries reach the next second
    assert int(clock()) > int(before) and inner.get("JOB#c") is not None
    assert partitions.throttled >= 1
    assert table.calls.counts["PutItem"] == 3 + partitions.throttled  # each attempt a call


def test_a_write_throttled_on_every_attempt_fails_as_the_adapter_does() -> None:
    _, inner, partitions, table = world(limit=1)
    table.calls.retried = lambda api, n: False  # type: ignore[method-assign]  # no retry left
    table.write(job("JOB#a"))
    with pytest.raises(TableUnavailable) as raised:
        table.write(job("JOB#b"))
    assert raised.value.retryable and inner.get("JOB#b") is None
    with pytest.raises(TransactionCancelled) as cancelled:
        table.transact([job("JOB#c")])
    assert cancelled.value.reasons[0] == "ThrottlingError"  # the store tries it again
    assert partitions.throttled == 2
