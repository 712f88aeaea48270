"""Grouped, fenced writes of one bundle's job starts and results.

By default the starts and results of a bundle's small jobs are written together: a flusher
thread writes what is pending ``flush_seconds`` after the oldest unwritten result was recorded
(or at once when 98 updates are pending), so a bundle of 50 small jobs costs a couple of
transactions, not 100 calls, and no result waits longer than that to be written. Starts wait
for the next flush: a start and a result written together are one update. In write-through
mode every start and every result is written at once, so a crash charges the job that was
running and loses no finished result. The worker uses it for a bundle of one job (a long job
records its start at once) and for every rerun of a bundle, since a rerun follows a stop (a
crash, a kill, Spot) and the next one must be attributable: a bundled job that kills its task
is charged from its second launch on, and fails within ``max_attempts`` + 1 launches (+ 1 when
it ran beside other jobs: see dispatcher.domain.stop_policy).

Jobs running at once in one task (LONGJOBS_TASK_CONCURRENCY) share one ``Writes``: their starts
and results join the same groups. Two locks: recording (the pending updates) and flushing (one
flush at a time, in order). A flush takes the pending updates and writes them outside the
recording lock, so the jobs go on recording their starts and results meanwhile; grouped flushes
are the flusher's, so a job's slot never waits for a write. An explicit flush (a checkpoint,
the bundle's end) and write-through wait for the flush under way, so a job's start is always
written before its result. A write that fails is reported to ``on_error`` whichever thread made
it (the worker stops: the updates it held are not written, and the stop event reruns the jobs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from dispatcher.domain import costs, lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.costs import Usage
from dispatcher.domain.errors import HandedJobs
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.store import Fence, JobUpdate, RunnerStore
from dispatcher.store.values import JobOutcomes
from job_runner.outcome import Outcome

log = logging.getLogger(__name__)

# A bundle's failed-and-retryable jobs wait this long (doubling per attempt) before a rerun.
RETRY_BASE_SECONDS = 2.0
RETRY_MAX_SECONDS = 300.0
# A flush is one transaction of at most 98 job updates (plus the fence).
FLUSH_AT_JOBS = 98
# close() waits this long for the flusher to end (it ends at once unless a write is under way,
# and a write is bounded by its tries, about half a minute of waits at most: the store's
# RUNNER_PATIENCE, and each try by the AWS client's own timeouts).
CLOSE_WAIT_SECONDS = 60.0


class Writes:
    """Use as a context manager: entering starts the flusher (grouped mode), leaving stops it."""

    def __init__(self, store: RunnerStore, fence: Fence, task_definition: str,
                 flush_seconds: float, *, write_through: bool = False,
                 on_error: Callable[[Exception], None] | None = None,
                 slots: int = 0, jobs: int = 0, ran_before: Usage | None = None) -> None:
        self.store = store
        self.fence = fence
        self.task_definition = task_definition
        self.flush_seconds = flush_seconds
        self.write_through = write_through
        self.pending: dict[str, JobUpdate] = {}
        self.refused: set[str] = set()  # jobs whose update the table refused (moved on)
        self._ended: dict[str, JobState] = {}  # jobs finished SUCCEEDED or FAILED here
        self._abandoned = False  # a job's handler was left running (recorded live_task)
        # What the task ran before this bundle, and each run here: the job-seconds its bill is
        # split by (dispatcher.domain.costs), counted from the history entries written.
        self._ran_before = ran_before or Usage()
        self._runs: dict[str, Usage] = {}
        self.retrying = False
        self.retry_at = 0.0
        self._on_error = on_error
        # A bundle of a limited kind holds ``slots`` of that kind's limit while it is active.
        # Once fewer of its ``jobs`` are left than that, a write lowers its ``slots`` to those
        # left, so that its last long job does not keep the kind's other slots from the next
        # bundle. A job counts as left until its outcome is final and no handler of it still
        # runs (an abandoned one holds its slot until the task ends).
        self._slots = slots
        self._left = jobs
        self._slots_written = slots
        # Each running job's slot thread records into it, a handler flushes too (a checkpoint
        # writes what is pending first, from the handler's thread or the event loop's), and an
        # abandoned handler may still checkpoint while the worker records its outcome.
        self._lock = threading.Lock()  # the pending updates
        self._flushing = threading.Lock()  # one flush at a time, in order; taken first
        self._due = threading.Condition(self._lock)  # wakes the flusher
        self._oldest: float | None = None  # when the oldest unwritten result was recorded
        self._closed = False
        self._flusher: threading.Thread | None = None

    @classmethod
    def for_bundle(cls, store: RunnerStore, fence: Fence, bundle: Bundle, flush_seconds: float,
                   on_error: Callable[[Exception], None] | None = None,
                   ran_before: Usage | None = None) -> Writes:
        """The writes of ``bundle`` as claimed: through at once for a bundle of one job or a
        later launch (dispatcher.domain.lifecycle.writes_through), its ``slots`` lowered as
        its jobs end when it is of a limited kind."""
        return cls(store, fence, bundle.task_definition or "", flush_seconds,
                   write_through=lifecycle.writes_through(bundle.attempt, len(bundle.job_ids)),
                   on_error=on_error, slots=bundle.slots if bundle.kind is not None else 0,
                   jobs=len(bundle.job_ids), ran_before=ran_before)

    def __enter__(self) -> Writes:
        if not self.write_through:
            self._flusher = threading.Thread(target=self._flush_when_due, daemon=True,
                                             name="flusher")
            self._flusher.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            self._closed = True
            self._due.notify_all()
        if self._flusher is not None:
            self._flusher.join(CLOSE_WAIT_SECONDS)

    def start(self, job: Job) -> None:
        with self._lock:
            self._start(job)
        if self.write_through:
            self.flush()

    def start_refused(self, job: Job) -> bool:
        """Whether the table refused ``job``'s start, written through at once (it moved on
        meanwhile: cancelled, failed as overdue): it is not run, and no longer counts as left
        to its bundle's slots. Always False for buffered starts (their cancels come with the
        heartbeat)."""
        with self._lock:
            if not self.write_through or job.job_id not in self.refused:
                return False
            self._left -= 1
            return True

    def finish(self, job: Job, outcome: Outcome, *, started: bool,
               live_task: str | None = None) -> None:
        """``live_task``: this task, whose run of the job is abandoned still running (recorded
        with the outcome: a retry waits for the task to stop)."""
        with self._lock:
            self._finish(job, outcome, started=started)
            if outcome.target in (JobState.SUCCEEDED, JobState.FAILED):
                self._ended[job.job_id] = outcome.target
            self.pending[job.job_id].live_task = live_task
            self._abandoned |= live_task is not None
            if outcome.target in TERMINAL_JOB_STATES and live_task is None:
                self._left -= 1
            if self._oldest is None or len(self.pending) >= FLUSH_AT_JOBS:
                self._oldest = self._oldest or time.monotonic()
                self._due.notify()  # the flusher learns its deadline, or flushes now
        if self.write_through:
            self.flush()

    def outcomes(self) -> JobOutcomes:
        """How this run ended its bundle's jobs, as written (those the table refused left
        out): what its task's stop reports of it if the task goes on to a follow-on."""
        with self._lock:
            ended = [state for job_id, state in self._ended.items()
                     if job_id not in self.refused]
            usage = self._usage()
        return JobOutcomes(ended.count(JobState.SUCCEEDED), ended.count(JobState.FAILED), usage)

    def _usage(self) -> Usage:
        """The task's usage through this bundle's runs as written (those the table refused
        left out). Under ``_lock``."""
        out = self._ran_before
        for job_id, run in self._runs.items():
            if job_id not in self.refused:
                out = out.plus(run)
        return out

    def flush(self, bundle_to: BundleState | None = None, *, handed: int | None = None) -> None:
        """Write what is pending (after any flush under way). A job the table refuses (it
        moved on meanwhile: failed as overdue, cancelled) is dropped alone; its bundle-mates'
        results are written. If the write fails, the error is the runner's: it stops.
        ``handed``: the jobs handed to the bundle that the runner has seen; if more were
        handed, what is pending is written without moving the bundle and HandedJobs raised
        (not an error: the runner runs them, then ends the bundle)."""
        with self._flushing:
            self._write(bundle_to, handed)

    def flush_for_take(self) -> bool:
        """Write what is pending just before a take of the batch's next follow-on, which ends
        the bundle; whether the take may go on: not if the table refused a job's update (the
        job may name this task as running it still, and the task's stop, which settles only
        its last bundle, must be this one's)."""
        self.flush()
        return not self.refused

    def _flush_when_due(self) -> None:
        """The flusher thread: a grouped flush whenever one falls due, until closed."""
        while True:
            with self._lock:
                while not self._closed and (wait := self._until_due()) != 0.0:
                    self._due.wait(wait)
                if self._closed:
                    return
            with self._flushing:
                try:
                    self._write(None)
                except Exception:  # reported to on_error by _write: the runner stops
                    return

    def _until_due(self) -> float | None:
        """Seconds until a grouped flush is due (0: now; None: no result is pending). Under
        ``_lock``."""
        if not self.pending or self._oldest is None:
            return None
        if len(self.pending) >= FLUSH_AT_JOBS:
            return 0.0
        return max(0.0, self._oldest + self.flush_seconds - time.monotonic())

    def _write(self, bundle_to: BundleState | None, handed: int | None = None) -> None:
        """One flush (``_flushing`` held): take what is pending, write it outside the lock."""
        with self._lock:
            if not self.pending and bundle_to is None:
                return
            updates = list(self.pending.values())
            self.pending.clear()
            self._oldest = None
            retry_at = self.retry_at if bundle_to == BundleState.PENDING and self.retry_at \
                else None
            lower = max(0, min(self._slots, self._left))
            slots = lower if bundle_to is None and lower < self._slots_written else None
            # Ending it DONE with every job's outcome as written, none left running here: the
            # task's stop reports these counts without reading the bundle or its jobs.
            states = list(self._ended.values())
            ended = JobOutcomes(states.count(JobState.SUCCEEDED), states.count(JobState.FAILED),
                                self._usage()) \
                if bundle_to == BundleState.DONE and not self.refused and not self._abandoned \
                else None
        try:
            refused = self.store.apply(self.fence, updates, bundle_to, retry_at, handed=handed,
                                       slots=slots, ended=ended)
        except HandedJobs as more:  # the updates are written; the bundle stays RUNNING
            with self._lock:
                self.refused |= more.refused
            raise
        except Exception as exc:
            if self._on_error is not None:
                self._on_error(exc)
            raise
        if slots is not None:
            self._slots_written = slots
        if refused:
            log.warning("the table refused some job updates (the jobs moved on meanwhile)",
                        extra={"job_ids": sorted(refused)})
            with self._lock:
                self.refused |= refused

    def _start(self, job: Job) -> None:
        job.history.append({"attempt": job.attempts + 1, "task_arn": self.fence.task_arn,
                            "task_definition": self.task_definition,
                            "started_at": time.time()})
        job.attempts += 1
        job.state = JobState.RUNNING
        self.pending[job.job_id] = JobUpdate(job.job_id, JobState.PENDING, JobState.RUNNING,
                                             attempts_delta=1, history=_snapshot(job.history))

    def _finish(self, job: Job, outcome: Outcome, *, started: bool) -> None:
        if started and job.history:
            job.history[-1].update({"ended_at": time.time(), "outcome": str(outcome.target),
                                    "reason": outcome.reason})
            run = self._runs.setdefault(job.job_id, Usage())
            run.add(costs.entry_seconds(job.history[-1]),
                    costs.groups_of(job.kind, job.labels, job.tenant),
                    ended=outcome.target in (JobState.SUCCEEDED, JobState.FAILED),
                    failed=outcome.target == JobState.FAILED)
        refund = -1 if outcome.interrupted and started else 0
        extra: dict[str, Any] = {"history": _snapshot(job.history) if started else None,
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


def _snapshot(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as it is now, entries included: the job's thread goes on writing into its
    last entry (its end) while the flusher's thread may be writing this copy."""
    return [dict(entry) for entry in history]
