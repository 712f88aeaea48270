"""DynamoDB's write limit per partition key, in the model of AWS.

"A single partition key value can support up to 1,000 write capacity units per second"
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html;
the same limit as ``dispatcher.testing.capacity.PARTITION_WCU_LIMIT``, which estimates it from a
recorded run). A write past it is throttled whatever the table's capacity mode: on-demand
tables too (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/
on-demand-capacity-mode.html, "throttling for on-demand tables").

What a write costs each key, as :mod:`dispatcher.testing.capacity` counts it (the items here
are a few hundred bytes: 1 KB each):

- its item's key: 1 WCU, 2 in a transaction (a job's or a page's not counted: each is written
  a few times in all);
- the status index (``status_key``): 1 WCU to the entry's key when the item has one and keeps
  it (a projected attribute changed, as a job's writes do), or 1 to the old key (a delete) and
  1 to the new one (a put) when the write moves it; an index write is not doubled by a
  transaction. A throttled index throttles the table's write
  (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.ThroughputConsiderations.html).

A key's writes are counted per second of virtual time, each in its own second (the model's
threads run on clocks that differ by seconds: a tick's runs ahead of the runners' until the
next event). A write that would take a key past the limit in its second is throttled,
charging nothing; its adapter tries it again as any throttled call
(:mod:`dispatcher.simulation.call_faults`), a moment later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from dispatcher.ports.table import Delete, Op, Put, Remove, Set, Update

PARTITION_WCU_LIMIT = 1000.0
# Items written a handful of times in all, never near the limit in a second: not counted (a
# million jobs' keys would be this model's memory). Their index entries are.
ONE_ITEM_A_FEW_TIMES = ("JOB#", "PAGE#")
STATUS_KEY = "status_key"
# Seconds this far behind the latest written are forgotten (a thread's clock runs behind
# another's by less; a million jobs' items would otherwise stay counted).
KEEP_SECONDS = 300


@dataclass(frozen=True)
class Hottest:
    """The key that took the most WCU in one second, and how many."""

    key: str = ""
    wcu: float = 0.0


class Partitions:
    """WCU per partition key per second of virtual time, shared by every component's table
    (thread-safe). ``index_key_of``: the status index key of an item as stored now (None: no
    item, or not in the index), read before a write to know which entry it moves."""

    def __init__(self, index_key_of: Callable[[str], str | None],
                 limit: float = PARTITION_WCU_LIMIT) -> None:
        self.limit = limit
        self._index_key_of = index_key_of
        self._used: dict[tuple[str, int], float] = {}  # (key, second) -> WCU taken in it
        self._latest = 0
        self._forgot = 0  # seconds before this one are forgotten
        self._lock = threading.Lock()
        self.hottest = Hottest()
        self.throttled = 0  # attempts refused for a key past the limit

    def charges(self, ops: Iterable[Op], transaction: bool) -> dict[str, float]:
        """The WCU each partition key takes for ``ops`` (a Check writes nothing)."""
        out: dict[str, float] = {}
        for op in ops:
            if not isinstance(op, Put | Update | Delete):
                continue
            if not op.pk.startswith(ONE_ITEM_A_FEW_TIMES):
                out[op.pk] = out.get(op.pk, 0.0) + (2.0 if transaction else 1.0)
            before = self._index_key_of(op.pk)
            after = _index_key_after(op, before)
            for key in {before, after} - {None}:
                assert key is not None
                out[key] = out.get(key, 0.0) + 1.0
        return out

    def take(self, at: float, charges: dict[str, float]) -> bool:
        """Charge ``charges`` in the second of ``at`` if every key has room there; False,
        charging nothing, if one would pass the limit (the attempt is throttled)."""
        second = int(at)
        with self._lock:
            used = {key: self._used.get((key, second), 0.0) for key in charges}
            if any(used[key] + wcu > self.limit for key, wcu in charges.items()):
                self.throttled += 1
                return False
            for key, wcu in charges.items():
                now = self._used[key, second] = used[key] + wcu
                if now > self.hottest.wcu:
                    self.hottest = Hottest(key, now)
            self._latest = max(self._latest, second)
            if self._latest - self._forgot > 2 * KEEP_SECONDS:
                self._forgot = self._latest - KEEP_SECONDS
                self._used = {k: v for k, v in self._used.items() if k[1] >= self._forgot}
            return True


def _index_key_after(op: Put | Update | Delete, before: str | None) -> str | None:
    if isinstance(op, Delete):
        return None
    if isinstance(op, Put):
        return op.record.status_key
    after = before
    for action in op.actions:
        if isinstance(action, Set) and action.attr == STATUS_KEY:
            after = action.value
        elif isinstance(action, Remove) and action.attr == STATUS_KEY:
            after = None
    return after
