"""The job and bundle state machine: the only place that knows which transitions are legal.

Every state change in longjobs is a conditional write: the Store roles
(:mod:`dispatcher.store`) check the transition here first, then build the write's
condition (the item must still be in the state the writer believes it is in, plus any fence).
A writer with a stale view loses the write instead of overwriting someone else's decision.

A bundle too large for one transaction is written RECORDING first and committed to PENDING by
its last transaction; only PENDING bundles are launched, so a recording cut short never runs.

Budgets. No job can be relaunched forever: what a task's early stop charges each job of its
bundle, and when a job fails for it, is the stop policy (:mod:`dispatcher.domain.stop_policy`);
a bundle's first launch buffers its writes (:func:`writes_through`), which that policy follows.

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
# The due time of a job's bundle while the job waits for its dependencies: never either, one
# second before HELD_AT, so that the tick reads the few held retries every tick (a query from
# HELD_AT on) without the many jobs that may wait for others (released by their dependencies'
# ends, :mod:`dispatcher.stages.dependents`, and looked at all together only now and then).
DEPENDENTS_HELD_AT = HELD_AT - 1.0
# No due time a producer can set reaches these: the latest not_before the schema accepts
# (dispatcher.domain.message.MAX_NOT_BEFORE) is derived to lie below them.
HELD_TIMES = (HELD_AT, DEPENDENTS_HELD_AT)


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
    # LAUNCHED at once: a follow-on taken by a running task (dispatcher.store.follow_ons).
    B.PENDING: frozenset({B.LAUNCHING, B.LAUNCHED, B.DONE}),
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
