"""The local adapter: each task is a runner process on this machine (forked from a warm starter
that imported the runner, :mod:`dispatcher.local.warm`, or ``python -m job_runner`` with
``LONGJOBS_LOCAL_WARM_START=false``).

It keeps the ECS contract the dispatcher relies on (10 per call, clientToken idempotency,
``failures[]`` for tasks not started) so the same pipeline runs unchanged, models what Fargate
adds (start latency, capacity errors, the two launch rate limits: see :class:`LocalLauncher`),
and reports each task's stop so local mode can turn it into an "ECS Task State Change" event.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dispatcher.domain.costs import TaskBill
from dispatcher.domain.errors import LaunchError
from dispatcher.domain.pacing import CAPACITY_UNAVAILABLE, LaunchLimits, split_tasks
from dispatcher.domain.stops import LastStatus, StopCode
from dispatcher.local.warm import WarmProcess, WarmStarter
from dispatcher.ports.launcher import (
    MAX_TASKS_PER_CALL,
    Launcher,
    LaunchRequest,
    LaunchResult,
    TaskStatus,
    first_call_tasks,
)
from dispatcher.settings import Config

# CPU priority of task processes (see _spawn): the lowest, since the kernel weighs threads, and
# 60 runners of 20 threads at a middling niceness would still outweigh the dispatcher.
TASK_NICENESS = 19
# Fargate gives a container up to 120 s between SIGTERM and SIGKILL (stopTimeout).
STOP_TIMEOUT_SECONDS = 120.0
MAX_REASON = 255  # StopTask's reason limit


# The local task definition's size (dispatcher.local.provision registers it): a task's bill
# when its request does not override it.
LOCAL_CPU = 256
LOCAL_MEMORY = 512

@dataclass(frozen=True)
class TaskExit:
    task_arn: str
    task_definition: str
    exit_code: int | None  # None: the container never ran (stopped before it started)
    started_at: float | None  # None: never started
    stopped_at: float
    stop_code: str  # EssentialContainerExited, UserInitiated, ...
    stopped_reason: str
    started_by: str
    # Its bill, as ECS's stop event would tell it: the request's size (the local task
    # definition's otherwise), where the strategy put it, from its process's start to its exit.
    bill: TaskBill | None = None


@dataclass
class _Task:
    arn: str
    request: LaunchRequest
    created_at: float  # time.monotonic() of the RunTask
    start_delay: float  # modelled Fargate start latency (provisioning, image pull)
    process: subprocess.Popen[bytes] | WarmProcess | None = None  # None until it starts
    started_at: float | None = None
    stop_reason: str | None = None
    lost_as: str | None = None  # stop code of a simulated infrastructure loss
    lost_reason: str = "task lost with its host (simulated: SIGKILL)"
    exit: TaskExit | None = None
    provider: str = "FARGATE"  # where the capacity strategy put it
    watcher: threading.Thread | None = None
    timer: threading.Timer | None = None

    @property
    def gone(self) -> bool:
        if self.exit is not None:
            return True
        return self.process is not None and self.process.poll() is not None


class LocalLauncher(Launcher):
    """Fargate, modelled with local processes (every part configurable in ``cfg``):

    - start latency: a task is PROVISIONING, then PENDING, for a delay drawn from
      ``cfg.local_start_seconds`` (min, max) before its process starts; a task stopped or lost
      before then never starts and ends STOPPED (``UserInitiated`` with the given reason, or
      the loss's stop code) with no exit code;
    - capacity: each task of a request that is not ``on_demand`` is, with probability
      ``cfg.local_capacity_errors``, reported in ``failures`` with Fargate's reason
      (``CAPACITY_UNAVAILABLE``) instead of started (``seed`` makes the draws reproducible);
    - rate limits (``enforce_limits``, on by default): RunTask calls over
      ``cfg.runtask_per_second`` (a bucket of that size, as AWS's "burst and sustained"), or
      tasks over a capacity provider's bucket (``cfg.task_launch_burst`` refilled at
      ``cfg.task_launch_per_second``, FARGATE and FARGATE_SPOT apart; the tasks a call asks
      for are spread over ``cfg.capacity_strategy`` as ECS spreads them) are refused with
      ``RateExceeded``, ECS's ThrottlingException, and start nothing.
      https://docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html
    """

    def __init__(self, cfg: Config, *, env: dict[str, str] | None = None,
                 on_exit: Callable[[TaskExit], None] | None = None, ecs: Any = None,
                 region: str = "us-east-1", stop_timeout: float = STOP_TIMEOUT_SECONDS,
                 output: int | None = None, seed: int | None = None,
                 enforce_limits: bool = True,
                 clock: Callable[[], float] = time.monotonic,
                 command: list[str] | None = None) -> None:
        self._cfg = cfg
        self._env = dict(os.environ if env is None else env)
        self._on_exit = on_exit
        self._ecs = ecs
        self._region = region
        self._stop_timeout = stop_timeout
        self._output = output
        self._command = command or [sys.executable, "-m", "job_runner"]
        # Warm starts fork the default command's runner; a test's own command runs as given.
        # (Public for the nightly bench, which reads the starter's children's CPU time.)
        self.warm = WarmStarter(self._env, output, _lower_priority) \
            if cfg.local_warm_start and command is None else None
        self._rng = random.Random(seed)
        self._clock = clock
        self._limits = LaunchLimits(
            runtask_per_second=cfg.runtask_per_second, task_launch_burst=cfg.task_launch_burst,
            task_launch_per_second=cfg.task_launch_per_second, clock=clock) \
            if enforce_limits else None
        self._strategy = tuple((p.provider, p.weight, p.base) for p in cfg.capacity_strategy)
        self._lock = threading.RLock()
        self._tokens: dict[str, tuple[LaunchRequest, LaunchResult]] = {}
        self._injected: list[str] = []
        self.tasks: dict[str, _Task] = {}
        # Every run() call that got past throttling (repeats and refusals too), e.g. to read
        # the task sizes (``resources``) that were asked for; a process's size is not modelled.
        self.requests: list[LaunchRequest] = []

    @property
    def limits(self) -> LaunchLimits | None:
        return self._limits

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
        with self._lock:
            # Throttling is decided first, before the request is even looked at.
            now = self._limits.call() if self._limits is not None else self._clock()
            self.requests.append(request)
            if not 1 <= request.count <= MAX_TASKS_PER_CALL:
                raise LaunchError(f"RunTask count must be 1..{MAX_TASKS_PER_CALL}, "
                                  f"not {request.count}")
            seen = self._tokens.get(request.client_token)
            if seen is not None:
                return seen[1] if seen[0] == request else first_call_tasks(seen[1],
                                                                            request.count)
            if self._limits is not None:
                self._limits.tasks(split_tasks(request.count,
                                               () if request.on_demand else self._strategy),
                                   now)
            failures = self._injected[:request.count]
            del self._injected[:request.count]
            share = 0.0 if request.on_demand else self._cfg.local_capacity_errors
            starts = 0
            for _ in range(request.count - len(failures)):
                if share and self._rng.random() < share:
                    failures.append(CAPACITY_UNAVAILABLE)
                else:
                    starts += 1
            providers = [p for p, n in split_tasks(
                starts, () if request.on_demand else self._strategy).items() for _ in range(n)]
            arns = [self._create(request, p) for p in providers]
            result = LaunchResult(arns, failures)
            self._tokens[request.client_token] = (request, result)
            return result

    def _create(self, request: LaunchRequest, provider: str) -> str:
        arn = (f"arn:aws:ecs:{self._region}:000000000000:task/{self._cfg.cluster}/"
               f"{uuid.uuid4().hex}")
        low, high = self._cfg.local_start_seconds
        delay = self._rng.uniform(low, high) if high > 0 else 0.0
        task = _Task(arn, request, time.monotonic(), delay, provider=provider)
        self.tasks[arn] = task
        if delay > 0:
            task.timer = threading.Timer(delay, self._start, (task,))
            task.timer.daemon = True  # never keeps the dispatcher's process alive by itself
            task.timer.start()
        else:
            self._start(task)
        return arn

    def _spawn(self, task: _Task, command: list[str]) -> subprocess.Popen[bytes] | WarmProcess:
        env = {**self._env, **task.request.env, "LONGJOBS_TASK_ARN": task.arn,
               "LONGJOBS_TASK_DEFINITION": task.request.task_definition}
        if self.warm is not None:
            return self.warm.spawn(env)
        return subprocess.Popen(command, env=env, stdout=self._output, stderr=self._output,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_lower_priority)

    def _start(self, task: _Task) -> None:
        with self._lock:
            if task.exit is not None:  # stopped or lost while it was provisioning
                return
            task.process = self._spawn(task, self._command)
            task.started_at = time.time()
            task.watcher = threading.Thread(target=self._watch, args=(task,), daemon=True,
                                            name=f"task-{task.arn[-8:]}")
            task.watcher.start()

    def _watch(self, task: _Task) -> None:
        assert task.process is not None
        code = task.process.wait()
        if task.lost_as is not None:
            stop_code, reason = task.lost_as, task.lost_reason
        elif task.stop_reason is not None:
            stop_code, reason = StopCode.USER_INITIATED.value, task.stop_reason
        else:
            stop_code, reason = "EssentialContainerExited", "Essential container in task exited"
        stopped = time.time()
        task.exit = TaskExit(task.arn, task.request.task_definition,
                             code if code >= 0 else 128 - code, task.started_at, stopped,
                             stop_code, reason, task.request.started_by,
                             _bill(task, task.started_at or stopped, stopped))
        if self._on_exit is not None:
            self._on_exit(task.exit)

    def _never_started(self, task: _Task, stop_code: str, reason: str) -> TaskExit | None:
        """Stop a task still provisioning (under the lock): it never starts. Returns its exit
        to report, or None if it has already started or stopped."""
        if task.process is not None or task.exit is not None:
            return None
        if task.timer is not None:
            task.timer.cancel()
        stopped = time.time()
        # Never started, never pulled: Fargate bills it nothing (no bill).
        task.exit = TaskExit(task.arn, task.request.task_definition, None, None, stopped,
                             stop_code, reason, task.request.started_by)
        return task.exit

    def _report(self, exit: TaskExit | None) -> None:
        if exit is not None and self._on_exit is not None:
            self._on_exit(exit)

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        out = []
        for arn in task_arns:
            task = self.tasks.get(arn)
            if task is None:
                out.append(TaskStatus(arn, LastStatus.MISSING))
            elif task.exit is not None:
                out.append(TaskStatus(arn, LastStatus.STOPPED, task.exit.stop_code,
                                      task.exit.stopped_reason, task.exit.exit_code,
                                      task.exit.bill))
            elif task.process is None:  # provisioning, then pending (image pull)
                waited = time.monotonic() - task.created_at
                out.append(TaskStatus(arn, LastStatus.PROVISIONING
                                      if waited < task.start_delay / 2 else LastStatus.PENDING))
            else:
                out.append(TaskStatus(arn, LastStatus.RUNNING))
        return out

    def stop(self, task_arn: str, reason: str) -> None:
        """Like StopTask: SIGTERM now, SIGKILL after the stop timeout; a task not started yet
        never starts and stops at once (UserInitiated, no exit code)."""
        task = self.tasks.get(task_arn)
        if task is None:
            return
        with self._lock:
            exit = self._never_started(task, StopCode.USER_INITIATED.value, reason[:MAX_REASON])
        if exit is not None:
            self._report(exit)
            return
        if task.process is None or task.process.poll() is not None:
            return
        task.stop_reason = reason[:MAX_REASON]
        _signal(task.process, signal.SIGTERM)
        timer = threading.Timer(self._stop_timeout, _signal, (task.process, signal.SIGKILL))
        timer.daemon = True  # never keeps the dispatcher's process alive by itself
        timer.start()

    def kill(self, task_arn: str, stop_code: str = "SpotInterruption") -> None:
        """SIGKILL, as the loss of the task's host would (tests and the demo use it)."""
        task = self.tasks.get(task_arn)
        if task is None:
            return
        with self._lock:
            exit = self._never_started(task, stop_code, "task lost with its host (simulated)")
        if exit is not None:
            self._report(exit)
            return
        if task.process is not None:
            task.lost_as = stop_code
            _signal(task.process, signal.SIGKILL)

    def reclaim(self, task_arn: str, warning: float = 120.0) -> None:
        """A Fargate Spot interruption: SIGTERM now (the runner gives its jobs back and exits),
        SIGKILL ``warning`` seconds later if it still runs; ECS reports SpotInterruption. "a
        two-minute warning is sent before a task is stopped ... as a SIGTERM signal to the
        running task" (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/
        fargate-capacity-providers.html). Tests and the nightly bench's faults use it."""
        task = self.tasks.get(task_arn)
        if task is None:
            return
        reason = "Spot interruption (simulated: SIGTERM, then SIGKILL)"
        with self._lock:
            exit = self._never_started(task, StopCode.SPOT_INTERRUPTION.value, reason)
        if exit is not None:
            self._report(exit)
            return
        if task.process is None or task.process.poll() is not None:
            return
        task.lost_as, task.lost_reason = StopCode.SPOT_INTERRUPTION.value, reason
        _signal(task.process, signal.SIGTERM)
        timer = threading.Timer(warning, _signal, (task.process, signal.SIGKILL))
        timer.daemon = True
        timer.start()

    def running(self) -> list[str]:
        """Tasks not yet gone: provisioning, pending or running."""
        return [a for a, t in list(self.tasks.items()) if not t.gone]

    def shutdown(self, grace: float = 10.0) -> None:
        """Stop every task: tasks not started never start; SIGTERM, then SIGKILL whatever
        outlives the grace period."""
        with self._lock:
            never = [e for t in list(self.tasks.values())
                     if (e := self._never_started(t, StopCode.USER_INITIATED.value,
                                                  "local environment shutting down"))]
        for exit in never:
            self._report(exit)
        live = [t for t in self.tasks.values()
                if t.process is not None and t.process.poll() is None]
        for t in live:
            t.stop_reason = t.stop_reason or "local environment shutting down"
            assert t.process is not None
            _signal(t.process, signal.SIGTERM)
        deadline = time.time() + grace
        for t in live:
            assert t.process is not None
            try:
                t.process.wait(timeout=max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                _signal(t.process, signal.SIGKILL)
                t.process.wait()
        for t in self.tasks.values():  # every exit report delivered before we return
            if t.watcher is not None:
                t.watcher.join(timeout=grace)
        if self.warm is not None:
            self.warm.close()


def _lower_priority() -> None:
    """Below the dispatcher and the local endpoints in CPU priority: on AWS each task has CPUs
    of its own, and 60 runners here would otherwise starve the admission they wait for."""
    os.nice(TASK_NICENESS)


def _signal(proc: subprocess.Popen[bytes] | WarmProcess, sig: int) -> None:
    if isinstance(proc, WarmProcess):
        with contextlib.suppress(LaunchError):  # the starter is gone, and its tasks with it
            proc.signal_group(sig)
        return
    if proc.poll() is None:  # not reaped yet (Popen reaps in poll): the pid is still ours
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


def _bill(task: _Task, started: float, stopped: float) -> TaskBill:
    size = task.request.resources
    return TaskBill(size.cpu or LOCAL_CPU, size.memory or LOCAL_MEMORY, started, stopped,
                    task.provider)
