"""The tick's hold on the messages it drains (LONGJOBS_HOLD_SECONDS): short, so that what a
tick whose Lambda dies held comes back soon; kept longer while a recording slowed past it goes
on, so that no message comes back while the tick that holds it still records it.

The drain counts how long it held a message on the admission's clock, the queue's visibility
runs on the same: the twins' clock here, moved by the slow recording."""

from __future__ import annotations

import threading
from collections.abc import Callable

from dispatcher.ports.queue import Received
from dispatcher.ports.table import Op
from dispatcher.store import Store
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import FakeClock, Twins

HOLD = 2  # seconds: the drain holds a recording's messages longer at 1.5 s (and wakes to look
# every quarter of a second of this machine's time: a wait's timeout is an eighth of the hold)
HANG = 60.0  # a bound for a hang only


class KeptQueue(MemoryQueue):
    """A queue that tells when a hold was made longer."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock=clock)
        self.kept = threading.Event()
        self.holds: list[int] = []

    def release(self, messages: list[Received], after: int = 0) -> None:
        super().release(messages, after)
        if after:
            self.holds.append(after)
            self.kept.set()


class SlowRecording(MemoryTable):
    """The first transaction (a bundle's recording) takes longer than the hold, as one
    retried through throttling would: the clock moves past three quarters of the hold, the
    recording waits for the drain to hold its messages longer, the clock moves past the
    first hold's end, and it looks at what another tick would find in the queue."""

    def __init__(self, queue: KeptQueue, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.queue = queue
        self.clock = clock
        self.slowed = False
        self.visible_meanwhile: int | None = None

    def transact(self, ops: list[Op], *, token: str | None = None) -> None:
        if not self.slowed:
            self.slowed = True
            self.clock.advance(HOLD * 0.8)
            assert self.queue.kept.wait(HANG), "the drain never held its messages longer"
            self.clock.advance(HOLD * 0.4)  # past the first hold's end
            self.visible_meanwhile = self.queue.backlog().visible
        super().transact(ops, token=token)


def test_a_recording_slower_than_the_hold_keeps_its_messages_from_another_tick() -> None:
    tw = Twins()
    queue = KeptQueue(tw.clock)
    tw.queue = queue
    tw.table = SlowRecording(queue, tw.clock)
    tw.store = Store(tw.table, clock=tw.clock)
    ids = [f"j{n}" for n in range(5)]
    # Small jobs, one slot, one bundle: its messages are kept in one call, and the slowed recording
    # looks once that call is made (with a bundle each, it could look between two calls and
    # find another bundle's messages not kept yet, though the drain keeps them a moment later).
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": j, "estimated_seconds": 1}
                             for j in ids])
    report = tw.stages(LONGJOBS_HOLD_SECONDS=str(HOLD),
                       LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    assert tw.table.visible_meanwhile == 0, "the messages came back while being recorded"
    assert queue.holds and set(queue.holds) == {HOLD}
    assert report.intake.admitted == 5 and report.intake.duplicates == 0
    assert report.launch.bundles_launched == 1
    assert queue.backlog().visible + queue.backlog().in_flight == 0  # recorded, deleted
    assert sorted(j.job_id for j in tw.jobs()) == ids


def test_a_recording_within_the_hold_makes_no_call_to_hold_it_longer() -> None:
    tw = Twins()
    queue = KeptQueue(tw.clock)
    tw.queue = queue
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{n}"} for n in range(10)])
    report = tw.stages(LONGJOBS_HOLD_SECONDS="60").tick.tick()
    assert report.intake.admitted == 10
    assert queue.holds == []
