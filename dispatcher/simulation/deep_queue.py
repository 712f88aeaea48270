"""A queue twin for deep backlogs: each call costs O(messages it touches), not O(depth).

``MemoryQueue`` scans every message on each receive, which is right for tests of a few hundred
and hopeless for 200,000. :class:`DeepQueue` keeps the visible messages in a deque and the
received ones in a heap by the time they become visible again, with the same semantics:
visibility timeouts, redelivery of what is not deleted, receive counts, release. A backlog of
``synthetic`` messages is not held at all until received: message ``i`` is ``body_of(i)``,
so a million-message backlog costs memory only for what is in flight. With ``arrival_rate``
the synthetic messages are not all there at once but arrive as a steady stream: message ``i``
is sent ``i / arrival_rate`` seconds after the queue's start.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable

from dispatcher.ports.queue import BATCH, Backlog, Queue, Received, check_batch


class DeepQueue(Queue):
    def __init__(self, clock: Callable[[], float] = time.time, *, synthetic: int = 0,
                 body_of: Callable[[int], str] | None = None, visibility_seconds: float = 30.0,
                 arrival_rate: float | None = None) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._bodies: dict[str, tuple[str, float]] = {}  # explicit messages: body, sent at
        self._visible: deque[str] = deque()
        self._hidden: dict[str, tuple[float, int]] = {}  # id: visible again at, receives
        self._reappear: list[tuple[float, str]] = []  # heap of (visible at, id)
        self._counts: dict[str, int] = {}  # receives of visible messages received before
        self._synthetic = synthetic
        self._next_synthetic = 0
        self._body_of = body_of or (lambda i: "")
        self._synthetic_sent = clock()
        self.arrival_rate = arrival_rate
        self.visibility_seconds = visibility_seconds

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        check_batch(entries)
        t = self._clock()
        with self._lock:
            for _, body in entries:
                mid = f"m{next(self._ids)}"
                self._bodies[mid] = (body, t)
                self._visible.append(mid)
        return {}

    def _body(self, mid: str) -> tuple[str, float]:
        if mid.startswith("s"):
            return self._body_of(int(mid[1:])), self.sent_at(int(mid[1:]))
        return self._bodies[mid]

    def sent_at(self, i: int) -> float:
        """When synthetic message ``i`` was sent."""
        rate = self.arrival_rate
        return self._synthetic_sent + (i / rate if rate else 0.0)

    def _arrived(self, t: float) -> int:
        """Synthetic messages sent by ``t``."""
        if not self.arrival_rate:
            return self._synthetic
        return min(self._synthetic,
                   int((t - self._synthetic_sent) * self.arrival_rate) + 1)

    def _expire(self, t: float) -> None:
        while self._reappear and self._reappear[0][0] <= t:
            at, mid = heapq.heappop(self._reappear)
            hidden = self._hidden.get(mid)
            if hidden is not None and hidden[0] == at:
                del self._hidden[mid]
                self._counts[mid] = hidden[1]
                self._visible.appendleft(mid)

    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None, wait_seconds: int = 0) -> list[Received]:
        """``wait_seconds`` is not waited: the model's clock moves only when the model moves it."""
        t = self._clock()
        hide = self.visibility_seconds if visibility_timeout is None else visibility_timeout
        out: list[Received] = []
        peeked: list[str] = []  # visibility 0: received and left visible
        with self._lock:
            self._expire(t)
            while len(out) < min(max_messages, BATCH):
                if self._visible:
                    mid = self._visible.popleft()
                elif self._next_synthetic < self._arrived(t):
                    mid = f"s{self._next_synthetic}"
                    self._next_synthetic += 1
                else:
                    break
                n = self._counts.pop(mid, 0) + 1
                body, sent = self._body(mid)
                if hide > 0:
                    self._hidden[mid] = (t + hide, n)
                    heapq.heappush(self._reappear, (t + hide, mid))
                else:
                    self._counts[mid] = n
                    peeked.append(mid)
                out.append(Received(mid, f"{mid}:{n}", body, sent, n))
            self._visible.extendleft(reversed(peeked))
        return out

    def delete(self, messages: list[Received]) -> dict[str, str]:
        with self._lock:
            for m in messages:
                self._hidden.pop(m.message_id, None)
                self._bodies.pop(m.message_id, None)
                self._counts.pop(m.message_id, None)
            if len(self._reappear) > 2 * len(self._hidden) + 1000:
                # Deleted messages leave their heap entries behind: drop them now and then,
                # so the twin holds what is in flight, not every message ever received.
                self._reappear = [(at, mid) for at, mid in self._reappear
                                  if self._hidden.get(mid, (None,))[0] == at]
                heapq.heapify(self._reappear)
        return {}

    def release(self, messages: list[Received], after: int = 0) -> None:
        t = self._clock()
        with self._lock:
            for m in messages:
                hidden = self._hidden.get(m.message_id)
                if hidden is None:
                    continue
                if after:  # hidden longer: the heap entry of before no longer matches
                    self._hidden[m.message_id] = (t + after, hidden[1])
                    heapq.heappush(self._reappear, (t + after, m.message_id))
                    continue
                del self._hidden[m.message_id]
                self._counts[m.message_id] = hidden[1]
                self._visible.appendleft(m.message_id)

    def backlog(self) -> Backlog:
        with self._lock:
            self._expire(self._clock())
            visible = len(self._visible) + max(0, self._arrived(self._clock())
                                                  - self._next_synthetic)
            return Backlog(visible, len(self._hidden), 0)
