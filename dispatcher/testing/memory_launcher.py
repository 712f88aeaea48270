"""In-memory twin of the Launcher port, with ECS's semantics (like dramatiq's StubBroker).

What it promises, each checked against ``EcsLauncher`` on moto behind ``AwsProxy`` by
``tests/contract/test_launcher_contract.py``:

- a repeated clientToken returns the first call's result and starts nothing new; the same token
  with other parameters returns the tasks the first call started (ECS's ConflictException names
  them) and starts nothing either
  https://docs.aws.amazon.com/AmazonECS/latest/APIReference/ECS_Idempotency.html
- ``count`` outside 1..10 is refused as ECS refuses it (InvalidParameterException), with the
  ``LaunchError`` the ECS adapter raises for it;
- injected placement failures (``inject_failures(["RESOURCE:MEMORY"])``) come back in
  ``failures`` instead of tasks, up to ``count`` per call, like RunTask's ``failures[]``;
- DescribeTasks answers MISSING for an ARN it does not know;
- StopTask leaves the task STOPPED with stop code ``UserInitiated`` and the given reason;
- task definition revisions: ``register_task_definition()`` adds one, resolve returns the
  latest ACTIVE one;
- ``inject_throttle(n)``: the next n calls raise ``RateExceeded`` (ThrottlingException), as
  the ECS adapter does when every retry of a RunTask was throttled;
- optionally (``limits``, off by default) Fargate's two launch limits, enforced as ECS does: a
  RunTask over the call rate or over a capacity provider's task bucket raises
  ``RateExceeded`` (ThrottlingException) and starts nothing. Tasks are charged to providers
  as ``capacity_strategy`` (provider, weight, base) spreads them; on-demand requests and an
  empty strategy charge FARGATE only.

Tests drive tasks with :meth:`set_status` and :meth:`stop_task` (a stop with any stop code,
reason and exit code: a Spot interruption, an OOM kill, a clean exit) and assert on
:attr:`requests` (each with the task size, ``resources``, it asked for; a repeated token with
another size is refused like any other changed parameter) and :attr:`stops`. Deterministic
(ARNs are numbered, no clock unless given) and thread-safe (one lock).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.domain.costs import TaskBill
from dispatcher.domain.errors import LaunchError, ResourceMissing
from dispatcher.domain.pacing import CAPACITY_UNAVAILABLE, LaunchLimits, RateExceeded, split_tasks
from dispatcher.domain.stops import LastStatus, StopCode
from dispatcher.ports.launcher import (
    MAX_TASKS_PER_CALL,
    Launcher,
    LaunchRequest,
    LaunchResult,
    TaskStatus,
    first_call_tasks,
)

__all__ = ["MemoryLauncher", "MemoryTask"]

MAX_REASON = 255  # StopTask's reason limit


@dataclass
class MemoryTask:
    """One task the twin started, as DescribeTasks would show it."""

    task_arn: str
    request: LaunchRequest
    last_status: LastStatus
    started_at: float
    stop_code: str | None = None
    stopped_reason: str | None = None
    exit_code: int | None = None
    stopped_at: float | None = None
    capacity_provider: str = "FARGATE"  # where the strategy put it (dispatcher.domain.pacing)

    def bill(self) -> TaskBill | None:
        """Its bill as its stop reports it (None while it runs): the request's size, else
        the twin task definition's (DEFAULT_CPU, DEFAULT_MEMORY), from its start to its
        stop."""
        if self.stopped_at is None:
            return None
        size = self.request.resources
        return TaskBill(size.cpu or DEFAULT_CPU, size.memory or DEFAULT_MEMORY, self.started_at,
                        self.stopped_at, self.capacity_provider)

    def status(self) -> TaskStatus:
        return TaskStatus(self.task_arn, self.last_status, self.stop_code,
                          self.stopped_reason, self.exit_code, self.bill())

# The twin task definition's size (as local mode registers it): 0.25 vCPU, 512 MiB.
DEFAULT_CPU = 256
DEFAULT_MEMORY = 512
# RunTask's failures[] reason when Fargate has no capacity for a task.
# https://repost.aws/knowledge-center/ecs-fargate-runtask-capacity
SPOT_CAPACITY_REASON = CAPACITY_UNAVAILABLE


class MemoryLauncher(Launcher):
    def __init__(self, *, family: str = "longjobs-worker", cluster: str = "longjobs",
                 region: str = "us-east-1", account: str = "000000000000",
                 initial_status: LastStatus = LastStatus.RUNNING, revisions: int = 1,
                 clock: Callable[[], float] = time.time, limits: LaunchLimits | None = None,
                 capacity_strategy: tuple[tuple[str, int, int], ...] = ()) -> None:
        self.family, self.cluster = family, cluster
        self._limits = limits
        self._strategy = capacity_strategy
        self._arn_prefix = f"arn:aws:ecs:{region}:{account}:task/{cluster}/"
        self._initial = initial_status
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._revisions: dict[int, bool] = {}  # revision: ACTIVE
        self._tokens: dict[str, tuple[LaunchRequest, LaunchResult]] = {}
        self._failures: deque[str] = deque()
        self._throttles = 0
        self._spot_capacity = True
        self.tasks: dict[str, MemoryTask] = {}
        self.requests: list[LaunchRequest] = []  # every run() call, repeats and refusals too
        # (time, provider, tasks) of every launch charged to a provider (with ``limits`` only)
        self.launches: list[tuple[float, str, int]] = []
        self.stops: list[tuple[str, str]] = []  # every stop() call: (task_arn, reason)
        for _ in range(revisions):
            self.register_task_definition()

    # -- task definitions --------------------------------------------------------------------
    def register_task_definition(self) -> str:
        """A new ACTIVE revision of the family; returns ``family:revision``."""
        with self._lock:
            revision = max(self._revisions, default=0) + 1
            self._revisions[revision] = True
            return f"{self.family}:{revision}"

    def deregister_task_definition(self, revision: int) -> None:
        with self._lock:
            if revision in self._revisions:
                self._revisions[revision] = False

    def resolve_task_definition(self) -> str:
        with self._lock:
            active = [r for r, is_active in self._revisions.items() if is_active]
        if not active:
            raise ResourceMissing(f"task family {self.family!r} has no ACTIVE revision "
                                  "(ClientException)")
        return f"{self.family}:{max(active)}"

    # -- fault injection and test controls ----------------------------------------------------
    def inject_failures(self, reasons: list[str]) -> None:
        """The next run() calls report these reasons in ``failures`` instead of starting tasks
        (a call with ``count`` n consumes up to n of them), e.g. ``RESOURCE:MEMORY``."""
        with self._lock:
            self._failures.extend(reasons)

    def inject_throttle(self, times: int) -> None:
        """The next ``times`` run() calls are refused with ``RateExceeded`` (ECS's
        ThrottlingException) and start nothing, whatever ``limits`` says."""
        with self._lock:
            self._throttles += times

    @property
    def limits(self) -> LaunchLimits | None:
        return self._limits

    def set_spot_capacity(self, available: bool) -> None:
        """Model a Spot strategy whose Spot capacity ran out: every task of a request that is
        not ``on_demand`` fails with ECS's capacity reason until it is available again."""
        with self._lock:
            self._spot_capacity = available

    def set_status(self, task_arn: str, status: LastStatus) -> None:
        """Move a task along its lifecycle (PROVISIONING, RUNNING, ...) without stopping it."""
        with self._lock:
            self._task(task_arn).last_status = status

    def stop_task(self, task_arn: str, code: str = StopCode.ESSENTIAL_CONTAINER_EXITED,
                  reason: str = "Essential container in task exited",
                  exit_code: int | None = 0) -> None:
        """Stop a task as ECS would report it: e.g. ``(arn, "SpotInterruption", ...)`` or an
        OOM kill ``(arn, "EssentialContainerExited", "OutOfMemoryError", 137)``."""
        with self._lock:
            self._stop(self._task(task_arn), code, reason, exit_code)

    def running(self) -> list[str]:
        """ARNs of the tasks not yet gone, in start order."""
        with self._lock:
            return [a for a, t in self.tasks.items() if not t.last_status.gone]

    # -- the port ------------------------------------------------------------------------------
    def run(self, request: LaunchRequest) -> LaunchResult:
        with self._lock:
            self.requests.append(request)
            if self._throttles > 0:
                self._throttles -= 1
                raise RateExceeded("ThrottlingException: Rate exceeded (injected)")
            now = self._limits.call() if self._limits is not None else 0.0
            if not 1 <= request.count <= MAX_TASKS_PER_CALL:
                raise LaunchError(f"RunTask rejected: InvalidParameterException: count must be "
                                  f"1..{MAX_TASKS_PER_CALL}, not {request.count}")
            seen = self._tokens.get(request.client_token)
            if seen is not None:
                return seen[1] if seen[0] == request else first_call_tasks(seen[1],
                                                                            request.count)
            family, _, revision = request.task_definition.rpartition(":")
            if family != self.family or not revision.isdigit() \
                    or int(revision) not in self._revisions:
                raise LaunchError("RunTask rejected: ClientException: task definition "
                                  f"{request.task_definition!r} not found")
            if self._limits is not None:
                per_provider = split_tasks(request.count,
                                           () if request.on_demand else self._strategy)
                self._limits.tasks(per_provider, now)
                self.launches.extend((now, p, n) for p, n in per_provider.items())
            if not self._spot_capacity and not request.on_demand:
                result = LaunchResult([], [SPOT_CAPACITY_REASON] * request.count)
                self._tokens[request.client_token] = (request, result)
                return result
            failures = [self._failures.popleft()
                        for _ in range(min(request.count, len(self._failures)))]
            started = request.count - len(failures)
            providers = [p for p, n in split_tasks(
                started, () if request.on_demand else self._strategy).items()
                for _ in range(n)]
            arns = [self._start(request, p) for p in providers]
            result = LaunchResult(arns, failures)
            self._tokens[request.client_token] = (request, result)
            return result

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        with self._lock:
            return [t.status() if (t := self.tasks.get(a)) is not None
                    else TaskStatus(a, LastStatus.MISSING) for a in task_arns]

    def stop(self, task_arn: str, reason: str) -> None:
        with self._lock:
            self.stops.append((task_arn, reason))
            task = self.tasks.get(task_arn)
            if task is None:
                raise LaunchError("StopTask rejected: InvalidParameterException: "
                                  "The referenced task was not found.")
            if not task.last_status.gone:
                self._stop(task, StopCode.USER_INITIATED, reason[:MAX_REASON], None)

    # -- internals (called under the lock) ------------------------------------------------------
    def _start(self, request: LaunchRequest, provider: str) -> str:
        arn = f"{self._arn_prefix}{next(self._ids):032x}"
        self.tasks[arn] = MemoryTask(arn, request, self._initial, self._clock(),
                                     capacity_provider=provider)
        return arn

    def _task(self, task_arn: str) -> MemoryTask:
        task = self.tasks.get(task_arn)
        if task is None:
            raise KeyError(f"no task {task_arn}")
        return task

    def _stop(self, task: MemoryTask, code: str, reason: str, exit_code: int | None) -> None:
        task.last_status = LastStatus.STOPPED
        task.stop_code, task.stopped_reason, task.exit_code = str(code), reason, exit_code
        task.stopped_at = self._clock()
