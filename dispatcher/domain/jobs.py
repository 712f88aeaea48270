"""Jobs: what a producer asked for, its state, and the record of a message that never became one.

Plain dataclasses: how they are stored is the store's business; which state changes are legal is
:mod:`dispatcher.domain.lifecycle`'s.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dispatcher.domain import sizes


class JobState(StrEnum):
    PENDING = "PENDING"  # admitted, recorded, waiting for (or between) task attempts
    RUNNING = "RUNNING"  # a claimed task is executing its handler
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    REJECTED = "REJECTED"  # never admitted: the message was malformed


TERMINAL_JOB_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED,
                       JobState.REJECTED)


class Priority(StrEnum):
    """A job's priority: each level has its own queue; see dispatcher.stages.admit."""

    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


PRIORITY_ORDER = (Priority.HIGH, Priority.NORMAL, Priority.LOW)


@dataclass(frozen=True)
class Resources:
    """Task-level cpu (units, 1024 = 1 vCPU), memory (MiB) and ephemeral storage (GiB) a job
    asks for; None leaves the task definition's value. Jobs share a task only if equal."""

    cpu: int | None = None
    memory: int | None = None
    ephemeral_storage: int | None = None

    @property
    def default(self) -> bool:
        return self.cpu is None and self.memory is None and self.ephemeral_storage is None

    def describe(self) -> str:
        if self.default:
            return "the task definition's size"
        parts = [f"cpu {self.cpu}" if self.cpu else "", f"memory {self.memory} MiB"
                 if self.memory else "", f"storage {self.ephemeral_storage} GiB"
                 if self.ephemeral_storage else ""]
        return ", ".join(p for p in parts if p)


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
    # Its progress report as of its last checkpoint (dispatcher.domain.progress), as JSON.
    progress: dict[str, Any] | None = None
    # What its producer labelled it with (dispatcher.domain.labels): key -> value.
    labels: dict[str, str] | None = None
    # Whom its work is for (dispatcher.domain.tenants); None: no tenant.
    tenant: str | None = None
    # Rate limits' tokens its launch takes (dispatcher.domain.rate_limits): key -> count.
    uses: dict[str, int] | None = None
    # The task whose stop last requeued or failed this job: a settle interrupted part-way is
    # handled again, and a job it already settled is not charged a second time for that stop.
    settled_by: str | None = None
    # The task whose run of this job may still be alive although the job moved on: its
    # handler was abandoned still running, or the job was failed as overdue while its task ran
    # on for its bundle-mates. A retry waits until that task is known stopped (see
    # dispatcher.domain.lifecycle, "Live runs").
    live_task: str | None = None
    payload_bytes: int = 0  # serialised size when admitted (not stored)
    priority: Priority = Priority.NORMAL
    not_before: float | None = None  # scheduled: not launched before this UTC epoch time
    resources: Resources = field(default_factory=Resources)
    # An array job (dispatcher.domain.arrays): the parent has a size and never runs; each
    # child names its parent and its index.
    array_size: int | None = None
    array_tolerated: int = 0
    array_parent: str | None = None
    array_index: int | None = None
    # Jobs this one waits for (dispatcher.domain.dependencies: {"job_id", "condition"} each),
    # None once they are all met, or for a job that waits for none. An array's n_to_n ones
    # ({..., "n_to_n": true}) stay: its children are offered by them one by one.
    depends_on: list[dict[str, str | bool]] | None = None
    # How many jobs were linked as waiting for this one (its end releases them); written
    # only by those links, never by the job's own writes.
    waiters: int = 0
    # The ids of the bulk operator actions that acted on it, oldest first, the latest
    # sizes.MAX_BULK_MARKS of them (dispatcher.store.bulk_marks): a resumed action skips it.
    bulk_ids: list[str] = field(default_factory=list)

    def scheduled(self, at: float) -> bool:
        """Waiting for its ``not_before`` (shown to operators as SCHEDULED)."""
        return self.state == JobState.PENDING and self.not_before is not None \
            and self.not_before > at

    def item_bytes(self) -> int:
        """Upper estimate of its table item, for bundle and transaction size limits."""
        size = self.payload_bytes or sizes.json_bytes(self.payload)
        return size + 1024


@dataclass(frozen=True)
class Rejection:
    """A message that could not become a job, kept with its reason instead of being dropped."""

    key: str  # the job id if one could be read, else the SQS message id
    message_id: str
    reason: str
    body: str
    job_id: str | None = None
    created_at: float = field(default_factory=now)
