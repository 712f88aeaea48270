"""A task's runner in virtual time: its bundle's jobs at the task's concurrency, written through
the real runner store and the runner's own grouped writes.

What a Fargate task of ``python -m job_runner`` does (:class:`job_runner.worker.Worker`), as a
generator that yields the virtual time it next wakes at (:meth:`TaskModel.run`): it reads its
bundle (the task's pointer, then the bundle), claims it, reads its jobs a page of 100 at a time
as slots free, runs ``concurrency`` at once, each for its modelled seconds, and records starts
and results through :class:`job_runner.writes.Writes` (grouped: a flush ``flush_seconds`` after
the oldest unwritten result, or at 98 pending updates; write-through on a rerun), beats every
``heartbeat_seconds`` (learning from each beat the urgent jobs handed to the bundle, which it
starts before the rest, as the worker does), and ends with the bundle's DONE write, running
first any job handed since its last beat that the write turns up; then it takes its batch's
next follow-on, if any, and runs it alike. Handlers are not run: a job takes
``seconds_of(job)`` of virtual time and succeeds. The store calls cost what the AWS model
charges them (:mod:`dispatcher.simulation.aws_model`); the jobs do not wait for the writes, as the
flusher is a thread of its own in the runner.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.costs import Usage
from dispatcher.domain.errors import ConflictError, HandedJobs
from dispatcher.domain.jobs import Job, JobState
from dispatcher.simulation.virtual_time import VirtualClock
from dispatcher.store import Claim, Fence, RunnerStore
from job_runner.next_bundle import (
    FOLLOW_ON_POLL_SECONDS,
    FOLLOW_ON_WAIT_SECONDS,
    STREAM_POLL_SECONDS,
    taken_anyway,
)
from job_runner.outcome import Outcome
from job_runner.writes import FLUSH_AT_JOBS, Writes

log = logging.getLogger(__name__)


@dataclass
class TaskRun:
    """What one task did, in virtual time."""

    task_arn: str
    launched_at: float
    started_at: float
    claimed_at: float | None = None
    ended_at: float | None = None
    bundle_id: str | None = None
    jobs_run: int = 0
    last_job_end: float | None = None
    urgent: bool = False  # it ran the urgent job: not part of the batch's figures
    follow_ons: int = 0  # follow-ons it took after its first bundle
    running: set[str] = field(default_factory=set)  # the jobs it runs now
    killed_at: float | None = None  # killed (dispatcher.simulation.faults): its runner is gone
    stopping: bool = False  # SIGTERM (a Spot reclaim's warning): give back, write, exit
    # How ECS reports its stop (stop code, reason, exit code); None: its runner exited 0.
    stop: tuple[str, str, int | None] | None = None
    ran: Usage = field(default_factory=Usage)  # job-seconds of the bundles it took over from


class TaskModel:
    def __init__(self, store: RunnerStore, clock: VirtualClock, *, concurrency: int,
                 seconds_of: Callable[[Job], float], flush_seconds: float,
                 heartbeat_seconds: float, stream_wait_seconds: float = 0.0,
                 on_job_start: Callable[[Job, str, float], None] | None = None,
                 on_job_end: Callable[[Job, str, float], None] | None = None) -> None:
        self.store = store
        self.clock = clock
        self.concurrency = concurrency
        self.seconds_of = seconds_of
        self.flush_seconds = flush_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.stream_wait_seconds = stream_wait_seconds
        # Each job's run on a task, as it starts and ends (the job, the task's ARN, the time).
        self.on_job_start = on_job_start
        self.on_job_end = on_job_end

    def run(self, task: TaskRun) -> Iterator[float]:
        """The task from its container's start to its exit; yields the times it sleeps until
        (the caller sets the clock to each before resuming it). A bundle that ends
        DONE is followed by a follow-on (its batch's next, or another batch's), taken as the
        worker takes it
        (:meth:`job_runner.next_bundle.FollowOnTaker.take`)."""
        clock = self.clock
        # As the worker starts (Worker.run): its bundle claimed at once, else read.
        claim = self.store.claim_assigned(task.task_arn)
        bundle = claim.bundle if claim is not None else self.store.bundle_for_task(task.task_arn)
        if bundle is None or (claim is None and (bundle.task_arn != task.task_arn
                                                or bundle.state != BundleState.LAUNCHED)):
            task.ended_at = clock()
            return
        following = yield from self._bundle(task, bundle, claim)
        while following is not None:
            task.follow_ons += 1
            following = yield from self._bundle(task, following)
        task.ended_at = clock()

    def _follow_on(self, task: TaskRun, done: Bundle, fence: Fence, writes: Writes,
                   handed: int) -> Generator[float, None, Bundle | None]:
        """``done`` (its last results written just before) ended DONE with its batch's next
        follow-on taken,
        in one transaction, as the worker does (:meth:`job_runner.next_bundle.FollowOnTaker.take`);
        None if none was taken (``done`` is still RUNNING)."""
        if writes.refused or task.stopping:
            return None
        deadline = self.clock() + FOLLOW_ON_WAIT_SECONDS
        streaming = self.clock() + self.stream_wait_seconds
        while True:
            outcomes = writes.outcomes()
            try:
                take = self.store.end_and_take(fence, done, outcomes, handed=handed,
                                               before=writes.flush_for_take)
            except (HandedJobs, ConflictError):
                raise
            except Exception as exc:  # as the worker: it may have committed all the same
                taken = taken_anyway(self.store, task.task_arn, done, exc, log)
                if taken is not None:
                    task.ran = outcomes.usage
                return taken
            if take.bundle is not None:
                task.ran = outcomes.usage  # as FollowOnTaker.ran
                return take.bundle
            if take.later and self.clock() < deadline:
                yield self.clock() + FOLLOW_ON_POLL_SECONDS
            elif take.fed_at is not None and self.clock() < min(
                    streaming, take.fed_at + self.stream_wait_seconds) \
                    and writes.flush_for_take():  # its results written, not held meanwhile
                yield self.clock() + STREAM_POLL_SECONDS
            else:
                return None
            if task.stopping:  # the taker stops with the runner: done ends as it is
                return None

    def _give_back(self, task: TaskRun, writes: Writes, running: list[Job],
                   now: float) -> None:
        """SIGTERM, as the worker takes it (:meth:`job_runner.worker.Worker.on_sigterm`): each
        running job cancelled (a modelled job stops at once) and given back, what finished
        written; the bundle stays RUNNING for its stop event's rerun."""
        for job in running:
            writes.finish(job, Outcome(JobState.PENDING, error={
                "type": "Interrupted", "message": "task stopping (SIGTERM)"},
                reason="interrupted: task stopping (SIGTERM)", interrupted=True), started=True)
            task.running.discard(job.job_id)
            if self.on_job_end is not None:
                self.on_job_end(job, task.task_arn, now)
        writes.flush()

    def _bundle(self, task: TaskRun, bundle: Bundle, claim: Claim | None = None
                ) -> Generator[float, None, Bundle | None]:
        """One bundle LAUNCHED on the task: claimed (unless ``claim`` is its claim), run,
        DONE; the follow-on of its batch taken as it ended, if one was (as the worker's)."""
        clock = self.clock
        fence = Fence(bundle.bundle_id, bundle.attempt, task.task_arn, pages=bundle.pages)
        try:
            bundle = (claim or self.store.claim(fence)).bundle
        except ConflictError:
            return None
        task.bundle_id = bundle.bundle_id
        task.claimed_at = task.claimed_at or clock()
        writes = Writes.for_bundle(self.store, fence, bundle, self.flush_seconds,
                                   ran_before=task.ran)
        pages = self.store.bundle_jobs(bundle)
        page: list[Job] = []
        handed: list[str] = list(bundle.handed_jobs or ())  # seen; those of an earlier run
        urgent: list[str] = []  # handed and not started yet: they start first
        running: list[tuple[float, int, Job]] = []  # (ends at, order, job)
        started = 0
        oldest: float | None = None  # the oldest unwritten result's time
        next_beat = clock() + self.heartbeat_seconds
        while True:
            now = clock()
            if task.stopping:  # what ended before the SIGTERM was recorded above
                self._give_back(task, writes, [job for _, _, job in running], now)
                return None
            while len(running) < self.concurrency:
                if urgent:
                    found = self.store.get_job(urgent.pop(0))
                    if found is None or found.state != JobState.PENDING:
                        continue
                    page.insert(0, found)
                # The next page with a job left to run: a rerun's first pages may hold none
                # (their jobs ended on the task before), and the bundle goes on past them.
                while not page:
                    chunk = next(pages, None)
                    if chunk is None:
                        break
                    page = [j for j in chunk if j.state == JobState.PENDING]
                if not page:
                    break
                job = page.pop(0)
                writes.start(job)
                task.running.add(job.job_id)
                if self.on_job_start is not None:
                    self.on_job_start(job, task.task_arn, now)
                started += 1
                heapq.heappush(running, (now + self.seconds_of(job), started, job))
            if not running:
                try:
                    following = yield from self._follow_on(task, bundle, fence, writes,
                                                           len(handed))
                    if following is None:
                        writes.flush(BundleState.DONE, handed=len(handed))
                    return following
                except HandedJobs as more:  # handed since the last beat: run them, then end
                    urgent += more.job_ids[len(handed):]
                    handed = list(more.job_ids)
                    continue
            due = [running[0][0], next_beat]
            if oldest is not None:
                due.append(oldest + self.flush_seconds)
            wake = min(due)
            yield wake
            now = clock()
            while running and running[0][0] <= now:
                _, _, job = heapq.heappop(running)
                writes.finish(job, Outcome(JobState.SUCCEEDED), started=True)
                task.running.discard(job.job_id)
                if self.on_job_end is not None:
                    self.on_job_end(job, task.task_arn, now)
                task.jobs_run += 1
                task.last_job_end = now
                if not writes.write_through:  # written at once otherwise: none waits
                    oldest = now if oldest is None else oldest
            if not writes.write_through and writes.pending and oldest is not None and (
                    len(writes.pending) >= FLUSH_AT_JOBS or now >= oldest + self.flush_seconds):
                writes.flush()
                oldest = None
            if now >= next_beat:
                next_beat = now + self.heartbeat_seconds
                try:
                    beat = self.store.heartbeat(fence, [j.job_id for _, _, j in running])
                except ConflictError:
                    raise
                except Exception as exc:  # as the worker: a missed beat, tried at the next
                    log.warning("heartbeat failed: %s", type(exc).__name__)
                else:
                    urgent += list(beat.handed[len(handed):])
                    handed = list(beat.handed)
