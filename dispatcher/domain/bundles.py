"""Bundles: the unit of launch. One task runs one bundle's jobs."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from dispatcher.domain.jobs import now


class BundleState(StrEnum):
    PENDING = "PENDING"  # waiting for a launch (new, capacity failure or rerun)
    LAUNCHING = "LAUNCHING"  # a Launch owns it; RunTask may or may not have happened
    LAUNCHED = "LAUNCHED"  # has a task ARN; the task has not claimed it yet
    RUNNING = "RUNNING"  # claimed by its task
    DONE = "DONE"  # every job reached a terminal state


ACTIVE_BUNDLE_STATES = (BundleState.LAUNCHING, BundleState.LAUNCHED, BundleState.RUNNING)


@dataclass
class Bundle:
    """The unit of launch: one task runs one bundle, in order."""

    bundle_id: str
    job_ids: list[str]
    state: BundleState = BundleState.PENDING
    estimated_seconds: float = 0.0
    attempt: int = 0  # launch attempts; with task_arn, the fence every task write carries
    launch_id: str | None = None
    task_arn: str | None = None
    task_definition: str | None = None  # family:revision pinned at launch
    next_attempt_at: float = field(default_factory=now)
    launch_failures: int = 0
    last_failure: str | None = None
    created_at: float = field(default_factory=now)
    updated_at: float = 0.0  # when it entered its current state
    heartbeat_at: float | None = None


