"""The job and bundle state machine: the only place that knows which transitions are legal.

Every state change in longjobs is a conditional write: the Store roles
(:mod:`dispatcher.ports.store`) check the transition here first, then build the write's
condition (the item must still be in the state the writer believes it is in, plus any fence).
A writer with a stale view loses the write instead of overwriting someone else's decision.

A bundle too large for one transaction is written RECORDING first and committed to PENDING by
its last transaction; only PENDING bundles are launched, so a recording cut short never runs.

Budgets. No job can be relaunched forever: a task stop that leads to a rerun charges the job
that was running when its task stopped one of its ``max_attempts`` (application: its code ended
the process), or the infrastructure budget (``LONGJOBS_MAX_INFRA_ATTEMPTS``: Spot, host loss, a
task that never claimed its bundle, a stop nobody asked for). A bundle's first task buffers its
jobs' starts and results, so a stop may find no job recorded running: then nobody is charged,
and every later task of that bundle writes each start and result at once, so its stops are
charged to the job that ran; a later task that stopped with no job running and recorded nothing
at all charges its first unfinished job. If several jobs were recorded running (a task runs
jobs at once), the one that ended the process cannot be named: each is charged the
infrastructure budget instead, and the bundle reruns one job at a time from then on, so the next
such stop names it. A job that kills its task thus fails within ``max_attempts`` + 2 launches
(+ 1 at one job at a time), and its bundle-mates spend no attempt. However a job was
interrupted (a runner gives a job back after SIGTERM and counts it itself), it is never rerun
past its infrastructure budget. A user stop (a timeout longjobs enforced with StopTask) reruns
nothing.
"""

from __future__ import annotations

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import IllegalTransition
from dispatcher.domain.jobs import JobState

J, B = JobState, BundleState

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
