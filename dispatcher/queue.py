"""The Queue port: SQS is the backlog; the table holds only admitted work.

``SqsQueue`` is the adapter; ``StubQueue`` is an in-memory twin for unit tests of the pipeline
(like dramatiq's StubBroker), with the same at-least-once semantics.
"""

from __future__ import annotations

import itertools
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from dispatcher.exceptions import ResourceMissing

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


class SqsQueue(Queue):
    def __init__(self, sqs: Any, queue_url: str) -> None:
        self._sqs = sqs
        self.url = queue_url

    def _call(self, op: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._sqs, op)(QueueUrl=self.url, **kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if "NonExistentQueue" in code or code == "QueueDoesNotExist":
                raise ResourceMissing(f"SQS queue {self.url} does not exist") from None
            raise

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        resp = self._call("send_message_batch",
                          Entries=[{"Id": i, "MessageBody": b} for i, b in entries])
        return {f["Id"]: f"{f.get('Code')}: {f.get('Message', '')}"
                for f in resp.get("Failed", [])}

    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None) -> list[Received]:
        extra = {} if visibility_timeout is None else {"VisibilityTimeout": visibility_timeout}
        resp = self._call("receive_message", MaxNumberOfMessages=min(max_messages, BATCH),
                          WaitTimeSeconds=0, **extra,
                          MessageSystemAttributeNames=["SentTimestamp", "ApproximateReceiveCount"])
        out = []
        for m in resp.get("Messages", []):
            attrs = m.get("Attributes", {})
            sent = attrs.get("SentTimestamp")
            out.append(Received(m["MessageId"], m["ReceiptHandle"], m.get("Body", ""),
                                int(sent) / 1000 if sent else None,
                                int(attrs.get("ApproximateReceiveCount", 1))))
        return out

    def delete(self, messages: list[Received]) -> dict[str, str]:
        if not messages:
            return {}
        resp = self._call("delete_message_batch", Entries=[
            {"Id": str(n), "ReceiptHandle": m.receipt_handle} for n, m in enumerate(messages)])
        return {messages[int(f["Id"])].message_id: f"{f.get('Code')}: {f.get('Message', '')}"
                for f in resp.get("Failed", [])}

    def release(self, messages: list[Received]) -> None:
        if messages:
            self._call("change_message_visibility_batch", Entries=[
                {"Id": str(n), "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": 0}
                for n, m in enumerate(messages)])

    def backlog(self) -> Backlog:
        attrs = self._call("get_queue_attributes", AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed"])["Attributes"]
        return Backlog(int(attrs.get("ApproximateNumberOfMessages", 0)),
                       int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0)),
                       int(attrs.get("ApproximateNumberOfMessagesDelayed", 0)))


class StubQueue(Queue):
    """In-memory queue with visibility timeouts: a redelivery happens if a message isn't deleted."""

    def __init__(self, visibility_seconds: float = 30.0) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._messages: dict[str, tuple[str, float, float, int]] = {}  # id: body, sent, vis, n
        self.visibility_seconds = visibility_seconds

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        with self._lock:
            for _, body in entries:
                self._messages[f"m{next(self._ids)}"] = (body, time.time(), 0.0, 0)
        return {}

    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None) -> list[Received]:
        t, out = time.time(), list[Received]()
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

    def release(self, messages: list[Received]) -> None:
        with self._lock:
            for m in messages:
                if m.message_id in self._messages:
                    body, sent, _, n = self._messages[m.message_id]
                    self._messages[m.message_id] = (body, sent, 0.0, n)

    def backlog(self) -> Backlog:
        t = time.time()
        with self._lock:
            visible = sum(1 for _, _, v, _ in self._messages.values() if v <= t)
            return Backlog(visible, len(self._messages) - visible, 0)
