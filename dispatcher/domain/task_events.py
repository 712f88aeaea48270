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
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dispatcher.domain.stops import LastStatus, TaskStop

__all__ = ["DETAIL_TYPE", "Ignored", "parse", "sample_event"]

DETAIL_TYPE = "ECS Task State Change"
MALFORMED = "malformed event"


class Container(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str | None = None
    exitCode: int | None = None
    reason: str | None = None


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
    stopped_at = None
    if d.stoppedAt:
        try:
            stopped_at = datetime.fromisoformat(d.stoppedAt.replace("Z", "+00:00")).timestamp()
        except ValueError:
            stopped_at = None
    return TaskStop(d.taskArn, d.stopCode, d.stoppedReason, exit_code, stopped_at)


def sample_event(task_arn: str, *, last_status: str = "STOPPED", stop_code: str | None = None,
                 reason: str | None = None, exit_code: int | None = None,
                 container: str = "worker", cluster_arn: str = "", version: int = 3,
                 task_definition: str = "") -> dict[str, Any]:
    """An event shaped as EventBridge delivers it (local mode feeds these to the handler)."""
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
    return {"version": "0", "source": "aws.ecs", "detail-type": DETAIL_TYPE,
            "account": "000000000000", "region": "us-east-1", "resources": [task_arn],
            "detail": detail}
