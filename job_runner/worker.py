"""The job runner: find my bundle, claim it, run its jobs, heartbeat, record results.

Every write carries the claim's fence; a runner that loses it stops writing and exits 0. The
handler itself runs in :mod:`job_runner.executor`; what it returns or raises becomes the job's
next state in :mod:`job_runner.outcome`; the writes are grouped in :mod:`job_runner.writes`.

Up to ``LONGJOBS_TASK_CONCURRENCY`` jobs run at once (1, the default, runs them one after the
other). The main thread is the scheduler: it reads the bundle a page at a time and starts its
jobs in bundle order (:mod:`job_runner.schedule`), skipping ahead past a kind at its
``LONGJOBS_TASK_KIND_CONCURRENCY`` cap. Each started job gets a slot thread that runs it through
the executor (a plain handler in a thread of its own, an ``async def`` one as a task on the
task's one event loop) and records it; all slots share the bundle's grouped writes and fence.
Each running job has its own :class:`JobContext` (``Worker.running``): a timeout or a cancel
request stops that job only; the heartbeat reports the running job ids on the bundle item.
Urgent jobs handed to the bundle while it runs (dispatcher/stages/handoff.py) are learnt from
the heartbeat's write (or from the bundle's last write, which refuses to end it over one) and
start before the rest of the bundle, as slots free. A bundle of a large drain's batch that ends
DONE is followed by the batch's next follow-on (:mod:`job_runner.next_bundle`), taken onto this
task and claimed and run alike; the task exits when none is left.

Ways to stop taking jobs:

- SIGTERM: every running job is cancelled (each gets STOP_GRACE_SECONDS), nothing new starts,
  what finished is written and the bundle stays RUNNING; the stop event reruns the rest.
- A handler that outlives its cancellation (timeout, cancel, SIGTERM) is recorded with its
  outcome and this task's ARN (``live_task``: a ``jobs retry`` waits until this task is known
  stopped), and nothing new starts: a thread cannot be killed, and a job must never run twice
  at once. The other running jobs finish (each within its own timeout and grace) and are
  recorded, the writes are flushed, the bundle stays RUNNING, and the process ends
  (``os._exit``, :func:`job_runner.process.main`) without waiting for the abandoned handler;
  the stop event reruns the rest of the bundle elsewhere.
- A lost claim (the heartbeat or a write finds a newer attempt owning the bundle): every running
  job is cancelled ("claim lost") and nothing more is written.
- Any other failed write or read: nothing new starts, the running jobs finish, and the error is
  raised; the process exits with RUNNER_FAILED_EXIT (the runner failed, not a job:
  :func:`job_runner.process.main`).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from types import FrameType

from aws_lambda_powertools import Logger

from dispatcher.domain import progress
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, HandedJobs, Interrupted, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.progress import Progress
from dispatcher.settings import Config
from dispatcher.store import Claim, Fence, RunnerStore
from job_runner.context import JobContext
from job_runner.executor import POLL_SECONDS, Executor, Signals
from job_runner.joblog import running
from job_runner.kinds import HandlerRegistry
from job_runner.next_bundle import FollowOnTaker, assigned
from job_runner.outcome import Outcome, log_fields
from job_runner.schedule import Schedule
from job_runner.tokens import Tokens
from job_runner.writes import Writes

# JSON lines with task_arn / bundle_id / job_id on every line (payloads are never logged).
# Its level is LONGJOBS_LOG_LEVEL, set by job_runner.process.main once the settings are loaded.
log = Logger(service="longjobs-runner", logger_handler=logging.StreamHandler(sys.stderr))


class Worker:
    def __init__(self, cfg: Config, store: RunnerStore, registry: HandlerRegistry,
                 arn: str) -> None:
        self.cfg = cfg
        self.store = store
        self.tokens = Tokens(store, store.clock)  # ctx.acquire's buckets (job_runner/tokens.py)
        self.registry = registry
        self.arn = arn
        self.stopping = threading.Event()  # SIGTERM (or the run is over): start nothing more
        self.lost = threading.Event()  # a newer attempt owns the bundle: write nothing more
        self.abandoned = threading.Event()  # a handler outlived its grace: start nothing more
        self.gave_back = threading.Event()  # a job was given back (interrupted): see _run_jobs
        self._ending = threading.Event()  # the bundle's ending writes are under way
        self.cancel_requested: set[str] = set()
        # The live run of each job whose handler runs now: its cancellation, and the only
        # context whose checkpoints are written. Changed under _changed; read without it by
        # the heartbeat and on SIGTERM (a signal handler must not wait for a lock).
        self.running: dict[str, JobContext] = {}
        self._changed = threading.Condition()
        self._slots = 0  # jobs started and not yet recorded (at most task_concurrency)
        self._kinds: Counter[str] = Counter()  # the same, by kind
        self._ended = 0  # slots freed so far: the scheduler waits for it to move
        self._left: set[str] = set()  # jobs of the bundle not finished by this run
        self._failure: Exception | None = None  # a write failed in a slot: re-raised by run
        # Urgent jobs handed to the bundle while it runs (dispatcher/stages/handoff.py), as the
        # heartbeat or the bundle's last write learnt them: every id so far, in order, and
        # those the scheduler has not taken yet. Changed under _changed.
        self._handed: list[str] = []
        self._incoming: list[str] = []
        self.executor = Executor(Signals(cancel_requested=self.cancel_requested.__contains__,
                                         stopping=self.stopping.is_set,
                                         claim_lost=self.lost.is_set),
                                 retry_any_exception=cfg.retry_any_exception)
        self._follow_ons = FollowOnTaker(store, arn, self.stopping,
                                         handed=lambda: len(self._handed), log=log,
                                         stream_wait=cfg.stream_wait_seconds)

    def find_bundle(self) -> Bundle | None:
        """The bundle this task was launched for (:func:`job_runner.next_bundle.assigned`)."""
        return assigned(self.store, self.arn, self.cfg.assign_wait_seconds, self.stopping)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # A signal does not say who sent it: ECS's stop event does (its stop code and reason,
        # which the task-event handler records on each job's attempt: `jobs show`).
        log.warning("SIGTERM: the task is being stopped (who stopped it and why: the stop code "
                    "in `longjobs jobs show`); cancelling the running jobs cooperatively, "
                    "taking no new ones")
        self.stopping.set()  # before the look at running: a job started meanwhile sees it
        for ctx in list(self.running.values()):
            ctx.cancel("task stopping (SIGTERM)")

    def run(self) -> int:
        log.append_keys(task_arn=self.arn)
        # The usual start: its bundle claimed at once (its pointer, then the claim).
        claim = self.store.claim_assigned(self.arn)
        bundle = claim.bundle if claim is not None else self.find_bundle()
        if bundle is None:
            log.warning("no bundle assigned to %s; exiting without running anything", self.arn)
            return 0
        if claim is None and (bundle.task_arn != self.arn
                              or bundle.state != BundleState.LAUNCHED):
            # What it saw: its stop is settled as a task that never started its bundle.
            log.warning("bundle %s belongs to another attempt (%s, attempt %s, task %s); "
                        "exiting", bundle.bundle_id, bundle.state, bundle.attempt,
                        bundle.task_arn)
            return 0
        try:
            following = self._run_bundle(bundle, claim)
            while following is not None:
                following = self._run_bundle(following)
        finally:
            self.stopping.set()
            self.executor.close()
        return 0

    def _run_bundle(self, bundle: Bundle, claim: Claim | None = None) -> Bundle | None:
        """Claim (unless ``claim`` is its claim already) and run one bundle LAUNCHED on this
        task; the follow-on of its batch taken as it ended DONE (run it next), or None (the
        task exits)."""
        log.append_keys(bundle_id=bundle.bundle_id, attempt=bundle.attempt)
        fence = Fence(bundle.bundle_id, bundle.attempt, self.arn, pages=bundle.pages)
        try:
            claim = claim or self.store.claim(fence)
        except ConflictError as exc:
            log.warning("%s; exiting without running anything", exc.reason)
            return None
        bundle = claim.bundle  # as claimed: RUNNING, with this task's fence
        # The cancellations of this bundle's jobs only (the executor's signal reads this set).
        self.cancel_requested.clear()
        self.cancel_requested |= claim.cancel_requested
        self._left.clear()
        self._ending.clear()
        with self._changed:
            self._handed = list(bundle.handed_jobs)  # handed to an earlier run: in job_ids
            self._incoming = []
        # A bundle of one job, or any later launch of a bundle (after a stop, a launch failure
        # or a retry): write every start and result at once, so a stop is charged to the job
        # that ran (see job_runner.writes and dispatcher.domain.lifecycle).
        # A failed write, whichever thread made it (a slot, the flusher, a handler's
        # checkpoint), is the runner's failure: it starts no more jobs and exits.
        writes = Writes.for_bundle(self.store, fence, bundle, self.cfg.flush_seconds,
                                   on_error=self._fail, ran_before=self._follow_ons.ran)
        over = threading.Event()  # this bundle's run is over: its heartbeat ends
        beat = threading.Thread(target=self._heartbeat, args=(fence, over), daemon=True)
        beat.start()
        following: Bundle | None = None
        try:
            with writes:
                following = self._run_jobs(bundle, fence, writes)
        except ConflictError as exc:
            log.warning("lost the claim: %s; exiting without further writes", exc.reason)
        finally:
            over.set()
            # A beat under way when the bundle ended is this bundle's: done before the next
            # bundle's state is set up (it would find the fence moved on, or learn this
            # bundle's handed jobs as the next one's).
            beat.join()
        return following

    def _run_jobs(self, bundle: Bundle, fence: Fence, writes: Writes) -> Bundle | None:
        """Run the bundle's jobs and end it: DONE, PENDING (a retry is due), or left RUNNING
        for the stop event to settle (or its claim was lost). The follow-on taken as it ended
        DONE, if one was (:class:`job_runner.next_bundle.FollowOnTaker`)."""
        schedule = Schedule(self.store.bundle_jobs(bundle), self.store.jobs_patiently)
        while True:
            try:
                self._start_jobs(bundle, schedule, writes)
            except Exception as exc:  # a write or a read failed: start nothing more
                self._fail(exc)
            self._wait_idle()  # each running job ends within its timeout and grace
            if self._slots and not self._halted():  # a job handed while the last ones ran
                continue
            self._wait_idle()  # halted meanwhile: every running job ends first
            if self._failure is not None:
                raise self._failure  # ConflictError: the claim is lost; else the runner failed
            if self.lost.is_set():
                return None
            if self.stopping.is_set() or self.abandoned.is_set() or self.gave_back.is_set():
                # The bundle stays RUNNING: the stop event reruns what is left (handed jobs
                # not run yet too). A job given back (SIGTERM, or a handler that raised
                # Interrupted by itself) counted its infrastructure attempt; its rerun is the
                # stop's too, so the one settle that reruns it also fails it once that budget
                # is spent (dispatcher.domain.lifecycle).
                writes.flush()
                return None
            if self._take_handed(schedule):
                continue  # handed while the last jobs ran: run them first
            # Every job handed so far has run (those a beat learns from now on have not): the
            # bundle ends, or a take ends it, only if the table shows no more than these.
            seen = self._seen_handed()
            if seen is None:
                continue  # a beat learnt one just now: run it first
            left = self._left - writes.refused
            target = BundleState.PENDING if writes.retrying or left else BundleState.DONE
            self._ending.set()  # a beat that finds the bundle moved from now on: it ended
            try:
                if target == BundleState.DONE:
                    following = self._follow_ons.take(bundle, fence, writes, seen)
                    if following is not None:
                        return following
                writes.flush(target, handed=seen)
            except HandedJobs as more:  # handed since the last heartbeat: run them, then end
                self._ending.clear()
                self.learn_handed(more.job_ids)
                continue
            return None

    def learn_handed(self, job_ids: Sequence[str]) -> None:
        """Every job handed to the bundle so far (the list only grows): the new ones are
        started first, as slots free."""
        with self._changed:
            new = list(job_ids[len(self._handed):])
            if new:
                self._handed += new
                self._incoming += new
                self._changed.notify_all()

    def _seen_handed(self) -> int | None:
        """How many jobs were handed to the bundle, all of them run; None if a beat learnt
        one not started yet."""
        with self._changed:
            return None if self._incoming else len(self._handed)

    def _take_handed(self, schedule: Schedule) -> bool:
        with self._changed:
            new, self._incoming = self._incoming, []
        schedule.first(new)
        return bool(new)

    def _halted(self) -> bool:
        return self.stopping.is_set() or self.lost.is_set() or self.abandoned.is_set() \
            or self._failure is not None

    def _at_cap(self, kind: str) -> bool:
        cap = self.cfg.task_kind_concurrency.get(kind)
        return cap is not None and self._kinds[kind] >= max(cap, 1)

    def _start_jobs(self, bundle: Bundle, schedule: Schedule, writes: Writes) -> None:
        """Start the bundle's jobs in order (those handed to it first), up to
        task_concurrency at once, until the bundle is exhausted or the task stops taking jobs.
        A bundle of a kind with a limit across tasks (LONGJOBS_KIND_LIMITS) runs at most its
        ``slots`` at once: what the dispatcher counted against that limit when it launched
        it."""
        concurrency = min(self.cfg.task_concurrency, bundle.slots or self.cfg.task_concurrency)
        while True:
            with self._changed:
                while self._slots >= concurrency and not self._halted():
                    self._changed.wait(POLL_SECONDS)
                ended = self._ended
            if self._halted():
                return
            self._take_handed(schedule)
            job = schedule.next(self._at_cap)
            if job is None:
                if schedule.exhausted:
                    return
                with self._changed:  # all that is left is of kinds at their cap
                    while self._ended == ended and not self._halted():
                        self._changed.wait(POLL_SECONDS)
                continue
            if job.state != JobState.PENDING or job.bundle_id != bundle.bundle_id:
                if job.bundle_id == bundle.bundle_id and job.state not in TERMINAL_JOB_STATES:
                    self._left.add(job.job_id)
                continue  # finished, or retried into another bundle
            if job.job_id in self.cancel_requested:
                job.state = JobState.CANCELLED
                writes.finish(job, Outcome(JobState.CANCELLED, reason="cancelled on request "
                                           "before it started"), started=False)
                continue
            self._start(job, writes)

    def _start(self, job: Job, writes: Writes) -> None:
        ctx = JobContext(job.job_id, job.attempts + 1, job.checkpoint,
                         lambda state: self._checkpoint(writes, job, ctx, state), log,
                         array_index=job.array_index,
                         last_progress=Progress.from_json(job.progress),
                         take=lambda key, n, timeout, cancel: self.tokens.acquire(
                             key, n, tenant=job.tenant, job_id=job.job_id, timeout=timeout,
                             cancel=cancel))
        with self._changed:
            self.running[job.job_id] = ctx
            self._slots += 1
            self._kinds[job.kind] += 1
        if self.stopping.is_set():  # SIGTERM meanwhile, perhaps before it could see ctx
            self._release(job, ctx)
            return
        threading.Thread(target=self._slot, args=(job, ctx, writes), daemon=True,
                         name=f"slot-{job.job_id}").start()

    def _slot(self, job: Job, ctx: JobContext, writes: Writes) -> None:
        # The job's keys on every line written in its context: the runner's own, ctx.logger's
        # and (job_runner.joblog) the handler's logging records and print() lines.
        log.thread_safe_append_keys(job_id=job.job_id, kind=job.kind, job_attempt=ctx.attempt)
        try:
            self._run_job(job, ctx, writes)
        except Exception as exc:  # a write failed: the runner's failure, not the job's
            self._fail(exc)
        finally:
            self._release(job, ctx)
            log.thread_safe_remove_keys(["job_id", "kind", "job_attempt"])

    def _release(self, job: Job, ctx: JobContext) -> None:
        with self._changed:
            if self.running.get(job.job_id) is ctx:
                del self.running[job.job_id]
            self._slots -= 1
            self._kinds[job.kind] -= 1
            self._ended += 1
            self._changed.notify_all()

    def _fail(self, exc: Exception) -> None:
        with self._changed:
            if self._failure is None:
                self._failure = exc
            if isinstance(exc, ConflictError):
                self.lost.set()  # the running jobs are cancelled ("claim lost")
            self._changed.notify_all()

    def _wait_idle(self) -> None:
        """Until every slot is free, or a job handed meanwhile can take a free one."""
        with self._changed:
            while self._slots and not (self._incoming and not self._halted()):
                self._changed.wait(POLL_SECONDS)

    def _run_job(self, job: Job, ctx: JobContext, writes: Writes) -> bool:
        """Run one job and record it; True if its handler was abandoned still running."""
        writes.start(job)
        if writes.start_refused(job):  # the table has its end (a cancel): nothing to run
            log.info("the job moved on before its start was written (cancelled meanwhile); "
                     "not run")
            return False
        abandoned = False
        try:
            handler = self.registry.get(job.kind)
        except LongjobsError as exc:
            outcome = Outcome(JobState.FAILED, reason=exc.reason,
                              error={"type": "HandlerImportError", "message": exc.reason})
        else:
            if handler is None:
                known = ", ".join(self.registry.kinds()) or "none"
                outcome = Outcome(JobState.FAILED, reason=f"unknown kind {job.kind!r}: no "
                                  f"handler registered (known: {known}); register one with "
                                  f"LONGJOBS_HANDLERS={job.kind}=module:function in the "
                                  f"worker's environment (or a longjobs.handlers entry point), "
                                  f"then `longjobs jobs retry {job.job_id}`",
                                  error={"type": "UnknownKind", "message": job.kind})
            else:
                # Only the handler's own records and writes are its job's (the runner's
                # table calls around it are not); the executor's copied context carries it.
                with running(job.job_id, ctx.attempt):
                    execution = self.executor.execute(job, handler, ctx, ctx.attempt)
                outcome, abandoned = execution.outcome, execution.abandoned
                if abandoned:
                    self.abandoned.set()  # at once: no job may start beside it from now on
        with self._changed:  # no longer the live run: its checkpoints are refused
            if self.running.get(job.job_id) is ctx:
                del self.running[job.job_id]
        job.state = outcome.target
        if outcome.target not in TERMINAL_JOB_STATES:
            self._left.add(job.job_id)
        if self.lost.is_set():
            return abandoned  # a newer attempt owns the bundle: nothing more is written
        if outcome.interrupted:
            self.gave_back.set()
        writes.finish(job, outcome, started=True,
                      live_task=self.arn if abandoned else None)
        # The record keeps the whole error; the log gets its type and a redacted, bounded
        # message (handler errors can quote payload values).
        report = log.info if outcome.target == JobState.SUCCEEDED else log.warning
        report("job finished", extra=log_fields(outcome))
        if abandoned:
            log.error("the handler ignored its cancellation and still runs; taking no new "
                      "jobs, and ending the task once the others are recorded, so that it "
                      "cannot overlap a rerun", extra=log_fields(outcome))
        return abandoned

    def _checkpoint(self, writes: Writes, job: Job, ctx: JobContext,
                    state: dict[str, object]) -> None:
        if self.running.get(job.job_id) is not ctx:  # an abandoned handler, still running:
            # its outcome is recorded
            raise Interrupted("this run was abandoned; its checkpoint is not written",
                              job_id=job.job_id)
        writes.flush()
        reported = ctx.reported  # none this attempt: the job's item keeps the one it has
        self.store.save_checkpoint(writes.fence, job.job_id, state,
                                   reported.as_json() if reported is not None else None)

    def _heartbeat(self, fence: Fence, over: threading.Event) -> None:
        while not over.wait(self.cfg.heartbeat_seconds) and not self.stopping.is_set():
            with self._changed:
                running = list(self.running)
                reported = {j: p for j, ctx in self.running.items()
                            if (p := ctx.reported) is not None}
            try:
                beat = self.store.heartbeat(fence, running=running,
                                            progress=progress.latest(reported))
                if over.is_set():  # the bundle ended meanwhile: what it says is not the next's
                    return
                self.cancel_requested |= beat.cancel_requested
                self.learn_handed(beat.handed)
            except ConflictError:
                # It ended meanwhile (or its ending write finds the claim lost, and says so).
                if over.is_set() or self._ending.is_set():
                    return
                log.warning("heartbeat found the claim lost; stopping")
                self.lost.set()
                return
            except Exception as exc:  # a missed beat is retried at the next interval
                log.warning("heartbeat failed: %s", type(exc).__name__)
