"""Why a task stopped, and what that stop costs: the stop classification.

A ``TaskStop`` is the normalized fact an ECS "Task State Change" event (or a DescribeTasks look
by reconciliation) reports; the ECS adapter builds it, so no stage reads raw ECS shapes. Stops are
classified because they spend different budgets:

- infrastructure (Spot, host failure, never started, never claimed, a stop longjobs did not ask
  for): rerun without spending the job's ``max_attempts``; a separate, larger budget is spent;
- application (the container exited while a job was recorded running: a crash, OOM 137, even
  os._exit(0)): spend one of the job's attempts;
- user (a StopTask longjobs made itself: a job past its timeout that its runner did not stop):
  no rerun.

Stop codes: https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Task.html (stopCode).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dispatcher.domain.costs import TaskBill


class StopCode(StrEnum):
    """ECS's ``stopCode`` values (botocore's ECS model, TaskStopCode)."""

    TASK_FAILED_TO_START = "TaskFailedToStart"
    ESSENTIAL_CONTAINER_EXITED = "EssentialContainerExited"
    USER_INITIATED = "UserInitiated"
    SERVICE_SCHEDULER_INITIATED = "ServiceSchedulerInitiated"
    SPOT_INTERRUPTION = "SpotInterruption"
    TERMINATION_NOTICE = "TerminationNotice"
    INFRASTRUCTURE_HEALTH = "InfrastructureHealth"


INFRA_STOP_CODES = frozenset({StopCode.SPOT_INTERRUPTION, StopCode.TERMINATION_NOTICE,
                              StopCode.SERVICE_SCHEDULER_INITIATED,
                              StopCode.TASK_FAILED_TO_START, StopCode.INFRASTRUCTURE_HEALTH})
# StopTask reasons longjobs gives for a cancel or timeout start with this, so its own stops are
# recognisable; they are never rerun.
USER_STOP_PREFIX = "longjobs:"


# The job runner's exit code when it failed itself (a write it could not make, after retries),
# not because of a job: such a stop is infrastructure even with a job recorded RUNNING.
# 75 is EX_TEMPFAIL in sysexits.h.
RUNNER_FAILED_EXIT = 75


class StopClass(StrEnum):
    INFRASTRUCTURE = "infrastructure"
    APPLICATION = "application"
    USER = "user"


class LastStatus(StrEnum):
    """A task's ``lastStatus`` as ECS reports it, plus MISSING for an ARN ECS no longer knows.

    Launcher adapters normalize to these values (:meth:`parse`); stages compare against them,
    never against raw strings. https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-lifecycle-explanation.html
    """

    PROVISIONING = "PROVISIONING"
    PENDING = "PENDING"
    ACTIVATING = "ACTIVATING"
    RUNNING = "RUNNING"
    DEACTIVATING = "DEACTIVATING"
    STOPPING = "STOPPING"
    DEPROVISIONING = "DEPROVISIONING"
    STOPPED = "STOPPED"
    DELETED = "DELETED"
    MISSING = "MISSING"

    @property
    def gone(self) -> bool:
        """The task no longer runs anything (or ECS forgot it)."""
        return self in (LastStatus.STOPPED, LastStatus.DELETED, LastStatus.MISSING)

    @classmethod
    def parse(cls, value: str | None) -> LastStatus:
        """ECS's string as a LastStatus: None is MISSING; a value this code does not know is
        PROVISIONING (not gone: the task is looked at again later rather than rerun twice)."""
        if value is None:
            return cls.MISSING
        try:
            return cls(value.upper())
        except ValueError:
            return cls.PROVISIONING


@dataclass(frozen=True)
class TaskStop:
    """A task that stopped: its ARN, ECS's stop code and reason, the worker's exit code."""

    task_arn: str
    stop_code: str | None
    stopped_reason: str | None
    exit_code: int | None
    stopped_at: float | None = None
    # What the stop tells of the task's bill (size, capacity, the span billed); None where
    # the stop was not seen in an event or a DescribeTasks answer that carries it.
    bill: TaskBill | None = None

    @property
    def requested_by_longjobs(self) -> bool:
        return self.stop_code == StopCode.USER_INITIATED and \
            (self.stopped_reason or "").startswith(USER_STOP_PREFIX)

    def describe(self) -> str:
        return (f"task stopped: {self.stop_code or 'unknown stop code'}"
                f" (exit {self.exit_code}): {self.stopped_reason or 'no reason given'}")


def classify(stop: TaskStop, *, claimed: bool, job_was_running: bool) -> StopClass:
    """Which budget a stop spends.

    ``claimed``: the task claimed its bundle (some job code may have run);
    ``job_was_running``: a job of the bundle is recorded RUNNING at the stop.
    """
    if not claimed:
        return StopClass.INFRASTRUCTURE  # never claimed: no job code ran
    if stop.stop_code in INFRA_STOP_CODES:
        return StopClass.INFRASTRUCTURE
    if stop.stop_code == StopCode.USER_INITIATED:
        if stop.requested_by_longjobs:
            return StopClass.USER
        return StopClass.INFRASTRUCTURE  # an operator or a drain stopped it, not the job
    if job_was_running and stop.exit_code not in (None, RUNNER_FAILED_EXIT):
        # The runner exits only after recording its running job (a result, or an interrupted
        # job given back after SIGTERM), or with RUNNER_FAILED_EXIT when it failed itself. A
        # job still RUNNING when its container exited otherwise means the job's own code ended
        # the process: a crash, an OOM kill (137), or os._exit(0).
        return StopClass.APPLICATION
    return StopClass.INFRASTRUCTURE
