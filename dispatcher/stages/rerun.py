"""Observe a stop, rerun: what happens to a bundle whose task stopped.

The stop is classified by :func:`dispatcher.domain.stops.classify` (which budget it spends);
this stage turns that into job updates and relaunches at once, through the same launch code as the
tick. Unfinished jobs go back to PENDING; jobs out of their budget become FAILED with the stop's
reason. Duplicate, late and out-of-order stops are harmless: one acts only if the bundle is still
on that task ARN and attempt (the store's settle is conditional on it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.stops import StopClass, TaskStop, classify
from dispatcher.ports.launcher import Launcher
from dispatcher.ports.table import InvalidTransaction, TransactionCancelled
from dispatcher.stages.launch import Launches, LaunchStats, launch_slots
from dispatcher.stages.policy import RerunPolicy
from dispatcher.store import DispatchStore, JobUpdate

log = logging.getLogger(__name__)


class StopResult(StrEnum):
    FINISHED = "finished"  # the normal end of a task: its bundle is DONE
    SETTLED = "settled"  # stopped early: jobs rerun or failed
    IGNORED = "ignored"  # stale, duplicate, or not a task of ours: nothing changed


@dataclass
class StopOutcome:
    """What one task stop did (the task-event handler's return value and its metrics)."""

    result: StopResult
    task_arn: str
    bundle_id: str | None = None
    stop_class: StopClass | None = None
    rerun: list[str] = field(default_factory=list)  # job ids back to PENDING
    failed: list[str] = field(default_factory=list)  # job ids that ended FAILED
    succeeded: list[str] = field(default_factory=list)  # FINISHED only
    relaunched: bool = False
    spot_fallbacks: int = 0  # the relaunch went to on-demand FARGATE (no Spot capacity)
    reason: str | None = None  # why it was ignored

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["result"] = str(self.result)
        out["stop_class"] = str(self.stop_class) if self.stop_class else None
        return out


def _history(job: Job, stop: TaskStop, cls: StopClass, at: float) -> list[dict[str, Any]]:
    history = [dict(h) for h in job.history]
    entry = {"stopped_at": stop.stopped_at or at, "stop_code": stop.stop_code,
             "exit_code": stop.exit_code, "reason": stop.stopped_reason, "stop_class": str(cls),
             "task_arn": stop.task_arn}
    if history and history[-1].get("task_arn") == stop.task_arn:
        history[-1].update({k: v for k, v in entry.items() if v is not None})
    else:
        history.append(entry)
    return history


@dataclass
class Decision:
    """What a stop does to its bundle's jobs (:meth:`Reruns.decide`)."""

    stop_class: StopClass
    updates: list[JobUpdate]
    rerun: list[str]  # job ids back to PENDING
    # Several jobs were running when the task died of one of them: rerun the bundle one job
    # at a time (its ``slots`` set to 1), so that the next such stop names the job.
    serial: bool = False


class Reruns:
    def __init__(self, store: DispatchStore, launcher: Launcher, launches: Launches,
                 policy: RerunPolicy, clock: Callable[[], float]) -> None:
        self._store = store
        self._launcher = launcher
        self._launches = launches
        self._policy = policy
        self._clock = clock

    def decide(self, stop: TaskStop, bundle: Bundle, jobs: list[Job]) -> Decision:
        """Every stop that leads to a rerun charges a budget (see dispatcher.domain.lifecycle):
        the job that was running (an application attempt), else the infrastructure budget of
        the jobs it interrupted. If several jobs were running (a task running jobs at once)
        when its process ended, which of them ended it cannot be told: each is charged the
        infrastructure budget, not an attempt, and the bundle reruns serially so that the next
        such stop names the job. The same holds for any job recorded running by a task that
        buffered its writes (a bundle's first launch): it may have finished already. A job
        is never rerun past its infrastructure budget, however it was interrupted (a runner
        that gave a job back, after SIGTERM or a raised Interrupted, counted it already).

        A claimed bundle with no job recorded RUNNING and nothing recorded by its task charges,
        from its second launch on, its first unfinished job: each rerun then either follows
        progress (a job of the bundle finished) or costs a budget.

        A large bundle's settle takes several transactions; one that died part-way is handled
        again from the jobs as they are then. The jobs it settled carry this task's ARN
        (``settled_by``): they are charged nothing more, and one that was running at the stop
        (its history entry carries the stop) still counts as running for the stop's class."""
        ours = [j for j in jobs if j.bundle_id == bundle.bundle_id]
        settled = {j.job_id for j in ours if j.settled_by == stop.task_arn}
        mine = [j for j in ours if j.state not in TERMINAL_JOB_STATES]
        running = [j for j in mine if j.state == JobState.RUNNING]
        was_running = bool(running) or any(
            j.job_id in settled and j.history and j.history[-1].get("task_arn") == stop.task_arn
            and "stop_class" in j.history[-1] for j in ours)
        cls = classify(stop, claimed=bundle.state != BundleState.LAUNCHED,
                       job_was_running=was_running)
        # A job of this bundle whose last attempt is this task (finished, given back after
        # SIGTERM, or abandoned still running) shows the task made progress or accounted for
        # its stop; only a task that recorded nothing at all leaves the stop unattributed.
        recorded = any(j.history and j.history[-1].get("task_arn") == stop.task_arn
                       for j in ours)
        unattributed = bundle.state == BundleState.RUNNING and bool(mine) and not running \
            and not recorded
        charged = {j.job_id for j in running}
        # One of several running jobs ended the process: blame none of them, serialize. So
        # too a task that buffered its writes: a job it recorded RUNNING (its start written
        # with a mate's result) may have returned already, its result still buffered, when a
        # later job killed the process.
        buffered = not lifecycle.writes_through(bundle.attempt, len(bundle.job_ids))
        ambiguous = cls == StopClass.APPLICATION and (len(running) > 1
                                                      or (buffered and bool(running)))
        if bundle.state == BundleState.LAUNCHED:
            charged = {j.job_id for j in mine}  # never claimed: each job lost a launch
        elif unattributed and bundle.attempt > 1:
            # This task wrote every start and result at once (a rerun): its first unfinished
            # job is the one it was at or about to run. On a first launch starts and results
            # were buffered, so finished bundle-mates look unfinished too: charge nobody, and
            # let the rerun (which writes through) attribute the next stop.
            charged = {mine[0].job_id}
        t = self._clock()
        why = stop.describe()
        updates, rerun = [], []
        for job in mine:
            if job.job_id in settled:
                rerun.append(job.job_id)  # requeued by this stop's earlier, interrupted settle
                continue
            u = JobUpdate(job.job_id, job.state, JobState.PENDING,
                          history=_history(job, stop, cls, t) if job.state == JobState.RUNNING
                          else None, settled_by=stop.task_arn)
            if cls == StopClass.USER:
                u.target, u.reason = JobState.CANCELLED, f"stopped by longjobs: {why}"
            elif job.state == JobState.RUNNING and cls == StopClass.APPLICATION \
                    and not ambiguous:
                if job.attempts >= job.max_attempts:
                    u.target, u.reason = JobState.FAILED, f"out of attempts; last {why}"
                    u.error = {"type": "TaskStopped", "message": why}
            elif job.job_id in charged:
                # Infrastructure: give the attempt back, spend the infrastructure budget.
                u.attempts_delta = -1 if job.state == JobState.RUNNING else 0
                u.infra_delta = 1
            if u.target == JobState.PENDING and \
                    job.infra_attempts + u.infra_delta > self._policy.max_infra_attempts:
                # A job its runner gave back (interrupted) says why in its own reason.
                gave_back = job.state == JobState.PENDING and bool(job.reason) and \
                    bool(job.history) and job.history[-1].get("task_arn") == stop.task_arn
                u.target, u.reason = JobState.FAILED, f"infrastructure budget spent; {why}" + (
                    f"; its last run: {job.reason}" if gave_back else "")
                u.error = {"type": "TaskStopped", "message": why}
            if u.target == u.source and u.attempts_delta == 0 and u.infra_delta == 0 \
                    and u.history is None:
                rerun.append(job.job_id)  # untouched PENDING job: it just reruns
                continue
            updates.append(u)
            if u.target == JobState.PENDING:
                rerun.append(job.job_id)
        return Decision(cls, updates, rerun, serial=ambiguous and bool(rerun))

    def on_stop(self, stop: TaskStop) -> StopOutcome:
        arn = stop.task_arn
        bundle = self._store.bundle_for_task(arn)
        if bundle is None:
            return StopOutcome(StopResult.IGNORED, arn,
                               reason="no bundle was assigned to this task")
        if bundle.task_arn == arn and bundle.state == BundleState.DONE:
            # The normal end of a task: nothing to rerun; report its jobs' outcomes (metrics),
            # once: a redelivered event (or one whose settle already ended the bundle) is not.
            if not self._store.first_report(bundle, arn):
                return StopOutcome(StopResult.IGNORED, arn, bundle.bundle_id,
                                   reason="duplicate event: this task's stop was handled")
            everyone = self._store.get_jobs(bundle.job_ids)
            self._store.end_live_runs(arn, everyone)  # a run abandoned there is over now
            jobs = [j for j in everyone if j.bundle_id == bundle.bundle_id]
            return StopOutcome(StopResult.FINISHED, arn, bundle.bundle_id,
                               succeeded=[j.job_id for j in jobs
                                          if j.state == JobState.SUCCEEDED],
                               failed=[j.job_id for j in jobs if j.state == JobState.FAILED])
        if bundle.task_arn != arn or bundle.state not in (BundleState.LAUNCHED,
                                                          BundleState.RUNNING):
            return StopOutcome(StopResult.IGNORED, arn, bundle.bundle_id,
                               reason=f"stale event: bundle {bundle.bundle_id} is "
                                      f"{bundle.state} on attempt {bundle.attempt}")
        jobs = self._store.get_jobs(bundle.job_ids)
        decision = self.decide(stop, bundle, jobs)
        cls, updates, rerun = decision.stop_class, decision.updates, decision.rerun
        target = BundleState.PENDING if rerun else BundleState.DONE
        try:
            overfull = self._store.settle(bundle, updates, target, retry_at=self._clock(),
                                          serial=decision.serial)
        except (ConflictError, TransactionCancelled) as exc:
            # Someone else is moving this bundle (another event, the tick): nothing was written;
            # reconciliation looks again if it still needs handling.
            return StopOutcome(StopResult.IGNORED, arn, bundle.bundle_id, reason=exc.reason)
        except InvalidTransaction as exc:
            # The table refuses the settle for a reason not of one job's item (a job's is
            # failed alone by the settle): a stop event, and the tick whose reconciliation
            # calls this, must not fail for it. Logged; reconciliation looks again.
            log.error("the table refused a stop's settle", extra={
                "bundle_id": bundle.bundle_id, "task_arn": arn, "reason": exc.reason})
            return StopOutcome(StopResult.IGNORED, arn, bundle.bundle_id, reason=exc.reason)
        rerun = [j for j in rerun if j not in overfull]
        self._store.end_live_runs(arn, jobs)  # a run abandoned there is over now
        out = StopOutcome(StopResult.SETTLED, arn, bundle.bundle_id, cls, rerun=rerun,
                          failed=[u.job_id for u in updates
                                  if u.target == JobState.FAILED or u.job_id in overfull])
        if rerun:
            stats = LaunchStats()
            # Its slots are decided now, with the limits of now, as the tick decides them: the
            # relaunch takes back at most the room its own stop freed, and never more than its
            # kind's current limit (a lowered limit is not checked against the kind's other
            # bundles here: the tick's next launches are).
            bundle.slots = launch_slots(bundle, self._policy.task_concurrency,
                                        self._policy.kind_limits)
            try:
                self._launches.launch([bundle], self._launcher.resolve_task_definition(), stats)
            except Exception as exc:  # a refusal, or an AWS error after its retries
                # The settle is written: the bundle is PENDING and due now, and the next tick
                # launches it. Failing the event now would only retry a stale stop.
                log.warning("immediate relaunch failed; the next tick launches the bundle",
                            extra={"bundle_id": bundle.bundle_id,
                                   "reason": exc.reason if isinstance(exc, LongjobsError)
                                   else f"{type(exc).__name__}: {exc}"})
            out.relaunched = stats.bundles_launched == 1
            out.spot_fallbacks = stats.spot_fallbacks
        return out
