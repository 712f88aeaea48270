"""The twin of what the dependents function reads of the job table's stream: the writes that
end a job with waiters (the event source mapping's filter, ``infra/template.yaml``), kept in
the order written until :meth:`EndedJobsFeed.deliver` hands them to the release stage, as
Lambda hands a batch to the function (a moment after the write, never inside it)."""

from __future__ import annotations

import itertools
import threading

from dispatcher.domain.job_events import JOB_PREFIX, TableChange
from dispatcher.domain.jobs import TERMINAL_JOB_STATES
from dispatcher.ports.record import Record
from dispatcher.stages.dependents import Dependents, DependentsStats
from dispatcher.testing.memory_table import MemoryTable

# Lambda's batch for the mapping (the template's BatchSize).
BATCH = 100


def _ends_with_waiters(after: Record | None) -> bool:
    return after is not None and bool(after.waiters) and after.pk.startswith(JOB_PREFIX) \
        and after.state in TERMINAL_JOB_STATES


class EndedJobsFeed:
    def __init__(self, table: MemoryTable) -> None:
        self._lock = threading.Lock()
        self._pending: list[TableChange] = []
        self._positions = itertools.count(1)
        table.watch(self._on_write, where=_ends_with_waiters)

    def _on_write(self, before: Record | None, after: Record | None) -> None:
        with self._lock:
            self._pending.append(TableChange(str(next(self._positions)),
                                             before.present() if before else None,
                                             after.present() if after else None))

    def deliver(self, dependents: Dependents) -> DependentsStats:
        """Hand every change written so far to ``dependents``, a batch at a time."""
        with self._lock:
            feed, self._pending = self._pending, []
        stats = DependentsStats()
        for i in range(0, len(feed), BATCH):
            try:
                stats.add(dependents.on_changes(feed[i:i + BATCH]))
            except BaseException:  # the function failed: Lambda delivers the batch again
                with self._lock:
                    self._pending = feed[i:] + self._pending
                raise
        return stats
