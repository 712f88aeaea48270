"""The domain: a Job, the Bundle of jobs one task runs, and the Launch that started the tasks.

These are plain dataclasses. How they are stored is the persistence layer's business; which state
changes are legal is :mod:`dispatcher.state`'s.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    PENDING = "PENDING"  # admitted, recorded, waiting for (or between) task attempts
    RUNNING = "RUNNING"  # a claimed task is executing its handler
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"  # never admitted: the message was malformed


class BundleState(StrEnum):
    PENDING = "PENDING"  # waiting for a launch (new, capacity failure or rerun)
    LAUNCHING = "LAUNCHING"  # a Launch owns it; RunTask may or may not have happened
    LAUNCHED = "LAUNCHED"  # has a task ARN; the task has not claimed it yet
    RUNNING = "RUNNING"  # claimed by its task
    DONE = "DONE"  # every job reached a terminal state


class LaunchState(StrEnum):
    STARTING = "STARTING"  # recorded before RunTask; a crash leaves it here for recovery
    DONE = "DONE"


ACTIVE_BUNDLE_STATES = (BundleState.LAUNCHING, BundleState.LAUNCHED, BundleState.RUNNING)
TERMINAL_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED,
                       JobState.REJECTED)


def now() -> float:
    return time.time()


def new_id() -> str:
    return uuid.uuid4().hex


@dataclass
class Job:
    job_id: str
    kind: str
    payload: dict[str, Any]
    state: JobState = JobState.PENDING
    bundle_id: str | None = None
    estimated_seconds: float | None = None
    max_attempts: int = 3
    timeout_seconds: float | None = None
    attempts: int = 0  # application attempts spent
    infra_attempts: int = 0  # reruns after infrastructure stops (separate budget)
    created_at: float = field(default_factory=now)
    enqueued_at: float | None = None  # SQS SentTimestamp, for dispatch lag
    message_id: str | None = None
    reason: str | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: dict[str, Any] | None = None
    payload_bytes: int = 0  # serialised size when admitted (not stored)

    def item_bytes(self) -> int:
        """Upper estimate of its table item, for bundle and transaction size limits."""
        size = self.payload_bytes or len(json.dumps(self.payload, separators=(",", ":")))
        return size + 1024


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


@dataclass
class Launch:
    """One RunTask call for up to 10 bundles sharing a launch profile.

    Recorded before the call, so a crashed tick leaves a trace; the clientToken is derived from
    the bundles and their attempts, so repeating the call returns the same tasks.
    """

    launch_id: str
    bundle_ids: list[str]
    task_definition: str
    state: LaunchState = LaunchState.STARTING
    created_at: float = field(default_factory=now)
    task_arns: list[str] = field(default_factory=list)

    @property
    def client_token(self) -> str:
        # RunTask accepts up to 64 ASCII characters; tokens live 24 hours.
        # https://docs.aws.amazon.com/AmazonECS/latest/APIReference/ECS_Idempotency.html
        return f"lj-{self.launch_id}"[:64]

    @staticmethod
    def make_id(bundles: list[Bundle]) -> str:
        key = "|".join(f"{b.bundle_id}:{b.attempt + 1}" for b in bundles)
        return hashlib.sha256(key.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Rejection:
    """A message that could not become a job, kept with its reason instead of being dropped."""

    key: str  # the job id if one could be read, else the SQS message id
    message_id: str
    reason: str
    body: str
    job_id: str | None = None
    created_at: float = field(default_factory=now)
