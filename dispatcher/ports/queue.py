"""The Queue port: SQS is the backlog; the table holds only admitted work.

``dispatcher.aws.sqs.SqsQueue`` is the adapter; ``dispatcher.testing.memory_queue.MemoryQueue``
is its in-memory twin (like dramatiq's StubBroker), with the same at-least-once semantics, held
to it by ``tests/contract/test_queue_contract.py``. ``dispatcher.ops.dead_letters`` builds the
operators' DLQ tools on two Queues (the DLQ and the job queue).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from dispatcher.domain.errors import LongjobsError

# SendMessageBatch, ReceiveMessage and DeleteMessageBatch take at most 10 messages.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
BATCH = 10
# A SendMessageBatch request carries at most 1 MiB in total (same page), so ten large bodies
# take several calls.
MAX_BATCH_BYTES = 1024 * 1024 - 4096


@dataclass(frozen=True)
class Received:
    message_id: str
    receipt_handle: str
    body: str
    sent_at: float | None = None
    receive_count: int = 1
    # A child of an array job (dispatcher.stages.fanout): its body is its parent's message,
    # and this its index. Never set from a queue a producer can send to.
    array_index: int | None = None


@dataclass(frozen=True)
class Backlog:
    visible: int
    in_flight: int
    delayed: int


class Queue(ABC):
    @abstractmethod
    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        """Send up to 10 (entry_id, body) pairs of at most ``MAX_BATCH_BYTES`` in all (see
        :func:`check_batch`; :func:`send_all` cuts any number into such batches); return
        {entry_id: reason} for those that failed."""

    @abstractmethod
    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None, wait_seconds: int = 0) -> list[Received]:
        """``visibility_timeout=0`` leaves messages visible (the dry run's look-only receive);
        ``wait_seconds``: a long poll, returning as soon as a message arrives (at most 20)."""

    @abstractmethod
    def delete(self, messages: list[Received]) -> dict[str, str]:
        """Delete up to 10 messages; return {message_id: reason} for those that failed."""

    @abstractmethod
    def release(self, messages: list[Received], after: int = 0) -> None:
        """Make messages visible again ``after`` seconds from now (ChangeMessageVisibility):
        0, at once (received beyond capacity, they stay backlog); more, not before then (a
        message still held past half its visibility timeout, kept from coming back while
        its holder is alive). A message deleted meanwhile stays deleted."""

    @abstractmethod
    def backlog(self) -> Backlog: ...


def check_batch(entries: list[tuple[str, str]]) -> None:
    """Refuse a batch SendMessageBatch would refuse (too many entries, or too many bytes),
    before any call: both adapters check it, so the twin cannot accept what SQS rejects."""
    size = sum(len(body.encode()) for _, body in entries)
    if len(entries) > BATCH or size > MAX_BATCH_BYTES:
        raise LongjobsError(f"a batch of {len(entries)} messages and {size} bytes is over "
                            f"SendMessageBatch's limits ({BATCH} messages, "
                            f"{MAX_BATCH_BYTES} bytes); send it with send_all")


def send_all(routed: Iterable[tuple[Queue, str, str]]) -> dict[str, str]:
    """Send (queue, entry_id, body) entries, grouped by queue in the order each first appears,
    in batches SendMessageBatch takes (10 messages, 1 MiB); returns {entry_id: reason} of
    those that failed. Entry ids must be unique across queues and match ``[A-Za-z0-9_-]``."""
    groups: dict[int, tuple[Queue, list[tuple[str, str]]]] = {}
    for queue, entry_id, body in routed:
        groups.setdefault(id(queue), (queue, []))[1].append((entry_id, body))
    failed: dict[str, str] = {}
    for queue, entries in groups.values():
        for batch in _batches(entries):
            failed.update(queue.send(batch))
    return failed


def _batches(entries: list[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    batch: list[tuple[str, str]] = []
    size = 0
    for entry_id, body in entries:
        n = len(body.encode())
        if batch and (len(batch) == BATCH or size + n > MAX_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append((entry_id, body))
        size += n
    if batch:
        yield batch
