"""The Launcher port: start N identical tasks for one Launch, idempotently per clientToken.

The dispatcher does not know whether tasks become Fargate tasks or local processes; both
adapters promise ECS's semantics: at most 10 tasks per call, a repeated clientToken returns the
tasks of the first call, and tasks that could not be placed come back as ``failures``.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class LaunchResult:
    task_arns: list[str]  # in the order ECS returned them
    failures: list[str]  # one reason per task that was not started


@dataclass(frozen=True)
class TaskStatus:
    task_arn: str
    last_status: str  # PROVISIONING ... RUNNING ... STOPPED, or MISSING if ECS forgot it
    stop_code: str | None = None
    stopped_reason: str | None = None
    exit_code: int | None = None


class Launcher(ABC):
    @abstractmethod
    def resolve_task_definition(self) -> str:
        """The family's latest ACTIVE revision as ``family:revision`` (once per tick)."""

    @abstractmethod
    def run(self, request: LaunchRequest) -> LaunchResult: ...

    @abstractmethod
    def describe(self, task_arns: list[str]) -> list[TaskStatus]: ...

    @abstractmethod
    def stop(self, task_arn: str, reason: str) -> None: ...


class Pacer:
    """Spaces calls at least 1/rate apart (Fargate allows 20 RunTask calls per second).

    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html
    """

    def __init__(self, per_second: float) -> None:
        self._interval = 1.0 / per_second
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        with self._lock:
            t = time.monotonic()
            delay = self._next - t
            self._next = max(t, self._next) + self._interval
        if delay > 0:
            time.sleep(delay)
