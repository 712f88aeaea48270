"""The SQS adapter of the Queue port (and of the dead-letter queue)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from dispatcher.domain.errors import ResourceMissing
from dispatcher.ports.queue import BATCH, Backlog, Queue, Received, check_batch


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
        check_batch(entries)
        resp = self._call("send_message_batch",
                          Entries=[{"Id": i, "MessageBody": b} for i, b in entries])
        return {f["Id"]: f"{f.get('Code')}: {f.get('Message', '')}"
                for f in resp.get("Failed", [])}

    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None, wait_seconds: int = 0) -> list[Received]:
        extra = {} if visibility_timeout is None else {"VisibilityTimeout": visibility_timeout}
        resp = self._call("receive_message", MaxNumberOfMessages=min(max_messages, BATCH),
                          WaitTimeSeconds=max(0, min(20, wait_seconds)), **extra,
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

    def release(self, messages: list[Received], after: int = 0) -> None:
        if messages:
            self._call("change_message_visibility_batch", Entries=[
                {"Id": str(n), "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": after}
                for n, m in enumerate(messages)])

    def backlog(self) -> Backlog:
        attrs = self._call("get_queue_attributes", AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed"])["Attributes"]
        return Backlog(int(attrs.get("ApproximateNumberOfMessages", 0)),
                       int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0)),
                       int(attrs.get("ApproximateNumberOfMessagesDelayed", 0)))
