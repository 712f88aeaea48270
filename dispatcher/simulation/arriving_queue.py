"""A queue whose messages arrive at set virtual times: the high queue of the batch model
(:mod:`dispatcher.simulation.batch_model`), where an urgent job lands while a tick runs."""

from __future__ import annotations

from collections.abc import Callable

from dispatcher.ports.queue import Backlog, Queue, Received
from dispatcher.simulation.virtual_time import VirtualClock
from dispatcher.testing.memory_queue import MemoryQueue


class ArrivingQueue(Queue):
    """A queue whose messages arrive at set virtual times: each is sent into ``inner`` by the
    first call at or after its time, so a tick under way meets a message sent mid-drain as
    SQS would show it; an empty long poll waits (in virtual time) until the next arrival or
    its ``wait_seconds``, as SQS's does."""

    def __init__(self, inner: MemoryQueue, clock: VirtualClock) -> None:
        self.inner = inner
        self.clock = clock
        self.due: list[tuple[float, str]] = []
        self.receives = 0  # every receive of this queue, of every component
        self.before_receive: Callable[[], None] | None = None  # the world's catch-up

    def arrive(self, at: float, body: str) -> None:
        self.due.append((at, body))

    def _land(self) -> None:
        t = self.clock()
        for item in [d for d in self.due if d[0] <= t]:
            self.due.remove(item)
            self.inner.send([("arriving", item[1])])

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        return self.inner.send(entries)

    def receive(self, max_messages: int = 10, visibility_timeout: int | None = None,
                wait_seconds: int = 0) -> list[Received]:
        self.receives += 1
        if self.before_receive is not None:
            self.before_receive()
        self._land()
        got = self.inner.receive(max_messages, visibility_timeout)
        if got or wait_seconds <= 0:
            return got
        until = min([self.clock() + wait_seconds, *(at for at, _ in self.due)])
        self.clock.at_least(until)
        self._land()
        return self.inner.receive(max_messages, visibility_timeout)

    def delete(self, messages: list[Received]) -> dict[str, str]:
        return self.inner.delete(messages)

    def release(self, messages: list[Received], after: int = 0) -> None:
        self.inner.release(messages, after)

    def backlog(self) -> Backlog:
        self._land()
        return self.inner.backlog()
