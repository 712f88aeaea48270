"""A table twin that keeps everything but the jobs: for measuring the tick's own memory.

A tick admitting from a backlog of a million messages records hundreds of thousands of jobs;
in the in-memory twin they would be the process's memory, hiding the tick's. ``JoblessTable``
accepts every write as ``MemoryTable`` does (conditions, transactions) but does not keep job
items nor a paged bundle's pages: the bundles, launches and the rest stay, so a tick records
and launches as usual. Only for a single tick's measurements: nothing can read the jobs back.
"""

from __future__ import annotations

from dispatcher.ports.table import Record
from dispatcher.testing.memory_table import MemoryTable

FORGOTTEN = ("JOB#", "PAGE#")


class JoblessTable(MemoryTable):
    def _set(self, pk: str, rec: Record | None) -> None:
        if not pk.startswith(FORGOTTEN):
            super()._set(pk, rec)
