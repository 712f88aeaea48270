"""Running one handler: in a thread or on the event loop, with its timeout, cancellation and a
bounded grace.

A handler is hostile until proven otherwise: it may raise anything, return junk, hang, block the
event loop, or ignore its cancellation. Whatever it does, :meth:`Executor.execute` returns an
:class:`Outcome` within the job's timeout plus a grace period; a handler still running after
that is reported as ``abandoned`` so the worker records it and ends the process (a thread cannot
be killed).

A plain handler runs in a thread of its own. An ``async def`` handler runs as an asyncio task on
the task's one event loop (:mod:`job_runner.loop`), started on first use; its cancellation (a
timeout, a cancel request, SIGTERM, a lost claim) sets ``ctx.cancelled()`` and cancels that
task. Either way the caller's thread watches the job, so several jobs run at once by calling
:meth:`Executor.execute` from several threads: each job's timeout and cancellation are its own.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dispatcher.domain.errors import Interrupted
from dispatcher.domain.jobs import Job
from job_runner.context import JobContext
from job_runner.loop import EventLoop, is_async
from job_runner.outcome import Outcome, raised, succeeded

# How long a cancelled handler gets to return before it is abandoned: after a timeout or a
# cancel request, and after SIGTERM (Fargate sends SIGKILL 120 s after SIGTERM at most).
TIMEOUT_GRACE_SECONDS = 5.0
STOP_GRACE_SECONDS = 90.0
POLL_SECONDS = 0.1  # the worker's waits for a free slot (woken early when a job ends)
# How often a running job's watcher looks at its signals (a cancel request, SIGTERM, a lost
# claim). Its end is seen at once (an event) and its timeout and grace at their time: this
# bounds only how late a cancellation reaches the handler. One look a second, not ten: 20 jobs
# in each of 60 local tasks polling ten times a second kept two cores busy (the nightly bench).
WATCH_SECONDS = 1.0


@dataclass(frozen=True)
class Signals:
    """What the worker knows that can end a running job early (read on every poll)."""

    cancel_requested: Callable[[str], bool]  # an operator asked to cancel this job id
    stopping: Callable[[], bool]  # SIGTERM: the task is going away
    claim_lost: Callable[[], bool]  # a newer attempt owns the bundle


@dataclass
class Execution:
    outcome: Outcome
    abandoned: bool = False  # the handler outlived its grace and is still running


class _Run(Protocol):
    done: threading.Event
    value: Any
    error: BaseException | None

    def cancel(self) -> None: ...


class _ThreadRun:
    """A plain handler in a thread of its own (``cancel`` cannot stop it: ctx says so)."""

    def __init__(self, job: Job, handler: Callable[..., Any], ctx: JobContext,
                 context: contextvars.Context) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

        def target() -> None:
            try:
                value = handler(dict(job.payload), ctx)
                self.value = (value, ctx.cancelled())
            except BaseException as exc:  # the job's failure, recorded, never the runner's
                self.error = exc
            finally:
                self.done.set()

        threading.Thread(target=context.run, args=(target,), daemon=True,
                         name=f"job-{job.job_id}").start()

    def cancel(self) -> None:
        pass


class Executor:
    def __init__(self, signals: Signals, *, retry_any_exception: bool) -> None:
        self._signals = signals
        self._retry_any = retry_any_exception
        self.loop = EventLoop()  # started by the first async handler only

    def close(self) -> None:
        self.loop.close()

    def execute(self, job: Job, handler: Callable[..., Any], ctx: JobContext,
                attempt: int) -> Execution:
        # The handler runs with this thread's context: the job's log keys follow it.
        context = contextvars.copy_context()
        run: _Run
        # Either way the run's value is (the handler's value, whether it was already told to
        # stop when it returned): a return after ctx.cancelled() is not a success.
        if is_async(handler):
            async def noted() -> tuple[Any, bool]:
                value = await handler(dict(job.payload), ctx)
                return value, ctx.cancelled()

            run = self.loop.submit(noted, context)
        else:
            run = _ThreadRun(job, handler, ctx, context)
        deadline = time.monotonic() + job.timeout_seconds if job.timeout_seconds else None
        grace_until: float | None = None
        while not run.done.wait(_watch(deadline if grace_until is None else None,
                                       grace_until)):
            if self._signals.cancel_requested(job.job_id):
                ctx.cancel("cancelled")
            if self._signals.claim_lost():
                ctx.cancel("claim lost")
            if deadline and time.monotonic() > deadline:
                ctx.cancel("timeout")
            if ctx.cancelled() and grace_until is None:
                run.cancel()  # an async handler's task; a thread only sees ctx.cancelled()
                grace = STOP_GRACE_SECONDS if self._signals.stopping() else \
                    TIMEOUT_GRACE_SECONDS
                grace_until = time.monotonic() + grace
            if grace_until and time.monotonic() > grace_until and not run.done.is_set():
                outcome = raised(job, TimeoutError(ctx.cancel_reason or "did not stop"),
                                 attempts=attempt, retry_any=False,
                                 cancel_reason=ctx.cancel_reason or "interrupted")
                return Execution(outcome, abandoned=True)
        if run.error is not None:
            return Execution(raised(job, run.error, attempts=attempt,
                                    retry_any=self._retry_any,
                                    cancel_reason=ctx.cancel_reason if ctx.cancelled()
                                    else None))
        value, late = run.value
        if late:
            # It returned after it was told to stop: whether it finished its work or wrapped up
            # part-way cannot be told, so the stop's cause decides (interrupted: rerun from its
            # checkpoint; cancelled; timed out) and the value is not kept as a result.
            reason = ctx.cancel_reason or "interrupted"
            return Execution(raised(job, Interrupted(
                f"the handler returned after it was stopped ({reason}); its return value is "
                "not kept", job_id=job.job_id), attempts=attempt, retry_any=False,
                cancel_reason=reason))
        return Execution(succeeded(job, value))


def _watch(deadline: float | None, grace_until: float | None) -> float:
    """Seconds until the watcher must look again: the next signal check, or sooner if the
    job's timeout or its grace ends first."""
    now, wait = time.monotonic(), WATCH_SECONDS
    for at in (deadline, grace_until):
        if at is not None:
            wait = min(wait, max(0.01, at - now + 0.01))
    return wait
