"""One task's job runner, a step at a time, for the system model (tests/twins/test_system_model.py).

The real runner (:class:`job_runner.worker.Worker`) runs handlers in threads against the wall
clock; a model that shrinks needs every step to be its own, in order. So this runs the runner's
real parts: the bundle's claim, heartbeats and fenced writes (:class:`RunnerStore`), the grouped
or write-through writes (:class:`job_runner.writes.Writes`, without its flusher thread: a
``flush`` step stands for it), the order jobs start in (:class:`job_runner.schedule.Schedule`) and
the rules that turn what a handler did into an outcome (:mod:`job_runner.outcome`), and keeps
what the Worker decides between them (when it stops starting jobs, what it flushes at the end,
its exit code) as the Worker does. What a handler does is the model's choice, step by step.

A run is *live* while its handler runs: from its start until its outcome is recorded, or, for a
handler that ignored its cancellation (abandoned), until the task's process ends.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain import progress
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.costs import Usage
from dispatcher.domain.errors import ConflictError, HandedJobs, Interrupted, PermanentError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.stops import RUNNER_FAILED_EXIT, StopCode
from dispatcher.ports.table import Delete, Eq, Table, TableUnavailable
from dispatcher.store import Fence, Store
from dispatcher.testing.memory_launcher import MemoryLauncher
from job_runner.next_bundle import FOLLOW_ON_WAIT_SECONDS
from job_runner.outcome import Outcome, raised, succeeded
from job_runner.schedule import Schedule
from job_runner.tokens import Tokens, TokensNotGranted
from job_runner.writes import Writes

# What a handler does when the model lets one of its runs end.
BEHAVIOURS = ("succeed", "succeed_large", "fail", "raise", "interrupt_itself", "ignore_stop",
              "acquire")
# What a job's handler does on every run, whenever the model lets its handlers be themselves:
# one of the above, or "kill" (it kills its task: a poison job).
NATURES = (*BEHAVIOURS, "kill")
LARGE_RESULT = "r" * 60_000  # under job_runner.outcome.MAX_RESULT_BYTES (64 KB)


class ModelTime:
    """Stands in for the ``time`` module of :mod:`job_runner.writes` (history times, retry
    backoffs, flush deadlines), so the runner's writes carry the model's fake clock, as the
    real runner's carry the same wall clock as the dispatcher's."""

    def __init__(self) -> None:
        self.clock: Callable[[], float] = lambda: 0.0

    def time(self) -> float:
        return self.clock()

    def monotonic(self) -> float:
        return self.clock()

    def sleep(self, seconds: float) -> None:
        return None


class ModelIds:
    """Deterministic bundle ids (``new_id``), so a replayed example reads the table's index in
    the same order (it orders ties by key)."""

    def __init__(self) -> None:
        self._n = itertools.count()

    def reset(self) -> None:
        self._n = itertools.count()

    def __call__(self) -> str:
        return f"b{next(self._n):06d}"


def expire(table: Table, at: float) -> int:
    """Delete what DynamoDB's TTL would by ``at``: every item whose ``expires_at`` <= at.
    Uses the twin's own ``expire`` where it has one."""
    own = getattr(table, "expire", None)
    if callable(own):
        return int(own(at))
    snapshot = table.snapshot()  # type: ignore[attr-defined]
    gone = 0
    for pk, rec in snapshot.items():
        if rec.expires_at is not None and rec.expires_at <= at:
            table.write(Delete(pk, Eq("expires_at", rec.expires_at)))
            gone += 1
    return gone


@dataclass
class Run:
    job: Job
    attempt: int  # what the handler's ctx.attempt says
    started_at: float
    abandoned: bool = False
    error: BaseException | None = None  # a checkpoint raised into the handler


@dataclass
class SimTask:
    """One task's process. ``phase``: new (not claimed), running, ended (process gone)."""

    arn: str
    key: tuple[str, int]  # (bundle id, attempt): a name that replays alike
    store: Store
    launcher: MemoryLauncher
    clock: Callable[[], float]
    concurrency: int
    on_run: Callable[[str], None]  # a handler started: the model counts runs per job
    phase: str = "new"
    fence: Fence | None = None
    writes: Writes | None = None
    plan: Schedule | None = None
    runs: dict[str, Run] = field(default_factory=dict)
    cancel_requested: set[str] = field(default_factory=set)
    left: set[str] = field(default_factory=set)
    stopping: bool = False  # SIGTERM
    lost: bool = False
    abandoned: bool = False
    gave_back: bool = False  # a job was given back (interrupted): the bundle stays RUNNING
    failure: Exception | None = None
    exhausted: bool = False
    silent: bool = False  # frozen: no heartbeat, no progress
    stop_code: str = StopCode.ESSENTIAL_CONTAINER_EXITED
    live_at_stop: set[str] = field(default_factory=set)  # the handlers running at its end
    handed: list[str] = field(default_factory=list)  # urgent jobs handed to its bundle, seen
    bundle: Bundle | None = None  # as claimed: its batch's follow-on is taken when it ends
    follow_until: float = 0.0  # phase "following": looking for a follow-on until then
    stream_until: float = 0.0  # ... and for a stream's next tick's until then
    stream_wait: float = 0.0  # LONGJOBS_STREAM_WAIT_SECONDS (the stack's: 90)
    ran: Usage = field(default_factory=Usage)  # job-seconds of the bundles it took over from

    # -- what the model asks --------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return not self.launcher.tasks[self.arn].last_status.gone

    def live_runs(self) -> list[str]:
        return list(self.runs) if self.alive else []

    def active(self) -> list[str]:
        """Runs whose outcome is not recorded yet (the Worker's slots)."""
        return [j for j, r in self.runs.items() if not r.abandoned]

    def halted(self) -> bool:
        return self.stopping or self.lost or self.abandoned or self.failure is not None

    def can_start(self) -> bool:
        return self.phase == "running" and self.alive and not self.silent and not self.halted() \
            and not self.exhausted and len(self.active()) < self.concurrency

    def can_end(self) -> bool:
        return self.phase == "running" and self.alive and not self.silent \
            and not self.active() and (self.exhausted or self.halted())

    # -- steps (Worker.run, _start_jobs, _run_job, _heartbeat, _run_jobs) ------------------------
    def claim(self) -> None:
        claim = self.store.claim_assigned(self.arn)  # the usual start; else read, then claim
        if claim is None:
            bundle = self.store.bundle_for_task(self.arn)
            if bundle is None or bundle.task_arn != self.arn \
                    or bundle.state != BundleState.LAUNCHED:
                self.exit(0)  # nothing assigned, or another attempt's
                return
            try:
                claim = self.store.claim(Fence(bundle.bundle_id, bundle.attempt, self.arn))
            except ConflictError:
                self.exit(0)
                return
        bundle = self.bundle = claim.bundle
        self.fence = Fence(bundle.bundle_id, bundle.attempt, self.arn, pages=bundle.pages)
        self.cancel_requested |= claim.cancel_requested
        self.handed = list(bundle.handed_jobs)
        self.writes = Writes.for_bundle(self.store, self.fence, bundle, 2.0, on_error=self._fail,
                                        ran_before=self.ran)
        self.plan = Schedule(self.store.bundle_jobs(bundle), self.store.jobs_patiently)
        self.concurrency = min(self.concurrency, bundle.slots or self.concurrency)
        self.phase = "running"

    def start_next(self) -> None:
        assert self.plan is not None and self.writes is not None and self.fence is not None
        job = self.plan.next(lambda kind: False)
        if job is None:
            self.exhausted = True
            return
        bundle_id = self.fence.bundle_id
        if job.state != JobState.PENDING or job.bundle_id != bundle_id:
            if job.bundle_id == bundle_id and job.state not in TERMINAL_JOB_STATES:
                self.left.add(job.job_id)
            return
        try:
            if job.job_id in self.cancel_requested:
                job.state = JobState.CANCELLED
                self.writes.finish(job, Outcome(JobState.CANCELLED, reason="cancelled on "
                                                "request before it started"), started=False)
                return
            attempt = job.attempts + 1
            self.writes.start(job)
        except Exception as exc:  # a write failed: the runner's failure
            self._fail(exc)
            return
        self.runs[job.job_id] = Run(job, attempt, self.clock())
        self.on_run(job.job_id)

    def cancel_reason(self, run: Run) -> str | None:
        """Why the executor has told this run to stop, if it has (its checks, in its order:
        a cancel request, a lost claim, the timeout; SIGTERM cancels every run at once)."""
        reason = None
        if self.stopping:
            reason = "task stopping (SIGTERM)"
        if run.job.job_id in self.cancel_requested:
            reason = reason or "cancelled"
        if self.lost:
            reason = reason or "claim lost"
        timeout = run.job.timeout_seconds
        if timeout and self.clock() - run.started_at > timeout:
            reason = reason or "timeout"
        return reason

    def finish(self, job_id: str, behaviour: str) -> None:
        """The handler of ``job_id`` ends as ``behaviour`` says (or raises the error a
        checkpoint raised into it); the Worker records its outcome."""
        assert self.writes is not None
        run = self.runs[job_id]
        job, reason = run.job, self.cancel_reason(run)
        abandoned = False
        if reason is not None and behaviour == "ignore_stop":
            outcome = raised(job, TimeoutError(reason), attempts=run.attempt, retry_any=False,
                             cancel_reason=reason)
            abandoned = True  # the run stays live until the process ends
        elif reason is not None:
            outcome = raised(job, Interrupted(f"stopped: {reason}", job_id=job_id),
                             attempts=run.attempt, retry_any=False, cancel_reason=reason)
        elif run.error is not None:
            outcome = raised(job, run.error, attempts=run.attempt, retry_any=True,
                             cancel_reason=None)
        elif behaviour == "succeed":
            outcome = succeeded(job, {"job": job_id, "attempt": run.attempt})
        elif behaviour == "succeed_large":
            outcome = succeeded(job, LARGE_RESULT)
        elif behaviour == "fail":
            outcome = raised(job, PermanentError("bad input"), attempts=run.attempt,
                             retry_any=True, cancel_reason=None)
        elif behaviour == "acquire":  # ctx.acquire of a token of "api" (its tenant's bucket
            # for "api:{tenant}"), not waiting: it fails, to be retried, when none is there
            try:
                Tokens(self.store, self.clock, pick=lambda n: 0).acquire(
                    "api" if job.tenant is None else "api:{tenant}", 1, tenant=job.tenant,
                    job_id=job_id, timeout=0.0, cancel=threading.Event())
                outcome = succeeded(job, {"job": job_id, "attempt": run.attempt})
            except (TokensNotGranted, TableUnavailable) as exc:
                outcome = raised(job, exc, attempts=run.attempt, retry_any=True,
                                 cancel_reason=None)
        elif behaviour == "interrupt_itself":
            outcome = raised(job, Interrupted("the handler gave up by itself"),
                             attempts=run.attempt, retry_any=True, cancel_reason=None)
        else:  # "raise", or "ignore_stop" with nothing to ignore: an ordinary exception
            outcome = raised(job, RuntimeError("flaky dependency"), attempts=run.attempt,
                             retry_any=True, cancel_reason=None)
        if abandoned:
            run.abandoned = True
            self.abandoned = True
        else:
            del self.runs[job_id]
        job.state = outcome.target
        if outcome.target not in TERMINAL_JOB_STATES:
            self.left.add(job_id)
        if self.lost:
            return
        if outcome.interrupted:
            self.gave_back = True
        try:
            self.writes.finish(job, outcome, started=True,
                               live_task=self.arn if abandoned else None)
        except Exception as exc:
            self._fail(exc)

    def checkpoint(self, job_id: str, state: dict[str, Any]) -> None:
        """``ctx.checkpoint(state)`` from the handler: what is pending is flushed, then the
        checkpoint written; an error is raised into the handler (it ends with it)."""
        assert self.writes is not None and self.fence is not None
        run = self.runs[job_id]
        if run.abandoned:
            return  # the Worker refuses an abandoned run's checkpoints (Interrupted)
        try:
            self.writes.flush()
            self.store.save_checkpoint(self.fence, job_id, state, worst_report(job_id))
        except Exception as exc:
            run.error = exc

    def heartbeat(self) -> None:
        """The heartbeat thread: it runs until the run is over or SIGTERM."""
        if self.phase != "running" or not self.alive or self.silent or self.stopping \
                or self.fence is None:
            return
        try:
            # Every running job reports its progress, each report at its largest.
            beat = self.store.heartbeat(self.fence, running=self.active(),
                                        progress={j: worst_report(j) for j in self.active()})
        except ConflictError:
            self.lost = True
            return
        except Exception:  # a missed beat is retried at the next interval
            return
        self.cancel_requested |= beat.cancel_requested
        self.learn_handed(beat.handed)

    def learn_handed(self, job_ids: Sequence[str]) -> None:
        """Worker.learn_handed: the jobs handed since last seen start first."""
        new = list(job_ids[len(self.handed):])
        if new and self.plan is not None:
            self.handed += new
            self.plan.first(new)
            self.exhausted = False

    def flush(self) -> None:
        """The flusher thread's grouped write."""
        assert self.writes is not None
        if self.lost or self.failure is not None:
            return
        try:
            self.writes.flush()
        except Exception as exc:
            self._fail(exc)

    def end(self) -> None:
        """Every slot is idle: what ``Worker._run_jobs`` and ``main`` do, then the process
        exits (an abandoned handler dies with it)."""
        assert self.writes is not None
        if self.failure is not None:
            self.exit(0 if isinstance(self.failure, ConflictError) else RUNNER_FAILED_EXIT)
            return
        if self.lost:
            self.exit(0)
            return
        try:
            if self.stopping or self.abandoned or self.gave_back:
                self.writes.flush()  # the bundle stays RUNNING: the stop event reruns the rest
            else:
                left = self.left - self.writes.refused
                target = BundleState.PENDING if self.writes.retrying or left \
                    else BundleState.DONE
                if target == BundleState.DONE and self.bundle is not None \
                        and not self.writes.refused:
                    self.phase = "following"  # FollowOnTaker.take, the bundle RUNNING
                    self.follow_until = self.clock() + FOLLOW_ON_WAIT_SECONDS
                    self.stream_until = self.clock() + self.stream_wait
                    self.follow()
                    return
                self.writes.flush(target, handed=len(self.handed))
        except HandedJobs as more:  # the process goes on: it runs them, then ends again
            self.learn_handed(more.job_ids)
            return
        except ConflictError:
            self.exit(0)
            return
        except Exception:
            self.exit(RUNNER_FAILED_EXIT)
            return
        self.exit(0)

    def follow(self) -> None:
        """End the bundle DONE with the batch's next follow-on taken (then claim it, phase
        "new"), look again later (none is recorded yet: the bundle stays RUNNING), or end it
        alone and exit."""
        assert self.bundle is not None and self.writes is not None and self.fence is not None
        if self.stopping:
            self.end_alone()
            return
        try:
            writes = self.writes
            outcomes = writes.outcomes()
            take = self.store.end_and_take(self.fence, self.bundle, outcomes,
                                           handed=len(self.handed),
                                           before=writes.flush_for_take)
        except HandedJobs as more:  # runs them, then ends again
            self.phase = "running"
            self.learn_handed(more.job_ids)
            return
        except ConflictError:
            self.exit(0)
            return
        except Exception:
            self.end_alone()
            return
        if take.bundle is not None:
            self.ran = outcomes.usage  # the task's job-seconds so far (FollowOnTaker.ran)
            self.phase = "new"
            self.fence = self.writes = self.plan = self.bundle = None
            self.runs, self.cancel_requested, self.left = {}, set(), set()
            self.exhausted, self.handed = False, []
            return
        if take.later and self.clock() < self.follow_until:
            return  # looked at again shortly
        if take.fed_at is not None and self.clock() < min(self.stream_until,
                                                           take.fed_at + self.stream_wait):
            try:
                if self.writes.flush_for_take():  # its results written, not held meanwhile
                    return  # a stream's next tick may cut some (FollowOnTaker.take)
            except Exception:
                self.exit(RUNNER_FAILED_EXIT)
                return
        self.end_alone()

    def end_alone(self) -> None:
        """The bundle's DONE write with no follow-on taken, then the exit (Worker._run_jobs)."""
        assert self.writes is not None
        try:
            self.writes.flush(BundleState.DONE, handed=len(self.handed))
        except HandedJobs as more:
            self.phase = "running"
            self.learn_handed(more.job_ids)
            return
        except ConflictError:
            self.exit(0)
            return
        except Exception:
            self.exit(RUNNER_FAILED_EXIT)
            return
        self.exit(0)

    def sigterm(self) -> None:
        """ECS stops the task (a Spot interruption): every run is told to stop, nothing new
        starts, the heartbeat ends; the task's stop code will say why."""
        self.stopping = True
        self.stop_code = StopCode.SPOT_INTERRUPTION

    def exit(self, code: int) -> None:
        self.stop(self.stop_code, "Essential container in task exited", code)

    def stop(self, code: str, reason: str, exit_code: int | None) -> None:
        """The process ends (a normal exit, a kill, a host lost): every run ends with it."""
        if self.alive:
            self.launcher.stop_task(self.arn, code, reason, exit_code)
        self.gone()

    def gone(self) -> None:
        """The process is gone (this or StopTask ended it): note which handlers ran then."""
        if self.phase != "ended":
            self.phase = "ended"
            self.live_at_stop = set(self.runs)
            self.runs.clear()

    def pass_(self, behaviour: Callable[[str], str]) -> None:
        """Everything this runner can do now, at once: claim, start jobs up to its slots,
        let every handler end as ``behaviour(job_id)`` says ("kill": it kills the task), and
        exit if its work is over."""
        if self.phase == "following" and self.alive and not self.silent:
            self.follow()
        if self.phase == "new" and self.alive:
            self.claim()
        while self.can_start():
            self.start_next()
        for job_id in self.active() if self.alive and not self.silent else []:
            if behaviour(job_id) == "kill":
                self.stop(StopCode.ESSENTIAL_CONTAINER_EXITED, "OutOfMemoryError", 137)
                return
            self.finish(job_id, behaviour(job_id))
        while self.can_start():
            self.start_next()
        if self.can_end() and not self.runs:
            self.end()

    def _fail(self, exc: Exception) -> None:
        if self.failure is None:
            self.failure = exc
        if isinstance(exc, ConflictError):
            self.lost = True


def worst_report(job_id: str) -> dict[str, Any]:
    """A ``ctx.progress`` report at its largest (every message character escaped), so the
    item-size check sees what the heartbeat and a checkpoint may carry."""
    return progress.report(1.2345678901234567e300, 9.876543210987654e300, "\x01" * 10_000,
                           at=1.7976931348623157e308, since=1.7976931348623157e308,
                           base=1.2345678901234567e300, job_id=job_id).as_json()
