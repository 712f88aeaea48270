"""The whole-system model's check of ``longjobs stats``: its job counts are the table's, the
active jobs all of them and the finished ones those admitted within its window, whatever the
history behind it (the model's clock jumps by up to half a year, past the window and TTL)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.ops.queries import Queries
from dispatcher.store import OperatorStore
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable


def stats_disagree(store: OperatorStore, table: MemoryTable,
                   clock: Callable[[], float]) -> list[str]:
    """What ``stats`` says that the table does not."""
    stats = Queries(store, clock=clock).stats()
    start = r.iso(stats.finished_since)
    held: Counter[str] = Counter()
    for pk, rec in table.snapshot().items():
        if pk.startswith(("JOB#", "REJECT#")) and rec.state:
            finished = rec.state in TERMINAL_JOB_STATES
            if not finished or r.iso(float(rec.created_at or 0)) >= start:
                held[rec.state] += 1
    want = {str(s): held.get(str(s), 0) for s in JobState}
    if stats.jobs == want:
        return []
    return [f"stats counts {stats.jobs}; the table holds {want} (active ones all, finished "
            f"ones admitted since {start})"]
