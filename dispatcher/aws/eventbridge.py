"""The EventBridge adapter of the event-sink port: PutEvents on one bus.

PutEvents takes at most 10 entries per request and reports each entry's failure in its
answer (``FailedEntryCount``; an entry's ``ErrorCode``) rather than failing the call: failed
entries must be sent again by the caller.
https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutEvents.html
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-putevents.html
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dispatcher.domain.errors import EventsNotPublished, ResourceMissing
from dispatcher.domain.job_events import SOURCE, Event
from dispatcher.ports.event_sink import EventSink, batches


class EventBridgeSink(EventSink):
    """``attempts`` requests at most per batch: the failed entries of one are sent again in
    the next, after a short wait (botocore already retries a throttled call). Each event names
    ``resources`` (the job table's ARN): a rule matches the events of one stack's table."""

    def __init__(self, events: Any, bus: str = "default", *, resources: Sequence[str] = (),
                 attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> None:
        self._events = events
        self.bus = bus or "default"
        self.resources = list(resources)
        self.attempts = attempts
        self._sleep = sleep

    def _entry(self, e: Event) -> dict[str, Any]:
        return {"Source": SOURCE, "DetailType": e.detail_type, "EventBusName": self.bus,
                "Time": datetime.fromtimestamp(e.at, UTC), "Resources": self.resources,
                "Detail": json.dumps(e.detail(), separators=(",", ":"))}

    def _put(self, batch: list[Event]) -> dict[str, str]:
        """One PutEvents: {event_id: reason} of the entries that failed. Every AWS error of
        the call becomes a domain error here, in one place."""
        try:
            resp = self._events.put_events(Entries=[self._entry(e) for e in batch])
        except ClientError as exc:
            err = exc.response.get("Error", {})
            code = err.get("Code", "")
            if code == "ResourceNotFoundException":
                raise ResourceMissing(f"event bus {self.bus} does not exist") from None
            return {e.event_id: f"{code}: {err.get('Message', '')}" for e in batch}
        except BotoCoreError as exc:  # no answer (a lost connection): the batch failed
            return {e.event_id: f"{type(exc).__name__}: {exc}" for e in batch}
        if not resp.get("FailedEntryCount"):
            return {}
        return {e.event_id: f"{r.get('ErrorCode')}: {r.get('ErrorMessage', '')}"
                for e, r in zip(batch, resp.get("Entries", []), strict=False)
                if r.get("ErrorCode")}

    def publish(self, events: Sequence[Event]) -> None:
        failed: dict[str, str] = {}
        for batch in batches(events):
            for n in range(self.attempts):
                reasons = self._put(batch)
                batch = [e for e in batch if e.event_id in reasons]
                if not batch:
                    break
                if n + 1 == self.attempts:
                    failed.update(reasons)
                else:
                    self._sleep(0.1 * 2 ** n)
        if failed:
            raise EventsNotPublished(f"{len(failed)} of {len(events)} job events not "
                                     "published", failed)
