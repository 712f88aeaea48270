"""DynamoDB capacity of a recorded run: WCU and RCU per job, and the write rate of the hottest
partition key of the table and of each index at a given admission rate.

Input: the calls an :class:`dispatcher.testing.proxy.AwsProxy` recorded with
``capture_items`` (each write's items before and after, each read's sizes). DynamoDB's rules
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html,
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html,
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html):

- a write costs 1 WCU per KB (rounded up) of the larger of the item before and after it, a
  refused conditional write too; one in a transaction (a ConditionCheck too) costs twice that;
- each index whose entry the write changes is written as well, 1 WCU per KB of the entry
  (its keys, projected attributes, and 100 bytes of overhead per index item): a put for a new
  entry, a delete for one gone, and a delete plus a put when an index key changes; a write that
  changes no projected attribute writes nothing to the index. Index writes are not doubled by
  a transaction (the index is updated after it, eventually consistent);
- a strongly consistent read costs 1 RCU per 4 KB, an eventually consistent one half;
  GetItem and BatchGetItem round each item up to 4 KB, a Query its whole answer. A Query's
  filtered-out items are read too: counted at the answer's mean size (a COUNT query, which
  returns none, at :data:`COUNTED_ENTRY_BYTES` each).

A partition key takes at most 1,000 WCU/s
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html).
The rate of a key at ``rate`` jobs/s is its WCU per job of the run times ``rate``: the steady
state in which every job's writes are spread in time as in the run. Bursts above it (a tick
recording a wave at once) are what the headroom below 1,000 is for. A run of a few hundred jobs
spreads them over shards less evenly than millions would: its hottest shard is an upper
estimate.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from dispatcher.testing.item_changes import Item, ItemChange, ReadSizes, item_bytes

PARTITION_WCU_LIMIT = 1000.0
INDEX_ITEM_OVERHEAD = 100  # bytes per index item (GSI.html, "storage considerations")
COUNTED_ENTRY_BYTES = 300  # an index entry a COUNT query reads: a job's projected entry
TABLE = "table"  # the name the base table's figures go by


@dataclass(frozen=True)
class IndexSpec:
    """One global secondary index: its keys and projection (``ALL``, ``KEYS_ONLY`` or
    ``INCLUDE`` of ``attributes``)."""

    name: str
    hash_key: str
    range_key: str
    projection: str
    attributes: frozenset[str] = frozenset()
    table_keys: tuple[str, ...] = ("pk",)

    def entry(self, item: Item | None) -> Item | None:
        """The index's entry for ``item`` (None: the item is not in the index)."""
        if item is None or self.hash_key not in item or self.range_key not in item:
            return None
        if self.projection == "ALL":
            return dict(item)
        keep = {*self.table_keys, self.hash_key, self.range_key}
        if self.projection == "INCLUDE":
            keep |= self.attributes
        return {k: v for k, v in item.items() if k in keep}


def unsharded(key: str) -> str:
    """The partition key before the index was sharded: ``JOB#PENDING#3`` -> ``JOB#PENDING``."""
    return re.sub(r"#\d+$", "", key)


def _wcu(size: int) -> int:
    return max(1, math.ceil(size / 1024))


@dataclass
class Capacity:
    """The run's write units by (index or :data:`TABLE`, partition key), and its read units."""

    jobs: int
    writes: Counter[tuple[str, str]] = field(default_factory=Counter)
    reads: float = 0.0

    def wcu_per_job(self, where: str | None = None) -> float:
        return sum(n for (w, _), n in self.writes.items()
                   if where is None or w == where) / self.jobs

    def rcu_per_job(self) -> float:
        return self.reads / self.jobs

    def places(self) -> list[str]:
        return sorted({w for w, _ in self.writes}, key=lambda w: (w != TABLE, w))

    def hottest(self, where: str | None = None) -> tuple[str, str, float]:
        """(index or table, partition key, WCU per job) of the hottest partition key."""
        (w, key), n = max(((k, n) for k, n in self.writes.items()
                           if where is None or k[0] == where), key=lambda kn: kn[1])
        return w, key, n / self.jobs

    def rate(self, where: str | None, jobs_per_second: float) -> float:
        """WCU/s of the hottest partition key (of ``where``, or anywhere) at that rate."""
        return self.hottest(where)[2] * jobs_per_second

    def max_jobs_per_second(self) -> float:
        """The admission rate at which the hottest partition key reaches 1,000 WCU/s."""
        return PARTITION_WCU_LIMIT / self.hottest()[2]


def _read_units(read: ReadSizes) -> float:
    unit = 1.0 if read.consistent else 0.5
    if read.per_item:
        return unit * sum(max(1, math.ceil(s / 4096)) for s in read.sizes)
    returned = sum(read.sizes)
    mean = returned / len(read.sizes) if read.sizes else COUNTED_ENTRY_BYTES
    size = returned + max(0, read.scanned - len(read.sizes)) * mean
    return unit * max(1, math.ceil(size / 4096))


def model(calls: Iterable[object], jobs: int, indexes: list[IndexSpec], *,
          partition: Callable[[str], str] = lambda key: key) -> Capacity:
    """The capacity of the recorded ``calls`` (:class:`RecordedCall`), for ``jobs`` jobs.
    ``partition`` maps an index key to the partition key it is counted under (``unsharded``:
    the key shape before sharding)."""
    cap = Capacity(jobs)
    for call in calls:
        read: ReadSizes | None = getattr(call, "read", None)
        if read is not None:
            cap.reads += _read_units(read)
        for change in getattr(call, "items", ()):
            _write(cap, change, indexes, partition)
    return cap


def _pk(change: ItemChange) -> str:
    item = change.after or change.before or {}
    return str(item.get("pk", {}).get("S", "?"))


def _write(cap: Capacity, change: ItemChange, indexes: list[IndexSpec],
           partition: Callable[[str], str]) -> None:
    size = max(item_bytes(change.before or {}), item_bytes(change.after or {}))
    cap.writes[TABLE, _pk(change)] += _wcu(size) * (2 if change.transactional else 1)
    if not change.done or change.check_only:
        return
    for spec in indexes:
        old, new = spec.entry(change.before), spec.entry(change.after)
        if old == new:
            continue

        def key(entry: Item, spec: IndexSpec = spec) -> tuple[str, str]:
            return spec.name, partition(str(entry[spec.hash_key].get("S")))

        def cost(entry: Item) -> int:
            return _wcu(item_bytes(entry) + INDEX_ITEM_OVERHEAD)

        moved = old is not None and new is not None and (
            old[spec.hash_key] != new[spec.hash_key] or old[spec.range_key] != new[spec.range_key])
        if old is not None and (new is None or moved):
            cap.writes[key(old)] += cost(old)  # the old entry's delete
        if new is not None:
            cap.writes[key(new)] += cost(new) if old is None or moved \
                else max(cost(old), cost(new))


def report(cap: Capacity, jobs_per_second: float) -> list[str]:
    """The figures, one line each; the last names the hottest partition key of all."""
    lines = [f"per job: {cap.wcu_per_job():.2f} WCU ({cap.wcu_per_job(TABLE):.2f} table, "
             + ", ".join(f"{cap.wcu_per_job(w):.2f} {w}" for w in cap.places() if w != TABLE)
             + f"), {cap.rcu_per_job():.2f} RCU"]
    for where in cap.places():
        _, key, per_job = cap.hottest(where)
        lines.append(f"hottest partition key of {where}: {key} {per_job:.3f} WCU/job = "
                     f"{per_job * jobs_per_second:,.0f} WCU/s at {jobs_per_second:,.0f} jobs/s")
    lines.append(f"jobs/s before a partition key passes {PARTITION_WCU_LIMIT:,.0f} WCU/s: "
                 f"{cap.max_jobs_per_second():,.0f}")
    lines.append(f"capacity: hottest partition = {cap.rate(None, jobs_per_second):,.0f} WCU/s "
                 f"at {jobs_per_second:,.0f} jobs/s")
    return lines


def specs(schema: dict[str, object], include: Iterable[str]) -> list[IndexSpec]:
    """The index specs of a key schema as ``dispatcher.aws.dynamodb.model.key_schema`` gives
    it; ``include``: the attributes an INCLUDE index projects."""
    indexes = schema["indexes"]
    assert isinstance(indexes, dict)
    return [IndexSpec(name, spec["hash_key"], spec["range_key"], spec["projection"],
                      frozenset(include) if spec["projection"] == "INCLUDE" else frozenset())
            for name, spec in indexes.items()]
