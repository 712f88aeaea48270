"""The job and bundle state machine: the only place that knows which transitions are legal.

Every state change in longjobs is a conditional write: the Store roles
(:mod:`dispatcher.store`) check the transition here first, then build the write's
condition (the item must still be in the state the writer believes it is in, plus any fence).
A writer with a stale view loses the write instead of overwriting someone else's decision.

A bundle too large for one transaction is written RECORDING first and committed to PENDING by
its last transaction; only PENDING bundles are launched, so a recording cut short never runs.

Budgets. No job can be relaunched forever: a task stop that leads to a rerun charges the job
that was running when its task stopped one of its ``max_attempts`` (application: its code ended
the process), or the infrastructure budget (``LONGJOBS_MAX_INFRA_ATTEMPTS``: Spot, host loss, a
task that never claimed its bundle, a stop nobody asked for). A bundle's first task buffers its
jobs' starts and results (:func:`writes_through` is false): a start may be written with another
job's result while the job's own result is still buffered, so a job recorded RUNNING at the stop
may have finished already, and one that runs may not be recorded at all. Such a stop names
nobody: a job recorded RUNNING is charged the infrastructure budget, not an attempt, and the
bundle reruns one job at a time; with none recorded RUNNING nobody is charged. Every later task
of that bundle writes each start and result at once, so its stops are charged to the job that
ran; a later task that stopped with no job running and recorded nothing at all charges its first
unfinished job. If several jobs were recorded running (a task runs jobs at once), the one that
ended the process cannot be named either: each is charged the infrastructure budget instead,
and the bundle reruns one job at a time from then on, so the next such stop names it. A job
that kills its task thus fails within ``max_attempts`` + 1 launches (the first, which names
nobody, then one per attempt), + 1 more when it ran beside other jobs at its first written-
through launch (the launch that makes its bundle run one job at a time); its bundle-mates spend
no attempt. Every path that gives back a job that ran spends a budget: a runner that gives it
back (after SIGTERM, or a handler that raised ``Interrupted``) counts its infrastructure
attempt itself and leaves its bundle to its task's stop, whose settle fails the job once that
budget is spent; a retryable failure spends an attempt. A user stop (a timeout longjobs
enforced with StopTask) reruns nothing.

Live runs. No two runs of one job are alive at once. A handler that ignores its cancellation
cannot be killed (a thread), and a job failed as overdue by reconciliation may still run in its
task while the task runs on for its bundle-mates: the job is recorded with that task's ARN
(``Job.live_task``). A retry of such a job records its new bundle as PENDING but due at
:data:`HELD_AT` (never), and the tick's reconciliation releases it, due at once, when
DescribeTasks reports that task stopped (or forgotten by ECS). Waiting for the task is what an
operator expects of a retry: the run it replaces may still be writing its outputs.
"""

from __future__ import annotations

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import IllegalTransition
from dispatcher.domain.jobs import JobState

J, B = JobState, BundleState

# The due time of a retried job's bundle while a run of the job may still be alive elsewhere
# (9999-12-31T23:59:59Z, the last second an ISO-8601 index key can carry): the tick's read of
# due bundles never reaches it, and reconciliation finds such bundles at it.
HELD_AT = 253_402_300_799.0


def writes_through(attempt: int, jobs: int) -> bool:
    """Whether a bundle's task on launch ``attempt`` writes each start and result at once (a
    bundle of one job, and every launch after the first), or buffers them (the first launch of
    several jobs). The runner and the stop's budget rule both follow this."""
    return attempt > 1 or jobs == 1


JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    J.PENDING: frozenset({J.RUNNING, J.CANCELLED, J.FAILED}),
    J.RUNNING: frozenset({J.SUCCEEDED, J.FAILED, J.PENDING, J.CANCELLED}),
    J.SUCCEEDED: frozenset(),
    J.FAILED: frozenset({J.PENDING}),  # explicit retry with a fresh budget
    J.CANCELLED: frozenset({J.PENDING}),  # explicit retry
    J.REJECTED: frozenset(),
}

BUNDLE_TRANSITIONS: dict[BundleState, frozenset[BundleState]] = {
    B.RECORDING: frozenset({B.PENDING, B.DONE}),  # committed (DONE: every job a duplicate)
    B.PENDING: frozenset({B.LAUNCHING, B.DONE}),
    B.LAUNCHING: frozenset({B.LAUNCHED, B.PENDING}),
    B.LAUNCHED: frozenset({B.RUNNING, B.PENDING, B.DONE}),
    B.RUNNING: frozenset({B.DONE, B.PENDING}),
    B.DONE: frozenset(),
}


def check_job(job_id: str, source: JobState, target: JobState) -> None:
    if target not in JOB_TRANSITIONS[source]:
        raise IllegalTransition(f"job cannot go from {source} to {target}", job_id=job_id)


def check_bundle(bundle_id: str, source: BundleState, target: BundleState) -> None:
    if target not in BUNDLE_TRANSITIONS[source]:
        raise IllegalTransition(f"bundle {bundle_id} cannot go from {source} to {target}")
