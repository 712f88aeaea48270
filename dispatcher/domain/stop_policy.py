"""The stop policy: what a task's early stop does to each unfinished job of its bundle.

One pure function, :func:`decide`, beside the rules it implements: the stop's class
(:func:`dispatcher.domain.stops.classify`: which budget it spends) and the budgets below. The
observe-stop stage (:mod:`dispatcher.stages.rerun`) only reads the bundle and its jobs, calls
it, and writes what it returns (the store's settle, conditional on the bundle as read).

Budgets. No job can be relaunched forever: a task stop that leads to a rerun charges the job
that was running when its task stopped one of its ``max_attempts`` (application: its code ended
the process), or the infrastructure budget (``LONGJOBS_MAX_INFRA_ATTEMPTS``: Spot, host loss, a
task that never claimed its bundle, a stop nobody asked for). A bundle's first task buffers its
jobs' starts and results (:func:`~dispatcher.domain.lifecycle.writes_through` is false): a
start may be written with another job's result while the job's own result is still buffered,
so a job recorded RUNNING at the stop may have finished already, and one that runs may not be
recorded at all. Such a stop names nobody: a job recorded RUNNING is charged the
infrastructure budget, not an attempt, and the bundle reruns one job at a time; with none
recorded RUNNING nobody is charged. Every later task of that bundle writes each start and
result at once, so its stops are charged to the job that ran; a later task that stopped with
no job running and recorded nothing at all charges its first unfinished job. If several jobs
were recorded running (a task runs jobs at once), the one that ended the process cannot be
named either: each is charged the infrastructure budget instead, and the bundle reruns one
job at a time from then on, so the next such stop names it.

A job that kills its task thus fails within ``max_attempts + 1`` launches of its bundle: the
first launch, which names nobody, then one per attempt. Only a task that runs several jobs at
once (``LONGJOBS_TASK_CONCURRENCY`` above 1) may take one launch more: the written-through
launch where the job ran beside others, which names nobody either and makes its bundle run one
job at a time. Its bundle-mates spend no attempt. Every path that gives back a job that ran
spends a budget: a runner that gives it back (after SIGTERM, or a handler that raised
``Interrupted``) counts its infrastructure attempt itself and leaves its bundle to its task's
stop, whose settle fails the job once that budget is spent; a retryable failure spends an
attempt. A user stop (a timeout longjobs enforced with StopTask) reruns nothing: its jobs are
CANCELLED.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.stops import StopClass, TaskStop, classify


@dataclass(frozen=True)
class JobFate:
    """What one stop does to one job: rerun (``target`` PENDING), fail with ``reason``
    (FAILED), or cancel (CANCELLED, a stop longjobs asked for); with the budgets it charges."""

    job_id: str
    source: JobState
    target: JobState
    attempts_delta: int = 0  # -1: an attempt given back (the stop was not the job's doing)
    infra_delta: int = 0  # 1: the infrastructure budget charged
    reason: str | None = None
    error: dict[str, Any] | None = None
    history: list[dict[str, Any]] | None = None  # the job's history with the stop in it


@dataclass(frozen=True)
class Settlement:
    """What a stop does to its bundle's jobs (:func:`decide`). Jobs finished before the stop
    are left as they are; so is an unfinished job that only reruns (in ``rerun``, not in
    ``fates``)."""

    stop_class: StopClass
    fates: list[JobFate]  # the jobs whose item changes
    rerun: list[str]  # job ids back to PENDING (changed or not): the bundle reruns if any
    # Several jobs were running when the task died of one of them: rerun the bundle one job
    # at a time (its ``slots`` set to 1), so that the next such stop names the job.
    serial: bool = False


def decide(stop: TaskStop, bundle: Bundle, jobs: list[Job], *, max_infra_attempts: int,
           at: float) -> Settlement:
    """What ``stop`` does to the jobs of ``bundle`` (as read when the stop is handled).

    Every stop that leads to a rerun charges a budget (see Budgets above): the job that was
    running (an application attempt), else the infrastructure budget of the jobs it
    interrupted. If several jobs were running (a task running jobs at once) when its process
    ended, which of them ended it cannot be told: each is charged the infrastructure budget,
    not an attempt, and the bundle reruns serially so that the next such stop names the job.
    The same holds for any job recorded running by a task that buffered its writes (a
    bundle's first launch): it may have finished already. A job is never rerun past its
    infrastructure budget (``max_infra_attempts``), however it was interrupted (a runner
    that gave a job back, after SIGTERM or a raised Interrupted, counted it already).

    A claimed bundle with no job recorded RUNNING and nothing recorded by its task charges,
    from its second launch on, its first unfinished job: each rerun then either follows
    progress (a job of the bundle finished) or costs a budget.

    A large bundle's settle takes several transactions; one that died part-way is handled
    again from the jobs as they are then. The jobs it settled carry this task's ARN
    (``settled_by``): they are charged nothing more, and one that was running at the stop
    (its history entry carries the stop) still counts as running for the stop's class.
    ``at``: now, for the history entry of a stop that gives no time."""
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
    recorded = any(j.history and j.history[-1].get("task_arn") == stop.task_arn for j in ours)
    unattributed = bundle.state == BundleState.RUNNING and bool(mine) and not running \
        and not recorded
    charged = {j.job_id for j in running}
    # One of several running jobs ended the process: blame none of them, serialize. So too a
    # task that buffered its writes: a job it recorded RUNNING (its start written with a
    # mate's result) may have returned already, its result still buffered, when a later job
    # killed the process.
    buffered = not lifecycle.writes_through(bundle.attempt, len(bundle.job_ids))
    ambiguous = cls == StopClass.APPLICATION and (len(running) > 1
                                                  or (buffered and bool(running)))
    if bundle.state == BundleState.LAUNCHED:
        charged = {j.job_id for j in mine}  # never claimed: each job lost a launch
    elif unattributed and bundle.attempt > 1:
        # This task wrote every start and result at once (a rerun): its first unfinished job
        # is the one it was at or about to run. On a first launch starts and results were
        # buffered, so finished bundle-mates look unfinished too: charge nobody, and let the
        # rerun (which writes through) attribute the next stop.
        charged = {mine[0].job_id}
    why = stop.describe()
    fates: list[JobFate] = []
    rerun: list[str] = []
    for job in mine:
        if job.job_id in settled:
            rerun.append(job.job_id)  # requeued by this stop's earlier, interrupted settle
            continue
        fate = _fate(job, stop, cls, why, at, ambiguous=ambiguous,
                     charged=job.job_id in charged, max_infra_attempts=max_infra_attempts)
        if fate is None:
            rerun.append(job.job_id)  # untouched PENDING job: it just reruns
            continue
        fates.append(fate)
        if fate.target == JobState.PENDING:
            rerun.append(job.job_id)
    return Settlement(cls, fates, rerun, serial=ambiguous and bool(rerun))


def _fate(job: Job, stop: TaskStop, cls: StopClass, why: str, at: float, *, ambiguous: bool,
          charged: bool, max_infra_attempts: int) -> JobFate | None:
    """One unfinished job's fate, or None when the stop changes nothing on its item."""
    target, reason, error = JobState.PENDING, None, None
    attempts_delta = infra_delta = 0
    history = _history(job, stop, cls, at) if job.state == JobState.RUNNING else None
    if cls == StopClass.USER:
        target, reason = JobState.CANCELLED, f"stopped by longjobs: {why}"
    elif job.state == JobState.RUNNING and cls == StopClass.APPLICATION and not ambiguous:
        if job.attempts >= job.max_attempts:
            target, reason = JobState.FAILED, f"out of attempts; last {why}"
            error = {"type": "TaskStopped", "message": why}
    elif charged:
        # Infrastructure: give the attempt back, spend the infrastructure budget.
        attempts_delta = -1 if job.state == JobState.RUNNING else 0
        infra_delta = 1
    if target == JobState.PENDING and job.infra_attempts + infra_delta > max_infra_attempts:
        # A job its runner gave back (interrupted) says why in its own reason.
        gave_back = job.state == JobState.PENDING and bool(job.reason) and \
            bool(job.history) and job.history[-1].get("task_arn") == stop.task_arn
        target, reason = JobState.FAILED, f"infrastructure budget spent; {why}" + (
            f"; its last run: {job.reason}" if gave_back else "")
        error = {"type": "TaskStopped", "message": why}
    if target == job.state and attempts_delta == 0 and infra_delta == 0 and history is None:
        return None
    return JobFate(job.job_id, job.state, target, attempts_delta, infra_delta, reason, error,
                   history)


def _history(job: Job, stop: TaskStop, cls: StopClass, at: float) -> list[dict[str, Any]]:
    """The job's history with this stop in it: on the entry of its run on the stopped task,
    or as a new entry."""
    history = [dict(h) for h in job.history]
    entry = {"stopped_at": stop.stopped_at or at, "stop_code": stop.stop_code,
             "exit_code": stop.exit_code, "reason": stop.stopped_reason, "stop_class": str(cls),
             "task_arn": stop.task_arn}
    if history and history[-1].get("task_arn") == stop.task_arn:
        history[-1].update({k: v for k, v in entry.items() if v is not None})
    else:
        history.append(entry)
    return history
