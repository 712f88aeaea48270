"""The Launcher port: start N identical tasks for one Launch, idempotently per clientToken.

The dispatcher does not know whether tasks become Fargate tasks or local processes. Every
implementation promises ECS's semantics (the base class documents each one):

- ``dispatcher.aws.ecs.EcsLauncher``: the adapter (RunTask, DescribeTasks, StopTask);
- ``dispatcher.local.local_launcher.LocalLauncher``: each task is a runner process on this machine,
  forked from a warm starter (or ``python -m job_runner`` with warm start off);
- ``dispatcher.ops.dryrun.DryRunLauncher``: answers the dry run's launches and starts nothing;
- ``dispatcher.testing.memory_launcher.MemoryLauncher``: the in-memory twin for tests, checked
  against the adapter by the launcher contract suite.

Fargate's launch limits, which every launcher meets, are domain rules:
:mod:`dispatcher.domain.pacing`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from dispatcher.domain.costs import TaskBill
from dispatcher.domain.jobs import Resources
from dispatcher.domain.stops import LastStatus

# RunTask starts at most 10 tasks per call.
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_RunTask.html
MAX_TASKS_PER_CALL = 10


@dataclass(frozen=True)
class LaunchRequest:
    task_definition: str  # family:revision, pinned
    count: int
    client_token: str
    started_by: str
    env: dict[str, str] = field(default_factory=dict)  # container environment overrides
    tags: dict[str, str] = field(default_factory=dict)
    # On-demand capacity only (launch type FARGATE), whatever the configured strategy: the
    # fallback for bundles Fargate Spot had no capacity for.
    on_demand: bool = False
    # Task-level size of every task of the call (RunTask overrides apply to all its tasks);
    # Resources(): the task definition's.
    resources: Resources = field(default_factory=Resources)


@dataclass(frozen=True)
class LaunchResult:
    task_arns: list[str]  # in the order ECS returned them
    failures: list[str]  # one reason per task that was not started


@dataclass(frozen=True)
class TaskStatus:
    """One task as DescribeTasks sees it, normalized by the adapter."""

    task_arn: str
    last_status: LastStatus  # PROVISIONING ... RUNNING ... STOPPED, or MISSING if ECS forgot it
    stop_code: str | None = None  # a dispatcher.domain.stops.StopCode value, or one ECS added
    stopped_reason: str | None = None
    exit_code: int | None = None  # the worker container's
    bill: TaskBill | None = None  # a stopped task's (dispatcher.domain.costs), where known


class Launcher(ABC):
    """Starts, observes and stops the worker tasks, with ECS's semantics.

    Errors: a call that certainly started nothing raises ``LaunchError`` (rejected request) or
    ``ResourceMissing`` (cluster or family missing). Any other exception means "outcome
    unknown": the caller repeats the call later with the same clientToken; ``RateExceeded``
    (RunTask throttled) is one of these.
    """

    @abstractmethod
    def resolve_task_definition(self) -> str:
        """The family's latest ACTIVE revision as ``family:revision`` (once per tick).

        ``ResourceMissing`` if the family has no ACTIVE revision.
        """

    @abstractmethod
    def run(self, request: LaunchRequest) -> LaunchResult:
        """Start ``request.count`` (1..MAX_TASKS_PER_CALL) tasks of the pinned revision.

        - A ``client_token`` seen before returns the first call's result and starts nothing.
          Reused with other parameters (a launch recovered after the network or capacity
          settings changed), it returns the tasks the first call started, as ECS names them
          in its ConflictException, and the rest of ``count`` as failures
          (:func:`first_call_tasks`).
          https://docs.aws.amazon.com/AmazonECS/latest/APIReference/ECS_Idempotency.html
        - ``count`` outside 1..10 raises ``LaunchError`` (ECS: InvalidParameterException).
        - Tasks that could not be placed are data, not errors: ``failures`` holds one reason
          each (e.g. ``RESOURCE:MEMORY``); ``len(task_arns) + len(failures) == count``.
        """

    @abstractmethod
    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        """One status per ARN, in the order given; an ARN ECS does not know is MISSING."""

    @abstractmethod
    def stop(self, task_arn: str, reason: str) -> None:
        """Ask the task to stop (SIGTERM, SIGKILL after its stopTimeout).

        The task ends STOPPED with stop code ``UserInitiated`` and ``reason`` (cut to 255
        characters) as its stopped reason. Stopping a task that already stopped is not an error.
        """


# The failure reason of a task the clientToken's first call did not start (see first_call_tasks).
NOT_STARTED_BY_FIRST_CALL = "ConflictException: not started by the first call with this clientToken"


def first_call_tasks(first: LaunchResult, count: int) -> LaunchResult:
    """What a RunTask whose clientToken was used before with other parameters comes to: ECS
    refuses it (ConflictException) and names the tasks the first call started
    (``resourceIds``). Those are this launch's tasks; the rest of ``count`` did not start.
    https://docs.aws.amazon.com/botocore/latest/reference/services/ecs/client/exceptions/ConflictException.html"""
    arns = first.task_arns[:count]
    return LaunchResult(arns, [NOT_STARTED_BY_FIRST_CALL] * (count - len(arns)))
