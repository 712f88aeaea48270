"""AWS at the port boundary: each call's latency charged to its caller's virtual clock, counted.

The model wraps the twins (any Queue, Table, Launcher) and adds what AWS adds: a latency per
call (:class:`Latencies`), charged to the calling thread's :class:`VirtualClock`, and a count per
API. The limits are the ports' own (SQS's 10 messages a call, DynamoDB's 100 items a
transaction, RunTask's 10 tasks) or the twins' (Fargate's launch buckets:
``MemoryLauncher(limits=...)``). Nothing sleeps.

The figures (seconds per call, client side, one Region; ``--latency-scale`` in the bench
multiplies them all):

- SQS SendMessageBatch, ReceiveMessage (short poll), DeleteMessageBatch,
  ChangeMessageVisibilityBatch, GetQueueAttributes: 20 ms. AWS gives "tens or low hundreds of
  milliseconds" as typical for SendMessage, ReceiveMessage and DeleteMessage
  (https://aws.amazon.com/sqs/faqs/, "latency"); the low end is taken, as a Lambda in the
  queue's Region sees it.
- DynamoDB GetItem, PutItem, UpdateItem, DeleteItem, Query: 10 ms; BatchGetItem 15 ms + 0.1 ms
  per key; TransactWriteItems 15 ms + 0.5 ms per item (100 items: 65 ms). DynamoDB promises
  single-digit milliseconds on the service side
  (https://aws.amazon.com/blogs/database/understanding-amazon-dynamodb-latency/); 10-20 ms is
  typical seen from a client (https://dynobase.dev/dynamodb-performance-latency). A
  transaction's latency grows with its items and is several times a single write's
  (https://www.alexdebrie.com/posts/dynamodb-transactions-performance/): the per-item term
  is this model's assumption, not a measurement.
- ECS RunTask: 300 ms (it places up to 10 tasks; an assumption: AWS publishes no figure);
  DescribeTasks, StopTask, DescribeTaskDefinition: 50 ms (assumption).
- Fargate's limits (enforced by the launcher twin): RunTask 20 calls/s, task launches 100 burst
  and 20/s per capacity provider
  (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html).

DynamoDB's limit of 1,000 WCU a second per partition key (the table's and the status index's)
is :mod:`dispatcher.simulation.partitions`: a write past it is throttled and tried again as
the adapter does.

A write waits for the item's last write: a thread that writes an item last written at a
later virtual time (a bundle the drain recorded, handed to the launch thread) moves its clock
there first, so no effect precedes its cause however this machine ordered the threads.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from dispatcher.domain.jobs import Resources
from dispatcher.domain.pacing import RateExceeded
from dispatcher.ports.launcher import Launcher, LaunchRequest, LaunchResult, TaskStatus
from dispatcher.ports.queue import Backlog, Queue, Received
from dispatcher.ports.table import (
    Condition,
    Delete,
    Op,
    Put,
    Record,
    Table,
    TableUnavailable,
    TransactionCancelled,
    Update,
)
from dispatcher.simulation.call_faults import CallDraws, CallFaults
from dispatcher.simulation.partitions import Partitions
from dispatcher.simulation.virtual_time import VirtualClock

SQS_CALL = 0.020
DDB_CALL = 0.010


@dataclass(frozen=True)
class Latencies:
    """Seconds per call of each API, plus seconds per item for the APIs that take many."""

    per_call: dict[str, float] = field(default_factory=lambda: {
        "SendMessageBatch": SQS_CALL, "ReceiveMessage": SQS_CALL,
        "DeleteMessageBatch": SQS_CALL, "ChangeMessageVisibilityBatch": SQS_CALL,
        "GetQueueAttributes": SQS_CALL,
        "GetItem": DDB_CALL, "PutItem": DDB_CALL, "UpdateItem": DDB_CALL,
        "DeleteItem": DDB_CALL, "Query": DDB_CALL, "BatchGetItem": 0.015,
        "TransactWriteItems": 0.015,
        "RunTask": 0.300, "DescribeTasks": 0.050, "StopTask": 0.050,
        "DescribeTaskDefinition": 0.050})
    per_item: dict[str, float] = field(default_factory=lambda: {
        "BatchGetItem": 0.0001, "TransactWriteItems": 0.0005})
    scale: float = 1.0

    def of(self, api: str, items: int = 1) -> float:
        return self.scale * (self.per_call.get(api, DDB_CALL)
                             + self.per_item.get(api, 0.0) * items)

    def scaled(self, scale: float) -> Latencies:
        return Latencies(self.per_call, self.per_item, scale)


class InvocationDied(BaseException):
    """The component's process died (a tick's Lambda killed mid-drain): every call it makes
    from then on fails with this. A BaseException, so that no ``except Exception`` of the
    stage code outlives its process."""


class Calls:
    """Calls per API of one component (thread-safe), the charge for each, and what goes
    wrong with them (:mod:`dispatcher.simulation.call_faults`; none by default).

    :meth:`die_after` kills the component after its next ``writes`` table writes (each
    written before it dies): every call raises :class:`InvocationDied` until :meth:`revive`
    (a new invocation)."""

    def __init__(self, clock: VirtualClock, latencies: Latencies,
                 faults: CallFaults | None = None, *, seed: int = 0) -> None:
        self.clock = clock
        self.latencies = latencies
        self.counts: Counter[str] = Counter()
        self.draws = CallDraws(faults or CallFaults(), seed)
        self.dead = False
        self._writes_left: int | None = None
        self._lock = threading.Lock()

    def charge(self, api: str, items: int = 1, calls: int = 1,
               throttled: Callable[[], Exception] | None = None) -> None:
        """``calls`` calls of ``api``; ``throttled`` makes the error a call throttled on
        every attempt raises (None: the API is not throttled)."""
        if self.dead:
            raise InvocationDied(api)
        latency = self.latencies.of(api, items)
        for _ in range(calls):
            drawn = self.draws.attempts(api if throttled is not None else "", latency)
            with self._lock:
                self.counts[api] += drawn.attempts
            self.clock.charge(drawn.seconds)
            if drawn.throttled_through and throttled is not None:
                raise throttled()

    def retried(self, api: str, n: int) -> bool:
        """Attempt ``n`` of ``api`` was throttled for a partition past its limit: whether
        its adapter tries again (the wait and the next attempt charged and counted)."""
        wait = self.draws.backoff(api, n)
        if wait is None:
            return False
        with self._lock:
            self.counts[api] += 1
        self.clock.charge(wait + self.latencies.of(api))
        return True

    def wrote(self) -> None:
        """A table write of this component is done: it dies here if its time has come."""
        with self._lock:
            if self._writes_left is None:
                return
            self._writes_left -= 1
            if self._writes_left > 0:
                return
            self._writes_left, self.dead = None, True
        raise InvocationDied("after its write")

    def die_after(self, writes: int) -> None:
        with self._lock:
            self._writes_left = max(1, writes)

    def revive(self) -> None:
        with self._lock:
            self._writes_left, self.dead = None, False


def _table_throttled(api: str) -> Callable[[], Exception]:
    # What dispatcher.aws.dynamodb.dynamo_table makes of botocore's last throttled attempt.
    return lambda: TableUnavailable(api, "ProvisionedThroughputExceededException",
                                    "The level of configured provisioned throughput for the "
                                    "table was exceeded.", status=400, retryable=True)


def _ecs_throttled(api: str) -> Callable[[], Exception]:
    if api == "RunTask":  # dispatcher.aws.ecs.ecs_call
        return lambda: RateExceeded("RunTask: ThrottlingException: Rate exceeded")
    response: Any = {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                     "ResponseMetadata": {"HTTPStatusCode": 400}}
    return lambda: ClientError(response, api)


class ItemTimes:
    """When each item was last written, in virtual time (shared by every component's table).
    Jobs and pages are left out (``UNTRACKED``): only the runner writes them after their
    recording, always later, and a million of them would be this model's memory; the last
    job write's time is kept (``last_job_write``: when a drain's recording ended)."""

    UNTRACKED = ("JOB#", "PAGE#")
    # Read by runners and rewritten by every tick, which the model runs whole between two of
    # its events: a runner's take would otherwise wait for the end of a tick under way
    # (dispatcher.store.follow_ons reads only its revision, the same all through a batch).
    UNORDERED = ("TICK#",)

    def __init__(self) -> None:
        self._at: dict[str, float] = {}
        self._lock = threading.Lock()
        self.last_job_write = 0.0

    def after(self, clock: VirtualClock, pks: list[str]) -> None:
        with self._lock:
            latest = max((self._at.get(pk, 0.0) for pk in pks
                          if not pk.startswith(self.UNORDERED)), default=0.0)
        clock.at_least(latest)

    def wrote(self, clock: VirtualClock, pks: list[str]) -> None:
        t = clock()
        with self._lock:
            for pk in pks:
                if pk.startswith(self.UNTRACKED):
                    self.last_job_write = max(self.last_job_write, t)
                else:
                    self._at[pk] = t


class ModelQueue(Queue):
    def __init__(self, inner: Queue, calls: Calls) -> None:
        self.inner = inner
        self.calls = calls

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        self.calls.charge("SendMessageBatch")
        return self.inner.send(entries)

    def receive(self, max_messages: int = 10,
                visibility_timeout: int | None = None, wait_seconds: int = 0) -> list[Received]:
        self.calls.charge("ReceiveMessage")
        return self.inner.receive(max_messages, visibility_timeout, wait_seconds)

    def delete(self, messages: list[Received]) -> dict[str, str]:
        self.calls.charge("DeleteMessageBatch")
        return self.inner.delete(messages)

    def release(self, messages: list[Received], after: int = 0) -> None:
        self.calls.charge("ChangeMessageVisibilityBatch")
        self.inner.release(messages, after)

    def backlog(self) -> Backlog:
        self.calls.charge("GetQueueAttributes")
        return self.inner.backlog()


class ModelTable(Table):
    def __init__(self, inner: Table, calls: Calls, times: ItemTimes,
                 partitions: Partitions | None = None) -> None:
        """``partitions``: each partition key's writes a second, shared by every component's
        table; a write past a key's limit is throttled (None: no limit)."""
        self.inner = inner
        self.calls = calls
        self.times = times
        self.partitions = partitions

    def _room(self, api: str, ops: list[Op], throttled: Callable[[], Exception]) -> None:
        """Wait, as the adapter retries, until every partition key ``ops`` write has room
        in its second; raise ``throttled()`` if the adapter gives up first."""
        if self.partitions is None:
            return
        charges = self.partitions.charges(ops, transaction=api == "TransactWriteItems")
        n = 1
        while not self.partitions.take(self.calls.clock(), charges):
            if not self.calls.retried(api, n):
                raise throttled()
            n += 1

    def get(self, pk: str) -> Record | None:
        self.calls.charge("GetItem", throttled=_table_throttled("GetItem"))
        return self.inner.get(pk)

    def get_many(self, pks: list[str]) -> list[Record]:
        for start in range(0, len(pks), 100):  # BatchGetItem takes 100 keys
            self.calls.charge("BatchGetItem", len(pks[start:start + 100]),
                              throttled=_table_throttled("BatchGetItem"))
        return self.inner.get_many(pks)

    def query(self, status_key: str, *, at_most: str | None = None,
              at_least: str | None = None, limit: int | None = None,
              newest_first: bool = False, where: Condition | None = None,
              after: Record | None = None) -> list[Record]:
        self.calls.charge("Query", throttled=_table_throttled("Query"))
        return self.inner.query(status_key, at_most=at_most, at_least=at_least, limit=limit,
                                newest_first=newest_first, where=where, after=after)

    def count(self, status_key: str, *, at_least: str | None = None,
              where: Condition | None = None) -> int:
        self.calls.charge("Query", throttled=_table_throttled("Query"))
        return self.inner.count(status_key, at_least=at_least, where=where)

    def write(self, op: Put | Update | Delete) -> Record | None:
        api = {Put: "PutItem", Update: "UpdateItem", Delete: "DeleteItem"}[type(op)]
        self.times.after(self.calls.clock, [op.pk])
        self.calls.charge(api, throttled=_table_throttled(api))
        self._room(api, [op], _table_throttled(api))
        try:
            done = self.inner.write(op)
        finally:
            self.times.wrote(self.calls.clock, [op.pk])
        self.calls.wrote()
        return done

    def transact(self, ops: list[Op], *, token: str | None = None) -> None:
        pks = [op.pk for op in ops]
        self.times.after(self.calls.clock, pks)
        cancelled = lambda: TransactionCancelled(  # noqa: E731
            ["ThrottlingError"] + [None] * (len(ops) - 1))
        self.calls.charge("TransactWriteItems", len(ops), throttled=cancelled)
        self._room("TransactWriteItems", ops, cancelled)
        try:
            self.inner.transact(ops, token=token)
        finally:
            self.times.wrote(self.calls.clock, pks)
        self.calls.wrote()

    def _transact(self, ops: list[Op]) -> None:  # every transaction goes through transact
        raise NotImplementedError

    def create(self) -> None:
        self.inner.create()

    def clear(self) -> None:
        self.inner.clear()


class ModelLauncher(Launcher):
    """The launcher twin behind ECS's latencies; ``started`` lists each task it started with
    the virtual time its RunTask returned (when Fargate begins to provision it)."""

    def __init__(self, inner: Launcher, calls: Calls) -> None:
        self.inner = inner
        self.calls = calls
        self.started: list[tuple[str, float, Resources]] = []
        self._seen: set[str] = set()  # a repeated clientToken returns the same tasks
        self._lock = threading.Lock()

    def resolve_task_definition(self) -> str:
        self.calls.charge("DescribeTaskDefinition",
                          throttled=_ecs_throttled("DescribeTaskDefinition"))
        return self.inner.resolve_task_definition()

    def run(self, request: LaunchRequest) -> LaunchResult:
        self.calls.charge("RunTask", throttled=_ecs_throttled("RunTask"))
        result = self.inner.run(request)
        at = self.calls.clock()
        # The launch thread takes every bundle handed over by then for its next RunTask: wait
        # until the drain (the lead) has reached this time, as it would have on AWS.
        self.calls.clock.wait_for_lead()
        with self._lock:
            fresh = [arn for arn in result.task_arns if arn not in self._seen]
            self._seen.update(fresh)
            self.started.extend((arn, at, request.resources) for arn in fresh)
        return result

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        self.calls.charge("DescribeTasks", calls=max(1, -(-len(task_arns) // 100)),
                          throttled=_ecs_throttled("DescribeTasks"))
        return self.inner.describe(task_arns)

    def stop(self, task_arn: str, reason: str) -> None:
        self.calls.charge("StopTask", throttled=_ecs_throttled("StopTask"))
        self.inner.stop(task_arn, reason)


def per_job(counts: Counter[str], jobs: int) -> str:
    """``API n/job, ...``, most frequent first."""
    return ", ".join(f"{api} {n / jobs:.3f}" for api, n in counts.most_common())

