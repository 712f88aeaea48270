"""What a handler gets besides its payload: identity, a logger, cancellation, checkpoints and
progress.

Each running job has its own context, so jobs running at once in one task are cancelled (or
time out) one by one. ``checkpoint`` writes to the table from the caller's thread: an
``async def`` handler that checkpoints often may call it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from dispatcher.domain import progress, sizes
from dispatcher.domain.errors import Interrupted
from dispatcher.domain.progress import Progress


class JobContext:
    def __init__(self, job_id: str, attempt: int, last_checkpoint: dict[str, Any] | None,
                 save: Callable[[dict[str, Any]], None], logger: Any, *,
                 array_index: int | None = None, last_progress: Progress | None = None,
                 clock: Callable[[], float] = time.time,
                 take: Callable[[str, int, float | None, threading.Event], bool] | None = None
                 ) -> None:
        """``logger`` is the runner's powertools Logger: JSON lines carrying job_id and
        job_attempt, as every ``logging`` record and ``print()`` line of the handler does
        (:mod:`job_runner.joblog`)."""
        self.job_id = job_id
        self.attempt = attempt
        # A child of an array job: its index (0 to size-1), the part of the payload's work it
        # does. None for a job that is no array's child.
        self.array_index = array_index
        self.last_checkpoint = last_checkpoint
        self.logger = logger
        self._save = save
        self._take = take
        self._cancel = threading.Event()
        self.cancel_reason: str | None = None
        # The latest progress report (the one its checkpoint carried, on a rerun): the
        # heartbeat carries it; this attempt's rate counts from when it started and from
        # what it resumed from.
        self._clock = clock
        self.started_at = clock()
        self._resumed = last_progress
        self._reported: Progress | None = None  # this attempt's latest report
        self._base = last_progress.done if last_progress is not None else 0.0

    def cancelled(self) -> bool:
        """True once the task is stopping, the job was cancelled or timed out: wrap up."""
        return self._cancel.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking as soon as the job is cancelled; True if it
        is. (It blocks its thread: an ``async def`` handler awaits instead and gets
        ``asyncio.CancelledError`` when cancelled.)"""
        return self._cancel.wait(timeout)

    def acquire(self, key: str, n: int = 1, *, timeout: float | None = 300.0) -> bool:
        """Take ``n`` tokens of rate limit ``key`` (``longjobs limits``) for a call about to
        be made, shared with every task's jobs: blocks until they are granted, at most
        ``timeout`` seconds (None: as long as it takes), then raises ``TokensNotGranted``; a
        cancel ends the wait at once (``Interrupted``). False, at once, when ``key`` has no
        limit set (nothing is taken). ``{tenant}`` in the key is this job's tenant."""
        if self._take is None:  # run outside a runner (a test's own context): no limits
            return False
        return self._take(key, n, timeout, self._cancel)

    def raise_if_cancelled(self) -> None:
        if self._cancel.is_set():
            raise Interrupted(self.cancel_reason or "interrupted", job_id=self.job_id)

    def checkpoint(self, state: dict[str, Any]) -> None:
        """Persist progress; a rerun of this job starts with it as ``last_checkpoint``.

        At most ``dispatcher.domain.sizes.MAX_CHECKPOINT_BYTES`` (32 KiB) as compact JSON:
        beyond it ``TooLarge`` is raised and nothing is written (the last checkpoint stands).
        Uncaught, it fails the job with that reason; a handler may catch it and go on."""
        sizes.check_checkpoint(state, self.job_id)
        self._save(state)
        self.last_checkpoint = state

    def progress(self, done: float, total: float | None = None,
                 message: str | None = None) -> None:
        """Say how far the job got: ``done`` of ``total`` (any unit: rows, files, bytes;
        ``total`` unknown: None), and a short message (its first 200 characters kept).
        Costs no call: the next heartbeat carries it (every LONGJOBS_HEARTBEAT_SECONDS), and
        the next checkpoint keeps it for a rerun. `longjobs jobs list`, `jobs show` and
        `top` show it, with an ETA from this attempt's rate. A number that is not finite or
        is negative raises InvalidProgress."""
        self._reported = progress.report(done, total, message, at=self._clock(),
                                         since=self.started_at, base=self._base,
                                         job_id=self.job_id)

    @property
    def last_progress(self) -> Progress | None:
        """The latest report: this attempt's, else the one the checkpoint it resumed from
        kept (None if neither)."""
        return self._reported or self._resumed

    @property
    def reported(self) -> Progress | None:
        """This attempt's latest report (what the heartbeat carries: a report an earlier
        attempt made is not this run's)."""
        return self._reported

    def cancel(self, reason: str) -> None:
        if not self._cancel.is_set():
            self.cancel_reason = reason
            self._cancel.set()
