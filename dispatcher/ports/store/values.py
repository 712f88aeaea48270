"""The Store port, in the roles that use it: the dispatcher, the job runner, the operators.

Pipeline code talks to this interface only, never to pynamodb or boto3, so the adapter can change
(or be stubbed) without touching the logic that decides what happens to a job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, JobState, Rejection
from dispatcher.domain.launches import Launch


@dataclass
class LaunchOutcome:
    """What one RunTask call did, bundle by bundle, in the order of the launch."""

    assigned: list[tuple[str, str]] = field(default_factory=list)  # (bundle_id, task_arn)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (bundle_id, reason)


@dataclass(frozen=True)
class Fence:
    bundle_id: str
    attempt: int
    task_arn: str


@dataclass
class JobUpdate:
    """One job's state change, with everything that changes alongside it."""

    job_id: str
    source: JobState
    target: JobState
    via: JobState | None = None  # a start and an end written together (grouped writes)
    attempts_delta: int = 0
    infra_delta: int = 0
    history: list[dict[str, Any]] | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    reason: str | None = None
    checkpoint: dict[str, Any] | None = None


class Reads(ABC):
    """Reads every role needs; strongly consistent."""

    @abstractmethod
    def get_job(self, job_id: str) -> Job | None: ...

    @abstractmethod
    def get_bundle(self, bundle_id: str) -> Bundle | None: ...

    @abstractmethod
    def get_jobs(self, job_ids: list[str]) -> list[Job]: ...

    @abstractmethod
    def bundle_for_task(self, task_arn: str) -> Bundle | None:
        """The bundle a task was assigned, read strongly consistent (the runner polls this)."""

    @abstractmethod
    def get_rejection(self, key: str) -> Rejection | None: ...


class DispatchStore(Reads):
    """What the tick and the task-event handler ask of the table (the dry run wraps this)."""

    @abstractmethod
    def acquire_lease(self, owner: str, seconds: float) -> bool:
        """Take the single dispatcher lease unless another live owner holds it."""

    @abstractmethod
    def release_lease(self, owner: str) -> None:
        """Give the lease back early (only if we still own it)."""

    @abstractmethod
    def active_bundles(self) -> list[Bundle]:
        """Bundles launched (or being launched) and not finished: the running-task count, and
        the candidates reconciliation checks against ECS."""

    @abstractmethod
    def due_bundles(self, limit: int, at: float) -> list[Bundle]:
        """PENDING bundles whose backoff has passed, oldest due first."""

    @abstractmethod
    def orphaned_launches(self, older_than: float) -> list[Launch]:
        """Launches recorded before RunTask and never finished (their tick crashed)."""

    @abstractmethod
    def record(self, bundles: list[Bundle], jobs: list[Job]) -> set[str]:
        """Write bundles and their jobs atomically per bundle; return ids that already existed.

        Duplicates are left out (their bundles shrink or vanish); nothing existing is touched.
        """

    @abstractmethod
    def reject(self, rejections: list[Rejection]) -> None:
        """Keep malformed messages as REJECTED records; idempotent for a redelivered message."""

    @abstractmethod
    def begin_launch(self, launch: Launch, bundles: list[Bundle]) -> None:
        """Record the launch and move its bundles PENDING -> LAUNCHING (attempt + 1), atomically."""

    @abstractmethod
    def finish_launch(self, launch: Launch, outcome: LaunchOutcome,
                      retry_at: dict[str, float]) -> None:
        """Assign task ARNs (LAUNCHING -> LAUNCHED, plus TASK# pointers) and put failed bundles
        back to PENDING with their backoff; mark the launch DONE. One transaction."""

    @abstractmethod
    def settle(self, bundle: Bundle, updates: list[JobUpdate], target: BundleState,
               retry_at: float | None = None) -> None:
        """Requeue or close a stopped task's bundle, if nobody moved it since it was read."""

    @abstractmethod
    def running_jobs(self) -> list[Job]: ...

    @abstractmethod
    def fail_overdue(self, job: Job, reason: str) -> None:
        """RUNNING -> FAILED for a job past its timeout whose runner did not stop it."""


class RunnerStore(Reads):
    """A running bundle's writes, each fenced by the claim (the job runner)."""

    @abstractmethod
    def claim(self, fence: Fence) -> Bundle:
        """LAUNCHED -> RUNNING for exactly this task and attempt; ConflictError if lost."""

    @abstractmethod
    def heartbeat(self, fence: Fence, current_job: str | None) -> set[str]:
        """Prove liveness; return job ids whose cancellation was requested."""

    @abstractmethod
    def apply(self, fence: Fence, updates: list[JobUpdate],
              bundle_to: BundleState | None = None, retry_at: float | None = None) -> None:
        """Write job results in grouped, fenced transactions."""

    @abstractmethod
    def save_checkpoint(self, fence: Fence, job_id: str, checkpoint: dict[str, Any]) -> None:
        """Persist a running job's progress, fenced like every other write of its task."""


class Store(DispatchStore, RunnerStore):
    """Everything, plus operator actions: the full port the DynamoDB adapter implements."""

    @abstractmethod
    def cancel(self, job_id: str) -> Job:
        """Cancel now if not started, else request it from the job's running task."""

    @abstractmethod
    def retry(self, job_id: str) -> Job:
        """FAILED or CANCELLED -> PENDING with a fresh budget, in a new bundle."""
