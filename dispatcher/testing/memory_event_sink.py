"""The in-memory twin of the event-sink port: the job events published, in order (``events``),
the tasks' bills (``bills``), and the requests it took (a request per
:data:`~dispatcher.ports.event_sink.BATCH` events, as PutEvents). ``refuse`` makes the events
of some jobs fail, as throttled entries would."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from dispatcher.domain.errors import EventsNotPublished
from dispatcher.domain.job_events import Event, JobStateChange, TableChange, TaskBilled
from dispatcher.ports.event_sink import EventSink, batches
from dispatcher.ports.record import Record
from dispatcher.stages.publish import publish_changes
from dispatcher.testing.memory_table import MemoryTable


class MemoryEventSink(EventSink):
    def __init__(self) -> None:
        self.events: list[JobStateChange] = []
        self.bills: list[TaskBilled] = []
        self.requests = 0
        self.refused_jobs: set[str] = set()  # their events fail (an entry's ErrorCode)

    def refuse(self, *job_ids: str) -> None:
        self.refused_jobs = set(job_ids)

    def publish(self, events: Sequence[Event]) -> None:
        failed: dict[str, str] = {}
        for batch in batches(events):
            self.requests += 1
            for e in batch:
                if isinstance(e, TaskBilled):
                    self.bills.append(e)
                elif e.job_id in self.refused_jobs:
                    failed[e.event_id] = "ThrottlingException: refused by the test"
                else:
                    self.events.append(e)
        if failed:
            raise EventsNotPublished(f"{len(failed)} of {len(events)} events not published",
                                     failed)


def follow(table: MemoryTable, sink: EventSink) -> list[str]:
    """Publish the events of every write to ``table`` into ``sink`` as it is written (the
    twin's stream and publisher in one); the returned list collects the feed positions whose
    events the sink refused."""
    positions = itertools.count(1)
    refused: list[str] = []

    def on_write(before: Record | None, after: Record | None) -> None:
        change = TableChange(str(next(positions)), before.present() if before else None,
                             after.present() if after else None)
        refused.extend(publish_changes([change], sink))

    table.watch(on_write)
    return refused
