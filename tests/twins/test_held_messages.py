"""The tick's hold on the messages it drains (LONGJOBS_HOLD_SECONDS): short, so that what a
tick whose Lambda dies held comes back soon; kept longer while a recording slowed past it goes
on, so that no message comes back while the tick that holds it still records it.

SQS's visibility runs on the wall clock, so the queue here does too: the drain keeps its
messages by the time it has held them (time.monotonic), not by the twins' clock."""

from __future__ import annotations

import threading
import time

from dispatcher.ports.queue import Received
from dispatcher.ports.table import Op
from dispatcher.store import Store
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins

HOLD = 2  # seconds: the drain holds a recording's messages longer at 1.5 s
HANG = 60.0  # a bound for a hang only


class KeptQueue(MemoryQueue):
    """A queue on the wall clock that tells when a hold was made longer."""

    def __init__(self) -> None:
        super().__init__(clock=time.time)
        self.kept = threading.Event()
        self.holds: list[int] = []

    def release(self, messages: list[Received], after: int = 0) -> None:
        super().release(messages, after)
        if after:
            self.holds.append(after)
            self.kept.set()


class SlowRecording(MemoryTable):
    """The first transaction (a bundle's recording) waits until ``until`` is set: a
    recording retried through throttling for longer than the hold; then it looks at what
    another tick would find in the queue."""

    def __init__(self, queue: KeptQueue) -> None:
        super().__init__()
        self.queue = queue
        self.slowed = False
        self.visible_meanwhile: int | None = None

    def transact(self, ops: list[Op], *, token: str | None = None) -> None:
        if not self.slowed:
            self.slowed = True
            assert self.queue.kept.wait(HANG), "the drain never held its messages longer"
            time.sleep(HOLD * 0.6)  # past the first hold's end: kept or not, it would be over
            self.visible_meanwhile = self.queue.backlog().visible
        super().transact(ops, token=token)


def test_a_recording_slower_than_the_hold_keeps_its_messages_from_another_tick() -> None:
    tw = Twins()
    queue = KeptQueue()
    tw.queue = queue
    tw.table = SlowRecording(queue)
    tw.store = Store(tw.table, clock=tw.clock)
    ids = [f"j{n}" for n in range(5)]
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": j} for j in ids])
    report = tw.stages(LONGJOBS_HOLD_SECONDS=str(HOLD)).tick.tick()
    assert tw.table.visible_meanwhile == 0, "the messages came back while being recorded"
    assert queue.holds and set(queue.holds) == {HOLD}
    assert report.intake.admitted == 5 and report.intake.duplicates == 0
    assert report.launch.bundles_launched == 5  # a slot each
    assert queue.backlog().visible + queue.backlog().in_flight == 0  # recorded, deleted
    assert sorted(j.job_id for j in tw.jobs()) == ids


def test_a_recording_within_the_hold_makes_no_call_to_hold_it_longer() -> None:
    tw = Twins()
    queue = KeptQueue()
    tw.queue = queue
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{n}"} for n in range(10)])
    report = tw.stages(LONGJOBS_HOLD_SECONDS="60").tick.tick()
    assert report.intake.admitted == 10
    assert queue.holds == []
