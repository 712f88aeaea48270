"""A job's attempt history as operators see it: one :class:`Attempt` per run (the runner's
start and end merged with the stop handler's entry) or per `jobs retry` boundary, and the JSON
helpers the operator views share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from dispatcher.store.codec import iso

T = TypeVar("T")


def opt(cast: Callable[[Any], T], value: Any) -> T | None:
    return cast(value) if value is not None else None


def flat(obj: Any) -> dict[str, Any]:
    """A dataclass as JSON: times (``*_at``, epoch seconds) as ISO-8601 UTC strings."""
    return {f.name: opt(iso, getattr(obj, f.name)) if f.name.endswith("_at")
            else getattr(obj, f.name) for f in fields(obj)}


class Flat:
    def to_json(self) -> dict[str, Any]:
        return flat(self)


@dataclass(frozen=True)
class Attempt(Flat):
    """One run of a job on one task, from the job's history (runner start/end entries merged
    with the task-event handler's stop entries)."""

    attempt: int | None
    task_arn: str | None
    task_definition: str | None
    started_at: float | None
    stopped_at: float | None
    stop_code: str | None
    exit_code: int | None
    stop_class: str | None
    outcome: str | None
    reason: str | None
    # Set on the boundary a `jobs retry` leaves (no run): "retried on request after FAILED";
    # its time is started_at, and the attempts after it count from 1 again. A bulk cancel's
    # mark is one too: "cancelled on request by <bulk id>".
    retry: str | None = None
    after: str | None = None  # a retry's: the state it was retried from

    @staticmethod
    def from_history(h: dict[str, Any]) -> Attempt:
        # A bulk action (dispatcher.ops.bulk) names itself on the boundary it leaves ("by").
        by = f" by {h['by']}" if h.get("by") else ""
        if "retried_at" in h:
            retry = f"retried on request after {h.get('after') or '?'}" + (
                " from scratch" if h.get("from_scratch") else "") + by
            return Attempt(None, None, None, opt(float, h.get("retried_at")), None, None, None,
                           None, None, h.get("reason"), retry, opt(str, h.get("after")))
        if "cancelled_at" in h:  # a bulk cancel's mark (the only cancel that leaves one)
            return Attempt(None, None, None, opt(float, h.get("cancelled_at")), None, None,
                           None, None, None, h.get("reason"), "cancelled on request" + by)
        stopped = h.get("stopped_at") if h.get("stopped_at") is not None else h.get("ended_at")
        return Attempt(opt(int, h.get("attempt")), h.get("task_arn"), h.get("task_definition"),
                       opt(float, h.get("started_at")), opt(float, stopped),
                       h.get("stop_code"), opt(int, h.get("exit_code")), h.get("stop_class"),
                       h.get("outcome"), h.get("reason"))
