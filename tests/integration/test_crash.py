"""A crash after each step of the tick: the next ticks converge, nothing lost, nothing twice.

Crashes are injected at the HTTP boundary (the proxy in front of moto): the step's AWS call is
carried out and then the caller gets an error, exactly as if the process died right after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from dispatcher.ops.client import JobClient
from dispatcher.ports.table import Set, Update
from dispatcher.store import codec as r
from dispatcher.testing.workload import run_until_drained
from dispatcher.wiring import pipeline
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws
from tests.helpers import check_converged, ecs_tasks, wait_for

JOBS = [f"crash-{i}" for i in range(5)]
# (operation, calls of it to let through first) — the tick's effects for 5 long jobs:
# TransactWriteItems #1 records; then, at once, DeleteMessageBatch deletes the messages while
# TransactWriteItems #2 begins the launch, RunTask starts the tasks, TransactWriteItems #3
# assigns them.
CRASH_POINTS = {
    "after-record": ("dynamodb.TransactWriteItems", 0),
    "after-delete": ("sqs.DeleteMessageBatch", 0),
    "after-begin-launch": ("dynamodb.TransactWriteItems", 1),
    "after-runtask": ("ecs.RunTask", 0),
    "after-assign": ("dynamodb.TransactWriteItems", 2),
}


def eventually(check: Callable[[], None], timeout: float = 120.0) -> None:
    """Retry ``check`` until it stops raising AssertionError: wait on the condition, not a
    fixed time (a loaded machine makes fixed sleeps flaky)."""
    def holds() -> bool:
        try:
            check()
        except AssertionError:
            return False
        return True

    try:
        wait_for(holds, timeout, "the check")
    except AssertionError:
        check()  # the check's own failure says what is missing
        raise


# The tick receives with this visibility timeout: undeleted messages come back after it.
HOLD = {"LONGJOBS_HOLD_SECONDS": "2"}


def _tick_and_check(aws: Aws) -> None:
    run_until_drained(pipeline.aws_tick(aws.config(**HOLD)))
    check_converged(aws, JOBS)


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_crash_after_each_step_converges(aws: Aws, point: str) -> None:
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": j} for j in JOBS])
    operation, skip = CRASH_POINTS[point]
    aws.proxy.inject_error(operation, after_forward=True, skip=skip)
    try:
        pipeline.aws_tick(aws.config(**HOLD)).tick()
    except Exception as exc:  # the crash: whatever the step raised ends this tick
        code = getattr(exc, "cause_response_code", None) or repr(exc)
        assert "InjectedCrash" in code
    # Undeleted messages come back after their 2 s visibility timeout: tick until converged.
    eventually(lambda: _tick_and_check(aws))
    assert len(ecs_tasks(aws.proxy.url, aws.env["LONGJOBS_CLUSTER"])) == len(JOBS)


def test_expired_lease_of_a_dead_tick_is_taken_over(aws: Aws) -> None:
    store = open_store(aws.env["LONGJOBS_TABLE"])
    JobClient().submit("k", {}, job_id="after-lease")
    blocked = pipeline.aws_tick(aws.config())
    # A tick that died without releasing its lease. Its expiry is set by hand below, not waited
    # for: a short lease could run out before the blocked tick looks on a loaded machine.
    assert store.acquire_lease("crashed-tick", 3600)
    assert blocked.tick().skipped
    store.table.write(Update(r.LEASE_KEY, [Set("lease_until", time.time() - 1)]))
    decision = pipeline.aws_tick(aws.config()).tick()
    assert not decision.skipped  # the dead tick's lease has expired: taken over
    assert decision.launch.bundles_launched == 1
