"""Running one handler: in a thread, with its timeout, cancellation and a bounded grace.

A handler is hostile until proven otherwise: it may raise anything, return junk, hang, or ignore
its cancellation. Whatever it does, :meth:`Executor.execute` returns an :class:`Outcome` within
the job's timeout plus a grace period; a handler still running after that is reported as
``abandoned`` so the worker records it and ends the process (a thread cannot be killed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dispatcher.domain.jobs import Job
from job_runner.context import JobContext
from job_runner.outcome import Outcome, raised, succeeded

# How long a cancelled handler gets to return before it is abandoned: after a timeout or a
# cancel request, and after SIGTERM (Fargate sends SIGKILL 120 s after SIGTERM at most).
TIMEOUT_GRACE_SECONDS = 5.0
STOP_GRACE_SECONDS = 90.0
POLL_SECONDS = 0.1


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


class Executor:
    def __init__(self, signals: Signals, *, retry_any_exception: bool) -> None:
        self._signals = signals
        self._retry_any = retry_any_exception

    def execute(self, job: Job, handler: Callable[..., Any], ctx: JobContext,
                attempt: int) -> Execution:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = handler(dict(job.payload), ctx)
            except BaseException as exc:  # the job's failure, recorded, never the runner's
                box["error"] = exc

        thread = threading.Thread(target=target, daemon=True, name=f"job-{job.job_id}")
        thread.start()
        deadline = time.monotonic() + job.timeout_seconds if job.timeout_seconds else None
        grace_until: float | None = None
        while thread.is_alive():
            thread.join(POLL_SECONDS)
            if self._signals.cancel_requested(job.job_id):
                ctx.cancel("cancelled")
            if self._signals.claim_lost():
                ctx.cancel("claim lost")
            if deadline and time.monotonic() > deadline:
                ctx.cancel("timeout")
            if ctx.cancelled() and grace_until is None:
                grace = STOP_GRACE_SECONDS if self._signals.stopping() else \
                    TIMEOUT_GRACE_SECONDS
                grace_until = time.monotonic() + grace
            if grace_until and time.monotonic() > grace_until and thread.is_alive():
                outcome = raised(job, TimeoutError(ctx.cancel_reason or "did not stop"),
                                 attempts=attempt, retry_any=False,
                                 cancel_reason=ctx.cancel_reason or "interrupted")
                return Execution(outcome, abandoned=True)
        if "error" in box:
            return Execution(raised(job, box["error"], attempts=attempt,
                                    retry_any=self._retry_any,
                                    cancel_reason=ctx.cancel_reason if ctx.cancelled()
                                    else None))
        return Execution(succeeded(job, box.get("value")))
