"""moto's SQS deletes, made atomic: concurrent deletes on one queue lost each other.

moto (5.2) deletes a message by rebuilding the queue's message list without it and assigning
the new list (``Queue.delete_message``), outside the lock its sends take to append. Two
deletes on the same queue at once (the dispatcher deletes each recorded bundle's messages on
its pool while the next bundle is recorded) both copy the old list; the later assignment puts
back the message the earlier one removed. That message then stays in flight and is delivered
again after its visibility timeout, although its DeleteMessageBatch answered success; a send
landing between the copy and the assignment would vanish. SQS itself deletes atomically.

The patch runs moto's own delete under the queue's own lock (``_messages_lock``, the one its
sends hold), so deletes and sends on one queue take turns; nothing else changes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["patch_sqs_deletes"]


def patch_sqs_deletes() -> bool:
    """Install the locked delete (idempotent); return whether it is installed.

    A moto whose SQS queue no longer has ``_messages_lock`` keeps its own delete.
    """
    from moto.sqs.models import Queue

    moto_delete = Queue.delete_message
    if getattr(moto_delete, "locked", False):
        return True
    probe = Queue.__init__.__code__.co_names
    if "_messages_lock" not in probe:
        return False

    def delete_message(self: Any, receipt_handle: str) -> None:
        with self._messages_lock:
            moto_delete(self, receipt_handle)

    delete_message.locked = True  # type: ignore[attr-defined]
    delete_message.moto_delete = moto_delete  # type: ignore[attr-defined]
    Queue.delete_message = delete_message  # type: ignore[method-assign]
    return True
