"""What happens to a bundle whose task stopped: rerun its unfinished jobs, or fail them.

Stops are classified, because they cost different budgets:
- infrastructure (Spot, host failure, never started, never claimed, SIGTERM-interrupted jobs):
  rerun without spending the job's ``max_attempts``; a separate, larger budget is spent;
- application (non-zero exit, OOM 137, while a job ran): spend an attempt;
- user (a stop longjobs requested for a cancel or a timeout): no rerun.
Unfinished jobs go back to PENDING and the bundle is relaunched at once, through the same
launch code as the tick.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.ports.store import JobUpdate
from dispatcher.stages.launch import Launches, LaunchStats

INFRA_STOP_CODES = {"SpotInterruption", "TerminationNotice", "ServiceSchedulerInitiated",
                    "TaskFailedToStart", "InfrastructureHealth"}
# StopTask reasons longjobs itself gives start with this, so its own stops are recognisable.
USER_STOP_PREFIX = "longjobs:"


class StopClass(StrEnum):
    INFRASTRUCTURE = "infrastructure"
    APPLICATION = "application"
    USER = "user"


def classify(stop: TaskStop, bundle: Bundle, jobs: list[Job]) -> StopClass:
    if bundle.state == BundleState.LAUNCHED:
        return StopClass.INFRASTRUCTURE  # never claimed: no job code ran
    if stop.stop_code in INFRA_STOP_CODES:
        return StopClass.INFRASTRUCTURE
    if stop.stop_code == "UserInitiated":
        if (stop.stopped_reason or "").startswith(USER_STOP_PREFIX):
            return StopClass.USER
        return StopClass.INFRASTRUCTURE  # an operator or a drain stopped it, not the job
    running = any(j.state == JobState.RUNNING for j in jobs)
    if running and stop.exit_code not in (None, 0):
        return StopClass.APPLICATION
    return StopClass.INFRASTRUCTURE


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


class Reruns:
    def __init__(self, launches: Launches) -> None:
        self.launches = launches
        self._cfg, self._store = launches.cfg, launches.store
        self._launcher, self._clock = launches.launcher, launches.clock

    def decide(self, stop: TaskStop, bundle: Bundle,
               jobs: list[Job]) -> tuple[StopClass, list[JobUpdate], list[str]]:
        cls = classify(stop, bundle, jobs)
        t = self._clock()
        why = (f"task stopped: {stop.stop_code or 'unknown stop code'}"
               f" (exit {stop.exit_code}): {stop.stopped_reason or 'no reason given'}")
        updates, rerun = [], []
        for job in jobs:
            if job.state in TERMINAL_JOB_STATES or job.bundle_id != bundle.bundle_id:
                continue  # finished, or retried into another bundle
            u = JobUpdate(job.job_id, job.state, JobState.PENDING,
                          history=_history(job, stop, cls, t) if job.state == JobState.RUNNING
                          else None)
            if cls == StopClass.USER:
                u.target, u.reason = JobState.CANCELLED, f"stopped by longjobs: {why}"
            elif job.state == JobState.RUNNING and cls == StopClass.APPLICATION:
                if job.attempts >= job.max_attempts:
                    u.target, u.reason = JobState.FAILED, f"out of attempts; last {why}"
                    u.error = {"type": "TaskStopped", "message": why}
            elif job.state == JobState.RUNNING or bundle.state == BundleState.LAUNCHED:
                # Infrastructure: give the attempt back, spend the infrastructure budget.
                u.attempts_delta = -1 if job.state == JobState.RUNNING else 0
                u.infra_delta = 1
                if job.infra_attempts + 1 > self._cfg.max_infra_attempts:
                    u.target, u.reason = JobState.FAILED, f"infrastructure budget spent; {why}"
            if u.target == u.source and u.attempts_delta == 0 and u.infra_delta == 0 \
                    and u.history is None:
                rerun.append(job.job_id)  # untouched PENDING job: it just reruns
                continue
            updates.append(u)
            if u.target == JobState.PENDING:
                rerun.append(job.job_id)
        return cls, updates, rerun

    def on_stop(self, stop: TaskStop) -> dict[str, Any]:
        bundle = self._store.bundle_for_task(stop.task_arn)
        if bundle is None:
            return {"ignored": "no bundle was assigned to this task"}
        if bundle.task_arn == stop.task_arn and bundle.state == BundleState.DONE:
            # The normal end of a task: nothing to rerun; report its jobs' outcomes (metrics).
            jobs = [j for j in self._store.get_jobs(bundle.job_ids)
                    if j.bundle_id == bundle.bundle_id]
            return {"finished": bundle.bundle_id, "bundle_id": bundle.bundle_id,
                    "succeeded": [j.job_id for j in jobs if j.state == JobState.SUCCEEDED],
                    "failed": [j.job_id for j in jobs if j.state == JobState.FAILED]}
        if bundle.task_arn != stop.task_arn or bundle.state not in (
                BundleState.LAUNCHED, BundleState.RUNNING):
            return {"ignored": f"stale event: bundle {bundle.bundle_id} is {bundle.state} "
                               f"on attempt {bundle.attempt}", "bundle_id": bundle.bundle_id}
        jobs = self._store.get_jobs(bundle.job_ids)
        cls, updates, rerun = self.decide(stop, bundle, jobs)
        target = BundleState.PENDING if rerun else BundleState.DONE
        try:
            self._store.settle(bundle, updates, target, retry_at=self._clock())
        except ConflictError as exc:
            return {"ignored": exc.reason, "bundle_id": bundle.bundle_id}
        out: dict[str, Any] = {"bundle_id": bundle.bundle_id, "stop_class": str(cls),
                               "rerun": rerun, "relaunched": False,
                               "failed": [u.job_id for u in updates
                                          if u.target == JobState.FAILED]}
        if rerun:
            stats = LaunchStats()
            self.launches.launch([bundle], self._launcher.resolve_task_definition(), stats)
            out["relaunched"] = stats.bundles_launched == 1
        return out
