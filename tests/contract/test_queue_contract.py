"""The Queue port's contract: MemoryQueue (the twin) and SqsQueue (on moto) answer alike.

Every test runs twice, once per implementation, so the twin cannot drift from the adapter.
The DeadLetters operator tool is checked here too: it is built on the port only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.config import Config

from dispatcher.aws.sqs import SqsQueue
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import Priority
from dispatcher.ops.dead_letters import DeadLetters
from dispatcher.ports.queue import MAX_BATCH_BYTES, Queue, Received, send_all
from dispatcher.testing.memory_queue import MemoryQueue

RETRY_ONCE = Config(retries={"max_attempts": 1, "mode": "standard"})
# The provisioned queue hides a received message for 300 s; MemoryQueue gets the same default.
DEFAULT_VISIBILITY = 300

QueueFactory = Callable[[str], Queue]  # "jobs", "high", "low" or "dlq" -> a fresh, empty queue


@pytest.fixture(params=["memory", "sqs"])
def queues(request: pytest.FixtureRequest) -> QueueFactory:
    if request.param == "memory":
        made: dict[str, Queue] = {}
        return lambda name: made.setdefault(name, MemoryQueue(DEFAULT_VISIBILITY))
    aws: Any = request.getfixturevalue("aws")
    sqs = boto3.client("sqs", config=RETRY_ONCE)
    urls = {"jobs": aws.env["LONGJOBS_QUEUE_URL"], "dlq": aws.env["LONGJOBS_DLQ_URL"],
            "high": aws.env["LONGJOBS_HIGH_QUEUE_URL"], "low": aws.env["LONGJOBS_LOW_QUEUE_URL"]}
    return lambda name: SqsQueue(sqs, urls[name])


def _send(queue: Queue, bodies: list[str]) -> None:
    for start in range(0, len(bodies), 10):
        chunk = bodies[start:start + 10]
        assert queue.send([(str(start + n), b) for n, b in enumerate(chunk)]) == {}


def _drain(queue: Queue, visibility: int | None = None) -> list[Received]:
    out: list[Received] = []
    while batch := queue.receive(10, visibility_timeout=visibility):
        out.extend(batch)
    return out


def test_send_receive_delete(queues: QueueFactory) -> None:
    q = queues("jobs")
    before = time.time()
    _send(q, ["a", "b", "c"])
    got = _drain(q)
    assert sorted(m.body for m in got) == ["a", "b", "c"]
    assert len({m.message_id for m in got}) == 3
    assert all(m.receive_count == 1 for m in got)
    assert all(m.sent_at is not None and before - 2 <= m.sent_at <= time.time() + 2 for m in got)
    assert q.delete(got) == {}
    assert q.delete([]) == {}
    assert q.backlog().visible == 0 and q.backlog().in_flight == 0
    assert q.receive() == []


def test_receive_takes_at_most_ten(queues: QueueFactory) -> None:
    q = queues("jobs")
    _send(q, [f"m{i}" for i in range(12)])
    first = q.receive(25)
    assert 1 <= len(first) <= 10
    assert len(_drain(q)) + len(first) == 12


def test_received_messages_are_in_flight_until_deleted(queues: QueueFactory) -> None:
    q = queues("jobs")
    _send(q, ["x", "y"])
    got = _drain(q)
    assert len(got) == 2
    backlog = q.backlog()
    assert (backlog.visible, backlog.in_flight) == (0, 2)
    assert q.receive() == []  # hidden for the visibility timeout
    q.delete(got[:1])
    assert q.backlog().in_flight == 1


def test_visibility_timeout_expires_and_counts_receives(queues: QueueFactory) -> None:
    q = queues("jobs")
    _send(q, ["again"])
    (first,) = q.receive(visibility_timeout=1)
    assert q.receive() == []
    deadline = time.monotonic() + 15  # visible again once its 1 s timeout has run out
    while not (again := q.receive(visibility_timeout=1)):
        assert time.monotonic() < deadline, "the message never became visible again"
        time.sleep(0.1)
    (second,) = again
    assert second.message_id == first.message_id and second.body == "again"
    assert (first.receive_count, second.receive_count) == (1, 2)
    assert second.receipt_handle != first.receipt_handle


def test_visibility_zero_leaves_messages_visible(queues: QueueFactory) -> None:
    q = queues("jobs")
    _send(q, ["look"])
    (seen,) = q.receive(visibility_timeout=0)
    (again,) = q.receive(visibility_timeout=0)
    assert again.message_id == seen.message_id
    assert again.receive_count == seen.receive_count + 1
    assert q.backlog().visible == 1


def test_release_makes_messages_visible_now(queues: QueueFactory) -> None:
    q = queues("jobs")
    _send(q, ["p", "q"])
    got = _drain(q)
    assert q.receive() == []
    q.release(got)
    q.release([])
    back = _drain(q)
    assert sorted(m.body for m in back) == ["p", "q"]
    assert all(m.receive_count == 2 for m in back)


def test_release_after_a_while_keeps_messages_hidden_that_long(queues: QueueFactory) -> None:
    """A message held past most of its visibility timeout is hidden for as long again from
    now (ChangeMessageVisibility to that many seconds), and a shorter one brings it back
    sooner."""
    q = queues("jobs")
    _send(q, ["held"])
    got = q.receive(visibility_timeout=1)
    q.release(got, after=60)
    # Past the first timeout (1 s); the new one (60 s) is far off however loaded the machine:
    # a later look only makes the first timeout further past.
    time.sleep(1.5)
    assert q.receive() == [] and q.backlog().in_flight == 1
    q.release(got, after=1)
    back: list[Received] = []
    deadline = time.monotonic() + 30  # a poll on a condition; the bound is for a hang only
    while not back and time.monotonic() < deadline:
        back = q.receive()
        time.sleep(0.1)
    assert [m.body for m in back] == ["held"] and back[0].receive_count == 2


def test_delete_with_the_latest_receipt_handle(queues: QueueFactory) -> None:
    q = queues("jobs")
    _send(q, ["z"])
    first = q.receive()
    q.release(first)
    latest = q.receive()
    assert q.delete(latest) == {}
    q.release(latest)  # releasing a deleted message brings nothing back
    assert q.receive() == [] and q.backlog().visible == 0


# -- DeadLetters, on the port ------------------------------------------------------------------
def test_dead_letters_peek_takes_nothing(queues: QueueFactory) -> None:
    dlq = queues("dlq")
    letters = DeadLetters(dlq, queues("jobs"))
    _send(dlq, [json.dumps({"job_id": "j1", "kind": "k"}), "not json", "x" * 3000])
    peeked = letters.peek(10)
    assert len(peeked) == 3
    by_job = {p.job_id: p for p in peeked}
    assert by_job["j1"].kind == "k" and not by_job["j1"].body_truncated
    long = next(p for p in peeked if p.body.startswith("x"))
    assert long.body_truncated and len(long.body) == 2048
    assert all(p.to_json()["sent_at"].endswith("Z") for p in peeked)
    assert dlq.backlog().visible == 3  # still there, still visible
    assert len(letters.peek(2)) == 2


def test_dead_letters_redrive_moves_messages_back(queues: QueueFactory) -> None:
    dlq, jobs = queues("dlq"), queues("jobs")
    bodies = [json.dumps({"job_id": f"j{i}", "kind": "k"}) for i in range(13)]
    _send(dlq, bodies)
    moved, failed = DeadLetters(dlq, jobs).redrive(limit=100)
    assert (moved, failed) == (13, {})
    assert sorted(m.body for m in _drain(jobs)) == sorted(bodies)
    assert dlq.backlog().visible == 0 and dlq.backlog().in_flight == 0


def test_dead_letters_redrive_respects_the_limit(queues: QueueFactory) -> None:
    dlq, jobs = queues("dlq"), queues("jobs")
    _send(dlq, [f"b{i}" for i in range(5)])
    moved, failed = DeadLetters(dlq, jobs).redrive(limit=3)
    assert (moved, failed) == (3, {})
    assert len(_drain(jobs)) == 3


def test_dead_letters_redrive_returns_each_message_to_its_prioritys_queue(
        queues: QueueFactory) -> None:
    """The three priority queues share one DLQ: a redriven urgent job must not wait behind the
    normal backlog. A body naming no priority, or one that cannot be read, goes to normal."""
    dlq, normal, high, low = queues("dlq"), queues("jobs"), queues("high"), queues("low")
    body = {p: json.dumps({"job_id": f"j-{p}", "kind": "k", "priority": p})
            for p in ("high", "low", "normal", "urgent")}
    plain = json.dumps({"job_id": "j-plain", "kind": "k"})
    _send(dlq, [*body.values(), plain, "not json", "[1, 2]"])
    letters = DeadLetters(dlq, normal, {Priority.HIGH: high, Priority.LOW: low})
    assert letters.redrive(limit=100) == (7, {})
    assert [m.body for m in _drain(high)] == [body["high"]]
    assert [m.body for m in _drain(low)] == [body["low"]]
    assert sorted(m.body for m in _drain(normal)) == sorted(
        [body["normal"], body["urgent"], plain, "not json", "[1, 2]"])
    assert dlq.backlog().visible == 0 and dlq.backlog().in_flight == 0


def test_dead_letters_redrive_moves_large_messages_within_the_batch_limit(
        queues: QueueFactory) -> None:
    """Ten bodies of 200 KiB are 2 MiB: over SendMessageBatch's 1 MiB, so several calls."""
    dlq, jobs = queues("dlq"), queues("jobs")
    bodies = [json.dumps({"job_id": f"big-{i}", "kind": "k", "payload": {"x": str(i) * 200_000}})
              for i in range(10)]
    for b in bodies:
        _send(dlq, [b])
    assert DeadLetters(dlq, jobs).redrive(limit=100) == (10, {})
    assert sorted(m.body for m in _drain(jobs)) == sorted(bodies)


def test_a_batch_over_the_limits_is_refused_before_any_send(queues: QueueFactory) -> None:
    q = queues("jobs")
    with pytest.raises(LongjobsError, match="limits"):
        q.send([(str(n), "x") for n in range(11)])
    with pytest.raises(LongjobsError, match="limits"):
        q.send([("a", "x" * (MAX_BATCH_BYTES // 2)), ("b", "y" * (MAX_BATCH_BYTES // 2 + 1))])
    assert q.backlog().visible == 0
    # send_all cuts the same entries into batches that fit.
    assert send_all([(q, "a", "x" * (MAX_BATCH_BYTES // 2)),
                     (q, "b", "y" * (MAX_BATCH_BYTES // 2 + 1))]) == {}
    assert len(_drain(q)) == 2
