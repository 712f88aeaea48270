"""In-memory twin of the Queue port: visibility timeouts, redelivery, receive counts."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from dispatcher.ports.queue import BATCH, Backlog, Queue, Received, check_batch


class MemoryQueue(Queue):
    """In-memory queue with visibility timeouts: a redelivery happens if a message isn't deleted."""

    def __init__(self, visibility_seconds: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._messages: dict[str, tuple[str, float, float, int]] = {}  # id: body, sent, vis, n
        self.visibility_seconds = visibility_seconds

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
            visible = sum(1 for _, _, v, _ in self._messages.values() if v <= t)
            return Backlog(visible, len(self._messages) - visible, 0)
