"""Publish: the job table's change feed, turned into job state-change events (and the bill
of each stopped task, once settled: the rate its jobs' seconds cost).

Off the hot path on purpose: neither the tick nor the runner makes a call for an event. The
state changes are already written (each with its sequence number,
:mod:`dispatcher.domain.job_events`); the feed (DynamoDB Streams on AWS, read by the publisher
function; local mode's reader of moto's stream; the twin's change feed in tests) hands them to
this stage in batches, and each batch's events go out in as few requests as the sink allows.
"""

from __future__ import annotations

from collections.abc import Sequence

from dispatcher.domain.errors import EventsNotPublished
from dispatcher.domain.job_events import Event, TableChange, events
from dispatcher.ports.event_sink import EventSink


def events_of(feed: Sequence[TableChange]) -> list[Event]:
    """The events of a batch of changes, in the feed's order."""
    return [e for change in feed for e in events(change.old, change.new)]


def publish_changes(feed: Sequence[TableChange], sink: EventSink) -> list[str]:
    """Publish the events of ``feed``; return the positions of the changes whose events
    were not published (empty: all were). The caller has the feed read again from the first
    of them (a Lambda's batch item failures): the events after it that were published go out
    again, which the sequence numbers let a consumer drop."""
    per_change = [(change, events(change.old, change.new)) for change in feed]
    told = [e for _, found in per_change for e in found]
    if not told:
        return []
    try:
        sink.publish(told)
    except EventsNotPublished as exc:
        return [change.position for change, found in per_change
                if any(e.event_id in exc.failed for e in found)]
    return []
