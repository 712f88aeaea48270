"""ECS "Task State Change" events, parsed into the domain's ``TaskStop``.

:func:`parse` returns domain values only: a ``TaskStop`` to act on, or ``Ignored`` with the
reason. It does no I/O and imports no settings, wiring or stages; the Lambda handler
(``dispatcher.handlers.task_event``) logs and acts on what it returns.

The model tolerates unknown fields and an empty ``containers`` list (TaskFailedToStart after a
long PROVISIONING arrives that way), and only STOPPED events are acted on: the Spot
TerminationNotice arrives with lastStatus RUNNING and is ignored; the stop that follows counts.
https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dispatcher.domain.costs import ARM64, X86_64, TaskBill
from dispatcher.domain.stops import LastStatus, TaskStop

__all__ = ["DETAIL_TYPE", "Ignored", "parse", "sample_event"]

DETAIL_TYPE = "ECS Task State Change"
MALFORMED = "malformed event"


class Container(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str | None = None
    exitCode: int | None = None
    reason: str | None = None


class Attribute(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    value: str | None = None


class TaskDetail(BaseModel):
    model_config = ConfigDict(extra="ignore")
    taskArn: str
    lastStatus: str
    clusterArn: str | None = None
    taskDefinitionArn: str | None = None
    stopCode: str | None = None
    stoppedReason: str | None = None
    stoppedAt: str | None = None
    startedBy: str | None = None
    version: int | None = None
    containers: list[Container] = Field(default_factory=list)
    # The bill (dispatcher.domain.costs): size, capacity, the span from image pull to stop.
    cpu: str | None = None
    memory: str | None = None
    capacityProviderName: str | None = None
    pullStartedAt: str | None = None
    attributes: list[Attribute] = Field(default_factory=list)


class Envelope(BaseModel):
    """The EventBridge envelope; ``detail`` is read as a TaskDetail only once the detail-type
    says it is one (other ECS events, e.g. Container Instance State Change, have no taskArn)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    source: str = "aws.ecs"
    detail_type: str = Field(default=DETAIL_TYPE, alias="detail-type")
    detail: dict[str, Any]


@dataclass(frozen=True)
class Ignored:
    """An event not acted on, and why (malformed, not STOPPED, not a Task State Change).

    ``detail`` carries the validation error of a malformed event (cut to 500 characters).
    """

    reason: str
    detail: str = ""

    @property
    def malformed(self) -> bool:
        """Not a valid event at all (log it as an error), rather than one not to act on."""
        return self.reason == MALFORMED


def parse(event: Mapping[str, Any], container: str) -> TaskStop | Ignored:
    """The stop an EventBridge "ECS Task State Change" event reports, or why it is ignored.

    ``container`` names the worker container whose exit code counts (else the first one that
    has an exit code). A malformed event is never retried: retrying cannot fix it, and a lost
    stop is found by the tick's reconciliation.
    """
    try:
        envelope = Envelope.model_validate(event)
        if envelope.detail_type != DETAIL_TYPE:
            return Ignored(f"detail-type {envelope.detail_type!r}")
        detail = TaskDetail.model_validate(envelope.detail)
    except ValidationError as exc:
        return Ignored(MALFORMED, str(exc)[:500])
    if LastStatus.parse(detail.lastStatus) != LastStatus.STOPPED:
        return Ignored(f"lastStatus {detail.lastStatus}")
    return _to_stop(detail, container)


def _to_stop(d: TaskDetail, container: str) -> TaskStop:
    exit_code = next((c.exitCode for c in d.containers if c.name == container), None)
    if exit_code is None:
        exit_code = next((c.exitCode for c in d.containers if c.exitCode is not None), None)
    stopped_at = _epoch(d.stoppedAt)
    return TaskStop(d.taskArn, d.stopCode, d.stoppedReason, exit_code, stopped_at,
                    _bill(d, stopped_at))


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _bill(d: TaskDetail, stopped_at: float | None) -> TaskBill | None:
    """The task's bill, when the event carries its size and span: billed from the image
    pull's start to its stop (a task that never began to pull is not billed: None). The
    architecture is the task's ``ecs.cpu-architecture`` attribute where ECS gives one, else
    x86."""
    started = _epoch(d.pullStartedAt)
    try:
        cpu, memory = float(d.cpu or ""), float(d.memory or "")
    except ValueError:
        return None
    if started is None or stopped_at is None:
        return None
    arch = next((a.value for a in d.attributes if a.name == "ecs.cpu-architecture" and a.value),
                X86_64)
    return TaskBill(cpu, memory, started, stopped_at, d.capacityProviderName,
                    ARM64 if arch.lower() in ("arm64", "aarch64") else X86_64)


def sample_event(task_arn: str, *, last_status: str = "STOPPED", stop_code: str | None = None,
                 reason: str | None = None, exit_code: int | None = None,
                 container: str = "worker", cluster_arn: str = "", version: int = 3,
                 task_definition: str = "", bill: TaskBill | None = None) -> dict[str, Any]:
    """An event shaped as EventBridge delivers it (local mode feeds these to the handler);
    ``bill``: the task's size, capacity and billed span, in the event's own fields."""
    detail: dict[str, Any] = {
        "taskArn": task_arn, "lastStatus": last_status, "desiredStatus": "STOPPED",
        "clusterArn": cluster_arn, "taskDefinitionArn": task_definition, "version": version,
        "containers": [] if exit_code is None else [
            {"name": container, "exitCode": exit_code, "lastStatus": last_status}],
    }
    if stop_code:
        detail["stopCode"] = stop_code
    if reason:
        detail["stoppedReason"] = reason
    if bill is not None:
        detail.update({
            "cpu": f"{bill.cpu_units:g}", "memory": f"{bill.memory_mib:g}",
            "pullStartedAt": _iso(bill.started_at), "stoppedAt": _iso(bill.stopped_at),
            "attributes": [{"name": "ecs.cpu-architecture",
                            "value": "arm64" if bill.architecture == ARM64 else "x86_64"}]})
        if bill.capacity_provider:
            detail["capacityProviderName"] = bill.capacity_provider
    return {"version": "0", "source": "aws.ecs", "detail-type": DETAIL_TYPE,
            "account": "000000000000", "region": "us-east-1", "resources": [task_arn],
            "detail": detail}
