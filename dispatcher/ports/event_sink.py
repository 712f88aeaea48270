"""The event-sink port: where job state-change events (and tasks' bills) go.

``dispatcher.aws.eventbridge.EventBridgeSink`` is the adapter (PutEvents on one bus);
``dispatcher.testing.memory_event_sink.MemoryEventSink`` is its in-memory twin (what local
mode and the tests read), held to it by ``tests/contract/test_event_sink_contract.py``. The
values crossing it are :class:`~dispatcher.domain.job_events.JobStateChange` and
:class:`~dispatcher.domain.job_events.TaskBilled` dataclasses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from dispatcher.domain.job_events import Event

# PutEvents takes at most 10 entries per request.
# https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html
BATCH = 10


class EventSink(ABC):
    @abstractmethod
    def publish(self, events: Sequence[Event]) -> None:
        """Publish ``events`` (any number; the sink cuts them into batches it can send), in
        order within each job. Raises
        :class:`~dispatcher.domain.errors.EventsNotPublished` naming every event not published
        (by ``event_id``) once its own retries are spent; the others were published."""


def batches(events: Sequence[Event], size: int = BATCH) -> list[list[Event]]:
    """``events`` cut into requests of at most ``size``, in order."""
    return [list(events[i:i + size]) for i in range(0, len(events), size)]
