"""ECS "Task State Change" events, parsed into a TaskStop the rerun logic acts on.

The model tolerates unknown fields and an empty ``containers`` list (TaskFailedToStart after a
long PROVISIONING arrives that way), and only STOPPED events are acted on: the Spot
TerminationNotice arrives with lastStatus RUNNING and is ignored; the stop that follows counts.
https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_task_events.html
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dispatcher.logs import logger
from dispatcher.settings import Config


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


class TaskEvent(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    source: str = "aws.ecs"
    detail_type: str = Field(default="ECS Task State Change", alias="detail-type")
    detail: TaskDetail


@dataclass(frozen=True)
class TaskStop:
    task_arn: str
    stop_code: str | None
    stopped_reason: str | None
    exit_code: int | None
    stopped_at: float | None = None


def to_stop(event: TaskEvent, container: str) -> TaskStop:
    d = event.detail
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


def handle(event: dict[str, Any], cfg: Config, reruns: Any = None) -> dict[str, Any]:
    """Parse, filter, act. A malformed event is logged and dropped (retrying cannot fix it);
    a lost one is caught by the tick's reconciliation."""
    try:
        parsed = TaskEvent.model_validate(event)
    except ValidationError as exc:
        logger.error("malformed task event ignored", extra={"error": str(exc)[:500]})
        return {"ignored": "malformed event"}
    if parsed.detail.lastStatus != "STOPPED":
        return {"ignored": f"lastStatus {parsed.detail.lastStatus}"}
    if reruns is None:
        from dispatcher import wiring

        reruns = wiring.reruns(cfg)
    outcome: dict[str, Any] = reruns.on_stop(to_stop(parsed, cfg.container))
    logger.info("task stopped", extra={"task_arn": parsed.detail.taskArn, **outcome})
    return outcome


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
    return {"version": "0", "source": "aws.ecs", "detail-type": "ECS Task State Change",
            "account": "000000000000", "region": "us-east-1", "resources": [task_arn],
            "detail": detail}
