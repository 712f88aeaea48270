"""Grouped, fenced writes of one bundle's job starts and results.

By default the starts and results of a bundle's small jobs are flushed together every few
seconds, so a bundle of 50 small jobs costs a couple of transactions, not 100 calls. In
write-through mode every start and every result is written at once, so a crash charges the job
that was running and loses no finished result. The worker uses it for a bundle of one job (a
long job records its start at once) and for every rerun of a bundle, since a rerun follows a
stop (a crash, a kill, Spot) and the next one must be attributable: a bundled job that kills
its task is charged from its second launch on, and fails within ``max_attempts`` + 1 launches.

Jobs running at once in one task (LONGJOBS_TASK_CONCURRENCY) share one ``Writes``: their starts
and results join the same groups. Two locks: recording (the pending updates) and flushing (one
flush at a time, in order). A flush takes the pending updates and writes them outside the
recording lock, so the other jobs record their starts and results meanwhile instead of waiting
on the table; a grouped flush that falls due while another is under way is left to a later one,
so with 20 jobs ending at once no slot waits for another job's write. An explicit flush (a
checkpoint, the bundle's end) and write-through wait for the flush under way, so a job's start
is always written before its result.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.store import Fence, JobUpdate, RunnerStore
from job_runner.outcome import Outcome

log = logging.getLogger(__name__)

# A bundle's failed-and-retryable jobs wait this long (doubling per attempt) before a rerun.
RETRY_BASE_SECONDS = 2.0
RETRY_MAX_SECONDS = 300.0
# A flush is one transaction of at most 98 job updates (plus the fence).
FLUSH_AT_JOBS = 98


class Writes:
    def __init__(self, store: RunnerStore, fence: Fence, task_definition: str,
                 flush_seconds: float, *, write_through: bool = False) -> None:
        self.store = store
        self.fence = fence
        self.task_definition = task_definition
        self.flush_seconds = flush_seconds
        self.write_through = write_through
        self.pending: dict[str, JobUpdate] = {}
        self.refused: set[str] = set()  # jobs whose update the table refused (moved on)
        self.retrying = False
        self.retry_at = 0.0
        self._last = time.monotonic()
        # Each running job's slot thread records into it, a handler flushes too (a checkpoint
        # writes what is pending first, from the handler's thread or the event loop's), and an
        # abandoned handler may still checkpoint while the worker records its outcome.
        self._lock = threading.Lock()  # the pending updates
        self._flushing = threading.Lock()  # one flush at a time, in order; taken first

    def start(self, job: Job) -> None:
        with self._lock:
            self._start(job)
            due = self.write_through
        if due:
            self.flush()

    def finish(self, job: Job, outcome: Outcome, *, started: bool) -> None:
        with self._lock:
            self._finish(job, outcome, started=started)
            due = len(self.pending) >= FLUSH_AT_JOBS \
                or time.monotonic() - self._last >= self.flush_seconds
        if self.write_through:
            self.flush()
        elif due and self._flushing.acquire(blocking=False):
            # Grouped: if a flush is under way, what is pending now goes with a later one
            # (the next due result, or the bundle's last flush) rather than wait for it.
            try:
                self._write(None)
            finally:
                self._flushing.release()

    def flush(self, bundle_to: BundleState | None = None) -> None:
        """Write what is pending (after any flush under way). A job the table refuses (it
        moved on meanwhile: failed as overdue, cancelled) is dropped alone; its bundle-mates'
        results are written. If the write fails, the error is the runner's: it stops."""
        with self._flushing:
            self._write(bundle_to)

    def _write(self, bundle_to: BundleState | None) -> None:
        """One flush (``_flushing`` held): take what is pending, write it outside the lock."""
        with self._lock:
            if not self.pending and bundle_to is None:
                return
            updates = list(self.pending.values())
            self.pending.clear()
            retry_at = self.retry_at if bundle_to == BundleState.PENDING and self.retry_at \
                else None
        refused = self.store.apply(self.fence, updates, bundle_to, retry_at)
        with self._lock:
            if refused:
                log.warning("the table refused some job updates (the jobs moved on meanwhile)",
                            extra={"job_ids": sorted(refused)})
                self.refused |= refused
            self._last = time.monotonic()

    def _start(self, job: Job) -> None:
        job.history.append({"attempt": job.attempts + 1, "task_arn": self.fence.task_arn,
                            "task_definition": self.task_definition,
                            "started_at": time.time()})
        job.attempts += 1
        job.state = JobState.RUNNING
        self.pending[job.job_id] = JobUpdate(job.job_id, JobState.PENDING, JobState.RUNNING,
                                             attempts_delta=1, history=list(job.history))

    def _finish(self, job: Job, outcome: Outcome, *, started: bool) -> None:
        if started and job.history:
            job.history[-1].update({"ended_at": time.time(), "outcome": str(outcome.target),
                                    "reason": outcome.reason})
        refund = -1 if outcome.interrupted and started else 0
        extra: dict[str, Any] = {"history": list(job.history) if started else None,
                                 "result": outcome.result, "error": outcome.error,
                                 "reason": outcome.reason,
                                 "infra_delta": 1 if outcome.interrupted else 0}
        begun = self.pending.pop(job.job_id, None)
        if begun is not None:  # start not written yet: one update covers both
            update = JobUpdate(job.job_id, JobState.PENDING, outcome.target, via=JobState.RUNNING,
                               attempts_delta=1 + refund, **extra)
        else:
            source = JobState.RUNNING if started else JobState.PENDING
            update = JobUpdate(job.job_id, source, outcome.target, attempts_delta=refund, **extra)
        self.pending[job.job_id] = update
        if outcome.target == JobState.PENDING and not outcome.interrupted:
            self.retrying = True
            delay = min(RETRY_BASE_SECONDS * 2 ** max(job.attempts - 1, 0), RETRY_MAX_SECONDS)
            self.retry_at = max(self.retry_at, time.time() + delay)
