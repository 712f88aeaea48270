"""In-memory twin of the Queue port: visibility timeouts, redelivery, receive counts, and the
retention period after which SQS deletes a message nobody deleted."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from dispatcher.ports.queue import BATCH, Backlog, Queue, Received, check_batch

# SQS deletes a message this long after it was sent, received or not: the stack's queues'
# MessageRetentionPeriod (infra/template.yaml), SQS's most. So a copy of a message left in the
# queue after its job was recorded (a recording whose response was lost) is gone before the
# job's record, which TTL deletes LONGJOBS_RETENTION_DAYS (30 by default) after the job ended:
# a twin that kept it longer would admit it again as a new job, which SQS rules out then.
RETENTION_SECONDS = 14 * 86_400.0


class MemoryQueue(Queue):
    """In-memory queue with visibility timeouts: a redelivery happens if a message isn't deleted."""

    def __init__(self, visibility_seconds: float = 30.0,
                 clock: Callable[[], float] = time.time,
                 retention_seconds: float = RETENTION_SECONDS) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._messages: dict[str, tuple[str, float, float, int]] = {}  # id: body, sent, vis, n
        self.visibility_seconds = visibility_seconds
        self.retention_seconds = retention_seconds
        # The bodies of the messages deleted for their age, in the order sent: what SQS drops
        # unseen when no receive deletes a message in time (a test tells them from lost ones).
        self.aged_out: list[str] = []

    def expire(self) -> int:
        """Delete every message sent a retention period ago or more, as SQS does on its own
        (receive and backlog do it first); return how many."""
        with self._lock:
            return self._expire(self._clock())

    def _expire(self, t: float) -> int:
        gone = 0
        # Messages are kept in the order sent, so the aged ones come first.
        while self._messages:
            mid, (body, sent, _, _) = next(iter(self._messages.items()))
            if sent + self.retention_seconds > t:
                break
            del self._messages[mid]
            self.aged_out.append(body)
            gone += 1
        return gone

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        check_batch(entries)
        with self._lock:
            for _, body in entries:
                self._messages[f"m{next(self._ids)}"] = (body, self._clock(), 0.0, 0)
        return {}

    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None, wait_seconds: int = 0) -> list[Received]:
        """``wait_seconds`` is not waited: the twin's clock moves only when a test moves it."""
        t, out = self._clock(), list[Received]()
        hide = self.visibility_seconds if visibility_timeout is None else visibility_timeout
        with self._lock:
            self._expire(t)
            for mid, (body, sent, visible_at, n) in list(self._messages.items()):
                if len(out) >= min(max_messages, BATCH):
                    break
                if visible_at <= t:
                    self._messages[mid] = (body, sent, t + hide, n + 1)
                    out.append(Received(mid, f"{mid}:{n + 1}", body, sent, n + 1))
        return out

    def delete(self, messages: list[Received]) -> dict[str, str]:
        with self._lock:
            for m in messages:
                self._messages.pop(m.message_id, None)
        return {}

    def release(self, messages: list[Received], after: int = 0) -> None:
        t = self._clock()
        with self._lock:
            for m in messages:
                if m.message_id in self._messages:
                    body, sent, _, n = self._messages[m.message_id]
                    self._messages[m.message_id] = (body, sent, t + after if after else 0.0, n)

    def backlog(self) -> Backlog:
        t = self._clock()
        with self._lock:
            self._expire(t)
            visible = sum(1 for _, _, v, _ in self._messages.values() if v <= t)
            return Backlog(visible, len(self._messages) - visible, 0)
