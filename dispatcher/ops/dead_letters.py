"""The job queue's dead-letter queue, for operators: look at it, move messages back.

Built on the Queue port: one ``Queue`` for the DLQ and one for the job queue (``SqsQueue`` in
production, ``MemoryQueue`` in tests), so no SQS batching is redone here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from dispatcher.domain.jobs import Priority
from dispatcher.ops.job_views import DISPLAY_BYTES  # bodies are shown cut as payloads are
from dispatcher.ports.queue import BATCH, Queue, Received, send_all

# A redriven message is hidden in the DLQ this long; one that could not be sent reappears then.
REDRIVE_VISIBILITY_SECONDS = 30


@dataclass(frozen=True)
class DeadLetter:
    message_id: str
    sent_at: float | None
    receive_count: int
    job_id: str | None
    kind: str | None
    body: str
    body_truncated: bool

    def to_json(self) -> dict[str, Any]:
        """As JSON: ``sent_at`` as an ISO-8601 UTC string."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.sent_at is not None:
            out["sent_at"] = datetime.fromtimestamp(self.sent_at, UTC).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ")
        return out


class DeadLetters:
    """The job queues' dead-letter queue: messages SQS moved there after ``maxReceiveCount``
    receives (a dispatcher that kept crashing on them, or kept failing to record them).

    The three priority queues share it (infra/template.yaml), so a redrive sends each message
    to the queue of the priority its body names (``queues``); a body without one, or one that
    cannot be read, goes to ``job_queue`` (priority normal), where admission rejects it with a
    reason if it is malformed."""

    def __init__(self, dlq: Queue, job_queue: Queue,
                 queues: Mapping[Priority, Queue] | None = None) -> None:
        self.dlq, self.job_queue = dlq, job_queue
        self.queues = dict(queues or {})

    def queue_for(self, body: str) -> Queue:
        """The queue a dead letter goes back to: that of the priority its body names."""
        name = _fields(body).get("priority")
        try:
            priority = Priority(name) if isinstance(name, str) else Priority.NORMAL
        except ValueError:
            priority = Priority.NORMAL
        return self.queues.get(priority, self.job_queue)

    def peek(self, limit: int = 10) -> list[DeadLetter]:
        """Look without taking: receive with a visibility timeout of 0, so messages stay visible.

        Receiving still increments each message's receive count (SQS has no read-only peek);
        the DLQ has no redrive policy of its own, so this moves nothing.
        """
        seen: dict[str, DeadLetter] = {}
        for _ in range(max(1, limit) * 2):  # visibility 0: later receives may repeat messages
            fresh = [m for m in self.dlq.receive(min(BATCH, max(1, limit - len(seen))),
                                                 visibility_timeout=0)
                     if m.message_id not in seen]
            seen.update((m.message_id, _dead_letter(m)) for m in fresh)
            if not fresh or len(seen) >= limit:
                break
        return list(seen.values())[:limit]

    def redrive(self, limit: int = 100) -> tuple[int, dict[str, str]]:
        """Move up to ``limit`` messages back to the queue of their priority: send, then
        delete, 10 at a time.

        A crash between the two leaves a copy in both queues; the dispatcher's de-duplication on
        ``job_id`` makes that one job. Returns (moved, {message_id: reason} of those not moved);
        messages that could not be sent reappear in the DLQ after 30 s.
        """
        moved, failed = 0, dict[str, str]()
        while moved + len(failed) < limit:
            batch = [m for m in self.dlq.receive(min(BATCH, limit - moved - len(failed)),
                                                 visibility_timeout=REDRIVE_VISIBILITY_SECONDS)
                     if m.message_id not in failed]
            if not batch:
                break
            not_sent = send_all((self.queue_for(m.body), str(n), m.body)
                                for n, m in enumerate(batch))
            for entry_id, reason in not_sent.items():
                failed[batch[int(entry_id)].message_id] = reason
            sent = [m for n, m in enumerate(batch) if str(n) not in not_sent]
            if not sent:
                continue
            moved += len(sent)
            # Sent, still here: a later redrive duplicates it (de-duplicated on job_id).
            for message_id, reason in self.dlq.delete(sent).items():
                failed[message_id] = f"not deleted: {reason}"
        return moved, failed


def _fields(body: str) -> dict[str, Any]:
    """A message body's top-level fields, or none if it is not a JSON object."""
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _dead_letter(m: Received) -> DeadLetter:
    fields_ = _fields(m.body)
    job_id, kind = (v if isinstance(v, str) else None
                    for v in (fields_.get("job_id"), fields_.get("kind")))
    raw = m.body.encode()
    cut = len(raw) > DISPLAY_BYTES
    text = raw[:DISPLAY_BYTES].decode(errors="ignore") if cut else m.body
    return DeadLetter(m.message_id, m.sent_at, m.receive_count, job_id, kind, text, cut)
