"""A hand-off the table refuses for a moment costs a retry; one it refuses for longer leaves its
jobs to a later look, and never the tick or its drain.

The urgent hand-off (dispatcher/stages/handoff.py) moves waiting high jobs into a running
bundle in one transaction a host (dispatcher/store/handing.py). Throttled or in conflict with
another request, that transaction is tried again as the store's others are; refused past those
tries, its jobs stay PENDING in the bundle they were recorded in, the tick goes on (its arrays
are settled, its summary saved) and a later tick, or the drain's next look at the high queue,
hands them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.ops.client import JobClient
from dispatcher.ports.queue import BATCH, Received
from dispatcher.ports.table import Op, Set, TableUnavailable, TransactionCancelled, Update
from dispatcher.stages.fanout import ArrayTally
from dispatcher.store import Fence, Store
from dispatcher.store.base import TableRetry
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from tests.model_faults import one_thread
from tests.twins import ENV, FakeClock, Twins

TRIES = TableRetry().attempts
BACKLOG = 100


def _throttled(ops: list[Op]) -> Exception:
    return TableUnavailable("TransactWriteItems", "ThrottlingException", "Rate exceeded",
                            status=400)


def _conflict(ops: list[Op]) -> Exception:
    return TransactionCancelled(["TransactionConflict"] + [None] * (len(ops) - 1))


ERRORS = pytest.mark.parametrize("error", [_throttled, _conflict],
                                 ids=["throttled", "TransactionConflict"])


def _is_handoff(ops: list[Op]) -> bool:
    return any(isinstance(op, Update) and any(isinstance(a, Set) and a.attr == "handed_jobs"
                                              for a in op.actions) for op in ops)


class RefusesHandoffs(MemoryTable):
    """Fails the next ``failures`` hand-off transactions with ``error``; every other call
    as the twin does."""

    def __init__(self, error: Callable[[list[Op]], Exception], failures: int) -> None:
        super().__init__()
        self.error, self.failures = error, failures
        self.refused = 0
        self.handoffs = 0

    def transact(self, ops: list[Op], *, token: str | None = None) -> None:
        if _is_handoff(ops):
            self.handoffs += 1
            if self.failures:
                self.failures -= 1
                self.refused += 1
                raise self.error(ops)
        super().transact(ops, token=token)


class World:
    """One running task of two small jobs (a host) in every slot but ``free``, and a high
    queue of its own."""

    def __init__(self, error: Callable[[list[Op]], Exception], failures: int, *,
                 free: int = 0, queue: Callable[[FakeClock], MemoryQueue] | None = None
                 ) -> None:
        """``free``: task slots left free; ``queue``: the normal queue, made on the clock."""
        self.tw = Twins()
        self.table = RefusesHandoffs(error, failures)
        self.tw.table = self.table
        # The store's retries without their waits: what is tried, not how long it takes.
        self.tw.store = Store(self.table, clock=self.tw.clock,
                              table_retry=TableRetry(sleep=lambda _: None))
        if queue is not None:
            self.tw.queue = queue(self.tw.clock)
        self.high = MemoryQueue(clock=self.tw.clock)
        self.tw.priority_queues[Priority.HIGH] = self.high
        self.env = {"LONGJOBS_MAX_RUNNING_TASKS": str(1 + free),
                    "LONGJOBS_TASK_CONCURRENCY": "2"}
        self.client = JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"],
                                table_name=ENV["LONGJOBS_TABLE"], region="us-east-1",
                                queues={Priority.NORMAL: self.tw.queue, Priority.HIGH: self.high})
        self.client.submit_many([{"kind": "k", "payload": {}, "job_id": f"h{n}",
                                  "estimated_seconds": 1} for n in range(2)])
        self.stages = self.tw.stages(**{**self.env, "LONGJOBS_MAX_RUNNING_TASKS": "1"})
        self.stages.tick.tick()
        host = self.bundle_of("h0")
        assert host.state == BundleState.LAUNCHED and host.task_arn
        assert sorted(host.job_ids) == ["h0", "h1"]
        self.tw.store.claim(Fence(host.bundle_id, host.attempt, host.task_arn))
        self.host = host.bundle_id
        self.stages = self.tw.stages(**self.env)

    def urgent(self, job_id: str = "u") -> None:
        self.client.submit("k", {}, job_id=job_id, priority="high", estimated_seconds=1)

    def bundle_of(self, job_id: str) -> Bundle:
        job = self.tw.job(job_id)
        assert job is not None and job.bundle_id
        bundle = self.tw.store.get_bundle(job.bundle_id)
        assert bundle is not None
        return bundle

    def tick(self) -> Any:
        self.tw.clock.advance(10)
        with one_thread():
            return self.stages.tick.tick()


@ERRORS
def test_a_handoff_refused_once_is_tried_again_and_hands_the_job(
        error: Callable[[list[Op]], Exception]) -> None:
    w = World(error, failures=1)
    w.urgent()
    decision = w.tick()
    assert w.table.refused == 1
    assert decision.handoff.handed == 1
    assert w.bundle_of("u").bundle_id == w.host
    assert w.bundle_of("u").handed_jobs == ["u"]


@ERRORS
def test_a_handoff_refused_past_its_tries_leaves_the_job_to_the_next_tick(
        error: Callable[[list[Op]], Exception], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(error, failures=TRIES)
    settled: list[object] = []
    real_settle = ArrayTally.settle

    def settle(self: ArrayTally, stats: Any) -> None:
        settled.append(stats)
        real_settle(self, stats)

    monkeypatch.setattr(ArrayTally, "settle", settle)
    w.urgent()
    with caplog.at_level(logging.ERROR):
        decision = w.tick()  # does not raise
    assert w.table.refused == TRIES  # every try the store makes, then given up
    assert decision.handoff.urgent == 1 and decision.handoff.handed == 0
    assert decision.handoff.refused == 1
    assert len(settled) == 1  # the tick's array settle ran
    summary = w.tw.store.tick_summary()
    assert summary is not None and summary.at == w.tw.clock()  # and its summary was saved
    refused = [rec for rec in caplog.records if "u" in getattr(rec, "job_ids", ())]
    assert refused, "the refused hand-off is not logged with its jobs"
    assert getattr(refused[0], "host", None) == w.host
    assert "Throttling" in str(getattr(refused[0], "reason", "")) \
        or "TransactionConflict" in str(getattr(refused[0], "reason", ""))
    job = w.tw.job("u")
    assert job is not None and job.state == JobState.PENDING  # recorded, waiting
    source = w.bundle_of("u")
    assert source.bundle_id != w.host and source.state == BundleState.PENDING
    assert source.job_ids == ["u"]

    decision = w.tick()  # the table takes hand-offs again
    assert decision.handoff.handed == 1
    assert w.bundle_of("u").bundle_id == w.host
    job = w.tw.job("u")
    assert job is not None and job.state == JobState.PENDING


class SlowQueue(MemoryQueue):
    """The backlog's queue: each receive takes RECEIVE_SECONDS of the clock; ``on_receive``
    is called with the number of each."""

    RECEIVE_SECONDS = 4.0

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.fake_clock = clock
        self.receives = 0
        self.on_receive: Callable[[int], None] = lambda n: None

    def receive(self, max_messages: int = BATCH, visibility_timeout: int | None = None,
                wait_seconds: int = 0) -> list[Received]:
        self.receives += 1
        self.fake_clock.advance(self.RECEIVE_SECONDS)
        self.on_receive(self.receives)
        return super().receive(max_messages, visibility_timeout)


@ERRORS
def test_a_drain_whose_look_cannot_hand_goes_on_draining_and_a_later_look_hands(
        error: Callable[[list[Op]], Exception]) -> None:
    w = World(error, failures=0, free=1, queue=SlowQueue)
    backlog = w.tw.queue
    assert isinstance(backlog, SlowQueue)
    w.client.submit_many([{"kind": "k", "payload": {}, "job_id": f"b{n:03d}",
                           "estimated_seconds": 1} for n in range(BACKLOG)])
    w.table.failures = TRIES  # the first look's hand-off is refused past its tries
    backlog.receives = 0
    # The urgent job comes once the drain is at the backlog (it took the high queue first).
    backlog.on_receive = lambda n: w.urgent() if n == 2 else None
    decision = w.tick()  # does not raise
    assert w.table.refused == TRIES and w.table.handoffs == TRIES + 1  # a later look handed
    assert decision.handoff.looks >= 2 and decision.handoff.handed == 1
    assert w.bundle_of("u").bundle_id == w.host
    # The drain went on after the refused look, to the end of the backlog.
    assert backlog.backlog().visible == 0
    assert decision.intake.admitted == BACKLOG + 1


def test_a_read_of_the_hosts_refused_leaves_the_job_to_the_next_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    w = World(_throttled, failures=0)
    real = Store.full_bundles_now
    refused: list[list[str]] = []

    def throttled_once(self: Store, bundle_ids: list[str]) -> list[Bundle]:
        if not refused:
            refused.append(bundle_ids)
            raise TableUnavailable("BatchGetItem", "ThrottlingException", "Rate exceeded",
                                   status=400)
        return real(self, bundle_ids)

    monkeypatch.setattr(Store, "full_bundles_now", throttled_once)
    w.urgent()
    decision = w.tick()  # does not raise
    assert refused == [[w.host]] and decision.handoff.handed == 0
    assert w.tw.store.tick_summary() is not None
    decision = w.tick()
    assert decision.handoff.handed == 1
    assert w.bundle_of("u").bundle_id == w.host
