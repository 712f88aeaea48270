"""The Queue port: SQS is the backlog; the table holds only admitted work.

``dispatcher.aws.sqs.SqsQueue`` is the adapter; ``dispatcher.testing.memory_queue.MemoryQueue``
is its in-memory twin (like dramatiq's StubBroker), with the same at-least-once semantics, held
to it by ``tests/contract/test_queue_contract.py``. ``dispatcher.ops.dead_letters`` builds the
operators' DLQ tools on two Queues (the DLQ and the job queue).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

# SendMessageBatch, ReceiveMessage and DeleteMessageBatch take at most 10 messages.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessageBatch.html
BATCH = 10


@dataclass(frozen=True)
class Received:
    message_id: str
    receipt_handle: str
    body: str
    sent_at: float | None = None
    receive_count: int = 1


@dataclass(frozen=True)
class Backlog:
    visible: int
    in_flight: int
    delayed: int


class Queue(ABC):
    @abstractmethod
    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        """Send up to 10 (entry_id, body) pairs; return {entry_id: reason} for those that failed."""

    @abstractmethod
    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None) -> list[Received]:
        """``visibility_timeout=0`` leaves messages visible (the dry run's look-only receive)."""

    @abstractmethod
    def delete(self, messages: list[Received]) -> dict[str, str]:
        """Delete up to 10 messages; return {message_id: reason} for those that failed."""

    @abstractmethod
    def release(self, messages: list[Received]) -> None:
        """Make messages visible again now: received beyond capacity, they stay backlog."""

    @abstractmethod
    def backlog(self) -> Backlog: ...
