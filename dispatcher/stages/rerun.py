"""Observe a stop, rerun: what happens to a bundle whose task stopped.

A task that ended its bundle (DONE) finished normally: :mod:`dispatcher.stages.finish` reports
it. A task that stopped early is settled: this stage reads the bundle and its jobs, asks the
stop policy (:func:`dispatcher.domain.stop_policy.decide`) what the stop does to each job,
writes that (the store's settle), and relaunches the bundle at once through the same launch
code as the tick (a bundle of a kind with a limit is left to the next tick, which counts the
kind's room; it keeps its place among the kind's due bundles). Duplicate, late and
out-of-order stops are harmless: one acts only if the bundle is still on that task ARN and
attempt (the store's settle is conditional on it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from dispatcher.domain import rate_limits, stop_policy
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.costs import TaskCost
from dispatcher.domain.errors import ConflictError, LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import StopClass, TaskStop
from dispatcher.domain.tenant_shares import DEFAULT
from dispatcher.ports.table import InvalidTransaction, TransactionCancelled
from dispatcher.stages.bills import Bills
from dispatcher.stages.finish import Finishes
from dispatcher.stages.launch import Launches, LaunchStats, launch_slots
from dispatcher.stages.policy import RerunPolicy
from dispatcher.stages.revision import Revisions
from dispatcher.store import JobUpdate, StageStore
from dispatcher.store.values import JobOutcomes, TaskPointer

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
    failed: list[str] = field(default_factory=list)  # job ids this stop's settle ended FAILED
    # FINISHED only: how the runner ended the jobs of the task's last bundle
    finished: JobOutcomes | None = None
    relaunched: bool = False
    spot_fallbacks: int = 0  # the relaunch went to on-demand FARGATE (no Spot capacity)
    launch_failures: int = 0  # the relaunch's RunTask failures (the next tick retries them)
    # The task stopped before its runner claimed the bundle: no job ran on it (the image did
    # not pull, the container did not start, or the runner failed before its claim).
    never_started: bool = False
    reason: str | None = None  # why it was ignored, or left to the next tick
    # The jobs of the bundles the task ran before its last (the follow-ons it took,
    # dispatcher.store.follow_ons) that its runner ended SUCCEEDED and FAILED.
    succeeded_before: int = 0
    failed_before: int = 0
    # The task's bill, settled by this stop (None: no bill in the stop, or settled before).
    settlement: TaskCost | None = None
    # False when this stop left the jobs' runs on the task unsettled (its settle was refused
    # for a moment): their histories are not final, and its bill waits for a later look.
    runs_final: bool = True

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.finished is not None:  # its counts (the job-seconds are the settlement's)
            out["finished"] = {"succeeded": self.finished.succeeded,
                               "failed": self.finished.failed}
        out["settlement"] = None if self.settlement is None else {
            "cost": self.settlement.cost, "job_seconds": self.settlement.usage.seconds,
            "bill": self.settlement.bill.as_dict()}
        out["result"] = str(self.result)
        out["stop_class"] = str(self.stop_class) if self.stop_class else None
        return out


class Reruns:
    """The observe-stop stage: a task's stop is ignored (stale, duplicate, not ours), a normal
    finish (:class:`~dispatcher.stages.finish.Finishes`), or an early stop settled as the stop
    policy decides and relaunched at once (a bundle of a kind with a limit by the next tick,
    which counts the kind's room)."""

    def __init__(self, store: StageStore, revisions: Revisions, finishes: Finishes,
                 launches: Launches, policy: RerunPolicy, clock: Callable[[], float],
                 bills: Bills | None = None) -> None:
        self._store = store
        self._bills = bills or Bills(store, policy.prices)
        self._revisions = revisions
        self._finishes = finishes
        self._launches = launches
        self._policy = policy
        self._clock = clock

    def on_stop(self, stop: TaskStop) -> StopOutcome:
        pointer = self._store.task_pointer(stop.task_arn)
        if pointer is not None and pointer.ended is not None:
            # The normal end of a task, its outcomes and job-seconds counted by its runner: no
            # more to read; its bill is settled with the stop's mark.
            settlement = self._bills.vouched(stop, pointer)
            finished, billed = self._finishes.counted(pointer.bundle_id, stop.task_arn,
                                                      pointer.ended, settlement)
            out = self._finished(stop.task_arn, pointer.bundle_id, pointer.before, finished)
            out.settlement = settlement if billed else None
            if billed or settlement is not None:
                return out  # settled now, or before: nothing more to write
        else:
            out = self._handle(stop, pointer)
        if out.runs_final and out.settlement is None and stop.bill is not None:
            out.settlement = self._bills.settle(stop, pointer)
        return out

    def _handle(self, stop: TaskStop, pointer: TaskPointer | None) -> StopOutcome:
        arn = stop.task_arn
        bundle = self._store.get_bundle(pointer.bundle_id) if pointer is not None else None
        if pointer is None or bundle is None:
            return StopOutcome(StopResult.IGNORED, arn,
                               reason="no bundle was assigned to this task")
        before = pointer.before
        if bundle.task_arn == arn and bundle.state == BundleState.DONE:
            return self._finished(arn, bundle.bundle_id, before,
                                  self._finishes.report(bundle, arn))
        if bundle.task_arn != arn or bundle.state not in (BundleState.LAUNCHED,
                                                          BundleState.RUNNING):
            return StopOutcome(StopResult.IGNORED, arn, bundle.bundle_id,
                               reason=f"already handled: bundle {bundle.bundle_id} has moved "
                                      f"on since this task ran it (it is {bundle.state}, "
                                      f"attempt {bundle.attempt})")
        jobs = self._store.get_jobs(bundle.job_ids)
        # As read, before the settle; a follow-on taken by a task that ran bundles before it
        # (no launch of its own) is not a task that never started.
        never_started = bundle.state == BundleState.LAUNCHED and bundle.launch_id is not None
        settlement = stop_policy.decide(stop, bundle, jobs, at=self._clock(),
                                        max_infra_attempts=self._policy.max_infra_attempts)
        cls, rerun = settlement.stop_class, settlement.rerun
        updates = [JobUpdate(f.job_id, f.source, f.target, attempts_delta=f.attempts_delta,
                             infra_delta=f.infra_delta, history=f.history, error=f.error,
                             reason=f.reason, settled_by=arn) for f in settlement.fates]
        target = BundleState.PENDING if rerun else BundleState.DONE
        # Due as of when it was due before: if the tick is the one that launches it (a limited
        # kind, below, or a relaunch that failed), it launches due bundles oldest first, and a
        # rerun keeps its place.
        now = self._clock()
        due = min(now, bundle.next_attempt_at) if bundle.next_attempt_at else now
        # A kind with a limit, or a tenant with a cap: only the tick counts their room.
        limited = bundle.kind in self._policy.kind_limits
        capped = bundle.tenant is not None and rerun and not limited \
            and not rate_limits.takes_tokens(bundle.bundle_id) \
            and self._store.tenant_policies().get(bundle.tenant, DEFAULT).max_running \
            is not None
        try:
            overfull = self._store.settle(bundle, updates, target, retry_at=due,
                                          serial=settlement.serial)
        except (ConflictError, TransactionCancelled) as exc:
            # Someone else is moving this bundle (another event, the tick): nothing was written;
            # reconciliation looks again if it still needs handling.
            return StopOutcome(StopResult.IGNORED, arn, bundle.bundle_id, reason=exc.reason,
                               runs_final=False)
        except InvalidTransaction as exc:
            # The table refuses the settle for a reason not of one job's item (a job's is
            # failed alone by the settle): a stop event, and the tick whose reconciliation
            # calls this, must not fail for it. Logged; reconciliation looks again.
            log.error("the table refused a stop's settle", extra={
                "bundle_id": bundle.bundle_id, "task_arn": arn, "reason": exc.reason})
            return StopOutcome(StopResult.IGNORED, arn, bundle.bundle_id, reason=exc.reason,
                               runs_final=False)
        rerun = [j for j in rerun if j not in overfull]
        self._store.end_live_runs(arn, jobs)  # a run abandoned there is over now
        out = StopOutcome(StopResult.SETTLED, arn, bundle.bundle_id, cls, rerun=rerun,
                          failed=[u.job_id for u in updates
                                  if u.target == JobState.FAILED or u.job_id in overfull],
                          never_started=never_started, succeeded_before=before.succeeded,
                          failed_before=before.failed)
        if rerun and limited:
            # A kind with a limit: whether it has room now depends on its other bundles, which
            # only the tick counts (a stop here cannot tell a lowered limit, or a bundle that
            # counted no slot when it launched, from the room its own stop freed). The bundle
            # is PENDING and due: the next tick launches it when its kind has room.
            out.reason = f"kind {bundle.kind} has a limit: the next tick relaunches it"
        elif rerun and rate_limits.takes_tokens(bundle.bundle_id):
            # Its jobs take rate limits' tokens: only the tick takes them as it launches.
            out.reason = "its jobs take rate limits' tokens: the next tick relaunches it " \
                "once they are granted"
        elif rerun and capped:
            # Its tenant has a cap: likewise (a tick may have launched another of its bundles
            # into the room this stop freed).
            out.reason = f"tenant {bundle.tenant} has a cap: the next tick relaunches it"
        elif rerun and self._store.active_count() >= self._policy.max_running_tasks:
            # Its own slot is free now (settled), but the others fill the limit: it was
            # lowered since they launched. The tick launches it once one ends. (Three COUNT
            # queries, on an early stop only.)
            out.reason = (f"{self._policy.max_running_tasks} tasks run, the limit: the next "
                          "tick relaunches it when a slot frees")
        elif rerun:
            stats = LaunchStats()
            # Its slots are decided now, as the tick decides them (1 after an ambiguous stop).
            bundle.slots = launch_slots(bundle, self._policy.task_concurrency,
                                        self._policy.kind_limits)
            try:
                # The tick's pinned revision (reconciliation), or the deployed one.
                self._launches.launch([bundle], self._revisions.current(), stats)
            except Exception as exc:  # a refusal, or an AWS error after its retries
                # The settle is written: the bundle is PENDING and due now, and the next tick
                # launches it. Failing the event now would only retry a stale stop.
                log.warning("immediate relaunch failed; the next tick launches the bundle",
                            extra={"bundle_id": bundle.bundle_id,
                                   "reason": exc.reason if isinstance(exc, LongjobsError)
                                   else f"{type(exc).__name__}: {exc}"})
            out.relaunched = stats.bundles_launched == 1
            out.spot_fallbacks = stats.spot_fallbacks
            out.launch_failures = sum(stats.failures.values())
        return out

    @staticmethod
    def _finished(arn: str, bundle_id: str, before: JobOutcomes,
                  finished: JobOutcomes | None) -> StopOutcome:
        if finished is None:
            return StopOutcome(StopResult.IGNORED, arn, bundle_id,
                               reason="already handled: this task's stop was settled before")
        return StopOutcome(StopResult.FINISHED, arn, bundle_id, finished=finished,
                           succeeded_before=before.succeeded, failed_before=before.failed)
