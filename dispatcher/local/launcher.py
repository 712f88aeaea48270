"""The local adapter: each task is a ``python -m job_runner`` process on this machine.

It keeps the ECS contract the dispatcher relies on (10 per call, clientToken idempotency,
``failures[]`` for tasks not started) so the same pipeline runs unchanged, and reports each
process exit so local mode can turn it into an "ECS Task State Change" event.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dispatcher.domain.errors import LaunchError
from dispatcher.domain.stops import LastStatus
from dispatcher.ports.launcher import (
    MAX_TASKS_PER_CALL,
    Launcher,
    LaunchRequest,
    LaunchResult,
    TaskStatus,
)
from dispatcher.settings import Config

# Fargate gives a container up to 120 s between SIGTERM and SIGKILL (stopTimeout).
STOP_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class TaskExit:
    task_arn: str
    task_definition: str
    exit_code: int
    started_at: float
    stopped_at: float
    stop_code: str  # EssentialContainerExited, UserInitiated, ...
    stopped_reason: str
    started_by: str


@dataclass
class _Task:
    arn: str
    request: LaunchRequest
    process: subprocess.Popen[bytes]
    started_at: float
    stop_reason: str | None = None
    lost_as: str | None = None  # stop code of a simulated infrastructure loss
    exit: TaskExit | None = None
    watcher: threading.Thread | None = None


class LocalLauncher(Launcher):
    def __init__(self, cfg: Config, *, env: dict[str, str] | None = None,
                 on_exit: Callable[[TaskExit], None] | None = None, ecs: Any = None,
                 region: str = "us-east-1", stop_timeout: float = STOP_TIMEOUT_SECONDS,
                 output: int | None = None) -> None:
        self._cfg = cfg
        self._env = dict(os.environ if env is None else env)
        self._on_exit = on_exit
        self._ecs = ecs
        self._region = region
        self._stop_timeout = stop_timeout
        self._output = output
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[LaunchRequest, LaunchResult]] = {}
        self._injected: list[str] = []
        self.tasks: dict[str, _Task] = {}

    # -- ECS semantics ---------------------------------------------------------------------------
    def resolve_task_definition(self) -> str:
        if self._ecs is None:
            return f"{self._cfg.task_family}:1"
        td = self._ecs.describe_task_definition(taskDefinition=self._cfg.task_family)
        return str(td["taskDefinition"]["taskDefinitionArn"]).rsplit("/", 1)[-1]

    def inject_failures(self, reasons: list[str]) -> None:
        """The next run() leaves len(reasons) tasks unstarted with these reasons (tests, demo)."""
        with self._lock:
            self._injected.extend(reasons)

    def run(self, request: LaunchRequest) -> LaunchResult:
        if not 1 <= request.count <= MAX_TASKS_PER_CALL:
            raise LaunchError(f"RunTask count must be 1..{MAX_TASKS_PER_CALL}, "
                              f"not {request.count}")
        with self._lock:
            seen = self._tokens.get(request.client_token)
            if seen is not None:
                if seen[0] != request:
                    raise LaunchError("clientToken reused with different parameters "
                                      "(ConflictException)")
                return seen[1]
            failures = self._injected[:request.count]
            del self._injected[:request.count]
            arns = [self._start(request) for _ in range(request.count - len(failures))]
            result = LaunchResult(arns, failures)
            self._tokens[request.client_token] = (request, result)
            return result

    def _start(self, request: LaunchRequest) -> str:
        arn = (f"arn:aws:ecs:{self._region}:000000000000:task/{self._cfg.cluster}/"
               f"{uuid.uuid4().hex}")
        env = {**self._env, **request.env, "LONGJOBS_TASK_ARN": arn,
               "LONGJOBS_TASK_DEFINITION": request.task_definition}
        proc = subprocess.Popen([sys.executable, "-m", "job_runner"], env=env,
                                stdout=self._output, stderr=self._output,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        task = _Task(arn, request, proc, time.time())
        self.tasks[arn] = task
        task.watcher = threading.Thread(target=self._watch, args=(task,), daemon=True,
                                        name=f"task-{arn[-8:]}")
        task.watcher.start()
        return arn

    def _watch(self, task: _Task) -> None:
        code = task.process.wait()
        if task.lost_as is not None:
            stop_code, reason = task.lost_as, "task lost with its host (simulated: SIGKILL)"
        elif task.stop_reason is not None:
            stop_code, reason = "UserInitiated", task.stop_reason
        else:
            stop_code, reason = "EssentialContainerExited", "Essential container in task exited"
        task.exit = TaskExit(task.arn, task.request.task_definition,
                             code if code >= 0 else 128 - code, task.started_at, time.time(),
                             stop_code, reason, task.request.started_by)
        if self._on_exit is not None:
            self._on_exit(task.exit)

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        out = []
        for arn in task_arns:
            task = self.tasks.get(arn)
            if task is None:
                out.append(TaskStatus(arn, LastStatus.MISSING))
            elif task.exit is None:
                out.append(TaskStatus(arn, LastStatus.RUNNING))
            else:
                out.append(TaskStatus(arn, LastStatus.STOPPED, task.exit.stop_code,
                                      task.exit.stopped_reason, task.exit.exit_code))
        return out

    def stop(self, task_arn: str, reason: str) -> None:
        """Like StopTask: SIGTERM now, SIGKILL after the stop timeout."""
        task = self.tasks.get(task_arn)
        if task is None or task.process.poll() is not None:
            return
        task.stop_reason = reason
        _signal(task.process, signal.SIGTERM)
        timer = threading.Timer(self._stop_timeout, _signal, (task.process, signal.SIGKILL))
        timer.daemon = True  # never keeps the dispatcher's process alive by itself
        timer.start()

    def kill(self, task_arn: str, stop_code: str = "SpotInterruption") -> None:
        """SIGKILL, as the loss of the task's host would (tests and the demo use it)."""
        task = self.tasks.get(task_arn)
        if task is not None:
            task.lost_as = stop_code
            _signal(task.process, signal.SIGKILL)

    def running(self) -> list[str]:
        return [a for a, t in self.tasks.items() if t.process.poll() is None]

    def shutdown(self, grace: float = 10.0) -> None:
        """Stop every task: SIGTERM, then SIGKILL whatever outlives the grace period."""
        live = [t for t in self.tasks.values() if t.process.poll() is None]
        for t in live:
            t.stop_reason = t.stop_reason or "local environment shutting down"
            _signal(t.process, signal.SIGTERM)
        deadline = time.time() + grace
        for t in live:
            try:
                t.process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                _signal(t.process, signal.SIGKILL)
                t.process.wait()
        for t in self.tasks.values():  # every exit report delivered before we return
            if t.watcher is not None:
                t.watcher.join(timeout=grace)


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
