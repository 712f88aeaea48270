"""Reconciliation, every tick: events can be lost, and DescribeTasks forgets stopped tasks after
about an hour, so the table is checked against ECS instead of trusting the event stream.

Suspects are bundles launched but not claimed a minute after their launch, and running bundles
whose heartbeat is older than four intervals. Their tasks are described (<=100 per call): a task
that is STOPPED or unknown to ECS is handled exactly as its STOPPED event would be (a launch
recovered after a crashed tick may find its tasks long gone: they waited for an assignment that
came too late); one that ECS reports running but that never claimed its bundle within the start
timeout, or that stopped heartbeating, is stopped (StopTask), and rerun once it has stopped (its
event, or the next tick's look), so two runs of a job never overlap: a task that only seems dead
may still be finishing a handler.

It also releases retries that wait for an earlier run of their job (:meth:`Reconciler.held`):
a bundle held by ``jobs retry`` becomes due once DescribeTasks reports the job's
``live_task`` stopped or forgotten (or the task's stop event ended it), and the same tick
launches it like any due bundle, when its priority's share and capacity allow.

What it does not find: a task that ended normally (its last bundle DONE) whose stop event was
lost. Its jobs' states are written (the runner wrote them), its slot is free (a DONE bundle is
not active) and its live runs are judged by DescribeTasks when a retry needs it; only its stop's
``JobsSucceeded``/``JobsFailed`` are never published, and for a task that ran follow-ons that is
every job it ran (the pointer's counts too). A task found stopped with its last bundle LAUNCHED
or RUNNING does report them (``succeeded_before``/``failed_before`` of its outcome). Left so
(docs/design.md, "Lost events"): finding them needs a read of every tick over the recently DONE
bundles, which a large drain's takes fill with thousands that are not a task's last, for a
dashboard rate (the counts of ``jobs stats`` are the index's, right whatever events are lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES
from dispatcher.domain.stops import USER_STOP_PREFIX, LastStatus, StopCode, TaskStop
from dispatcher.ports.launcher import Launcher
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.dependents import Dependents, DependentsStats
from dispatcher.stages.policy import ReconcilePolicy
from dispatcher.stages.rerun import Reruns, StopOutcome, StopResult
from dispatcher.store import StageStore

log = logging.getLogger(__name__)

HEARTBEAT_MISSES = 4
# A launched bundle's task is looked at this long after its launch if it has not claimed it
# (Fargate starts a task in about 30-60 s); it is stopped only after the start timeout.
LOOK_AFTER_SECONDS = 60.0
# The runner fails a job at its timeout itself; the tick steps in only after this much more.
TIMEOUT_MARGIN_SECONDS = 5.0
# Not USER_STOP_PREFIX: that marks a stop longjobs asked for (cancel/timeout), never rerun.
STUCK_REASON = "longjobs-reconcile: task stopped heartbeating; rerun elsewhere"


@dataclass
class ReconcileStats(DependentsStats):
    """What reconciliation did; as :class:`DependentsStats`, the held jobs it released or
    cancelled (retries, and dependents at its look at every one)."""

    checked: int = 0
    stopped_found: int = 0
    stuck_stopped: int = 0
    timed_out: list[str] = field(default_factory=list)
    outcomes: list[StopOutcome] = field(default_factory=list)

    @property
    def freed(self) -> int:
        """Active bundles this reconciliation ended for good (settled or finished, not
        relaunched): the capacity it gave back. An ignored stop frees nothing."""
        return len(self.freed_bundles)

    @property
    def freed_bundles(self) -> set[str]:
        """The ids of those bundles: they no longer hold a task slot, nor their kind's."""
        return {o.bundle_id for o in self.outcomes
                if o.result != StopResult.IGNORED and not o.relaunched and o.bundle_id}


class Reconciler:
    def __init__(self, store: StageStore, launcher: Launcher, reruns: Reruns,
                 policy: ReconcilePolicy, clock: Callable[[], float],
                 dependents: Dependents) -> None:
        self._store = store
        self._dependents = dependents
        self._launcher = launcher
        self._reruns = reruns
        self._policy = policy
        self._clock = clock

    def suspects(self, active: list[Bundle]) -> list[Bundle]:
        t = self._clock()
        look = t - min(LOOK_AFTER_SECONDS, self._policy.start_timeout_seconds)
        silent = t - HEARTBEAT_MISSES * self._policy.heartbeat_seconds
        return [b for b in active if b.task_arn and (
            (b.state == BundleState.LAUNCHED and b.updated_at <= look)
            or (b.state == BundleState.RUNNING and (b.heartbeat_at or 0) < silent))]

    def run(self, active: list[Bundle], stats: ReconcileStats) -> None:
        suspects = self.suspects(active)
        if not suspects:
            return
        stats.checked += len(suspects)
        by_arn: dict[str, Bundle] = {b.task_arn: b for b in suspects if b.task_arn}
        unclaimed = self._clock() - self._policy.start_timeout_seconds
        for status in self._launcher.describe(list(by_arn)):
            bundle = by_arn[status.task_arn]
            if status.last_status.gone:
                stats.stopped_found += 1
                never_known = status.last_status == LastStatus.MISSING
                stop = TaskStop(status.task_arn, status.stop_code or (
                    StopCode.TASK_FAILED_TO_START if never_known else None),
                    status.stopped_reason or f"found {status.last_status} by reconciliation "
                    "(its event was lost)", status.exit_code,
                    status.bill.stopped_at if status.bill else None, status.bill)
            elif bundle.state == BundleState.LAUNCHED and bundle.updated_at > unclaimed:
                continue  # alive and not claimed yet: within its start timeout
            elif status.last_status == LastStatus.RUNNING or bundle.state == BundleState.RUNNING:
                stats.stuck_stopped += 1
                self._launcher.stop(status.task_arn, STUCK_REASON)
                continue  # rerun when it is STOPPED, not while it may still be running
            else:
                continue  # still provisioning: Fargate can take a while; look again next tick
            try:
                outcome = self._reruns.on_stop(stop)
            except TableUnavailable as exc:
                # The table refused this settle (after the store's retries): one task's stop is
                # no reason to fail the tick and hold up every other job; it is found again by
                # the next tick's look (and its event, if one comes, is retried by Lambda).
                log.error("reconciling a task failed; the next tick looks again",
                          extra={"task_arn": stop.task_arn, "reason": exc.reason})
                continue
            stats.outcomes.append(outcome)
            log.warning("reconciled a task", extra=outcome.as_dict())

    def timeouts(self, active: list[Bundle], stats: ReconcileStats) -> None:
        """Jobs past ``timeout_seconds`` that their runner did not stop: fail them, and stop
        the task if nothing else of its bundle is left to run. Only while some active bundle
        may hold a job with a timeout (its ``timeout_seconds``: not 0, or not known): a job runs
        only in a task, and a task holds an active bundle from its launch to its exit, whose
        stop settles the jobs it left RUNNING; so a tick whose tasks run no job with a
        timeout, or an idle one, reads none of the running index's nine partitions. (A job
        whose last write the table refused may stay RUNNING after its task ended its bundle:
        its task's stop event settles it.)"""
        if all(b.timeout_seconds == 0 for b in active):
            return
        t = self._clock()
        margin = TIMEOUT_MARGIN_SECONDS + 2 * self._policy.heartbeat_seconds
        by_id = {b.bundle_id: b for b in active}
        for job in self._store.running_jobs(overdue_by=t - margin):
            started = job.history[-1].get("started_at") if job.history else None
            if not job.timeout_seconds or started is None \
                    or t < float(started) + job.timeout_seconds + margin:
                continue
            try:
                self._store.fail_overdue(
                    job, f"timed out after {job.timeout_seconds:g} s (its runner did not stop "
                    "it)")
            except ConflictError:
                continue
            except TableUnavailable as exc:  # as above: the next tick looks again
                log.error("failing an overdue job failed; the next tick looks again",
                          extra={"job_id": job.job_id, "reason": exc.reason})
                continue
            stats.timed_out.append(job.job_id)
            bundle = by_id.get(job.bundle_id or "")
            if bundle is None or not bundle.task_arn:
                continue
            others = [j for j in self._store.get_jobs(self._store.job_ids_of(bundle))
                      if j.job_id != job.job_id and j.bundle_id == bundle.bundle_id
                      and j.state not in TERMINAL_JOB_STATES]
            if not others:
                self._launcher.stop(bundle.task_arn,
                                    f"{USER_STOP_PREFIX} job {job.job_id} timed out")

    def after_drain(self, stats: ReconcileStats) -> None:
        """The jobs the drain recorded to wait for others recorded after them in it: linked
        to those now (stages/dependents.py)."""
        self._dependents.link_late(stats)

    def held(self, stats: ReconcileStats) -> None:
        """Release the held retries: those held for a run that may still be alive (lifecycle,
        "Live runs"), each due once its job's ``live_task`` is STOPPED or unknown to ECS
        (DescribeTasks forgets a task about an hour after it stopped). A held bundle whose job
        no longer names a task (or left it) and waits for no dependency is due now. Jobs that
        wait for dependencies are released by those (stages/dependents.py); this looks at all
        of them only once per SWEEP_SECONDS."""
        self._dependents.sweep(stats)
        bundles = {b.bundle_id: b for b in self._store.held_bundles()}
        waiting = [(bundles[j.bundle_id], j) for j in self._store.get_jobs(
            [i for b in bundles.values() for i in self._store.job_ids_of(b)])
            if j.bundle_id in bundles]
        # Dependents held here by an earlier release (before they were held apart).
        waiting = self._dependents.judge(waiting, stats)
        arns = sorted({j.live_task for _, j in waiting if j.live_task})
        gone = {s.task_arn for s in self._launcher.describe(arns) if s.last_status.gone} \
            if arns else set()
        for bundle, job in waiting:
            if job.live_task and job.live_task not in gone:
                continue  # its earlier run may still be alive: look again next tick
            try:
                self._store.release_held(bundle, job)
            except ConflictError:
                continue  # cancelled or changed meanwhile
            except TableUnavailable as exc:  # as above: the next tick looks again
                log.error("releasing a held retry failed; the next tick looks again",
                          extra={"job_id": job.job_id, "reason": exc.reason})
                continue
            stats.released.append(job.job_id)
