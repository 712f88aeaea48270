"""A bulk action over an array job's parent: it must act as ``jobs cancel|retry`` of the one
parent does (dispatcher/store/array_ops.py), not as on a plain job; and a retry of a child
the parent counts ended must not leave the parent counting it so."""

from __future__ import annotations

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.store import Fence, JobUpdate
from dispatcher.store import codec as r
from tests.twins import Twins


def cancelled_array(twins: Twins, job_id: str) -> None:
    twins.client().submit("k", {}, job_id=job_id, array_size=2)
    twins.stages().tick.tick()  # records the parent and its children
    twins.client().cancel(job_id)
    parent = twins.job(job_id)
    assert parent is not None and parent.state == JobState.CANCELLED


def test_a_single_retry_of_a_cancelled_array_reopens_it(twins: Twins) -> None:
    cancelled_array(twins, "a1")
    twins.client().retry("a1")
    parent = twins.job("a1")
    assert parent is not None and parent.bundle_id is None
    assert r.array_key("a1") in twins.table.snapshot()  # the ticks settle it again


def test_a_bulk_retry_of_a_cancelled_array_reopens_it_as_a_single_retry_does(
        twins: Twins) -> None:
    cancelled_array(twins, "a1")
    report = twins.client().bulk_retry(status="CANCELLED")
    assert report.errors == 0
    parent = twins.job("a1")
    assert parent is not None and parent.bundle_id is None
    assert r.array_key("a1") in twins.table.snapshot()


def test_a_retry_of_an_arrays_settled_child_is_refused_or_reopens_its_array(
        twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="a1", array_size=2, max_attempts=1)
    twins.stages().tick.tick()
    twins.stages().tick.tick()  # its children recorded and launched, in one bundle
    child = twins.job("a1:0")
    assert child is not None and child.bundle_id
    bundle = twins.bundle(child.bundle_id)
    assert bundle is not None and bundle.task_arn
    fence = Fence(bundle.bundle_id, bundle.attempt, bundle.task_arn)
    twins.store.claim(fence)
    twins.store.apply(fence, [JobUpdate(c, JobState.PENDING, JobState.FAILED,
                                        via=JobState.RUNNING, attempts_delta=1)
                              for c in ("a1:0", "a1:1")], bundle_to=BundleState.DONE)
    twins.stages().tick.tick()  # the parent reads its children's ends
    parent = twins.job("a1")
    assert parent is not None and parent.state == JobState.FAILED
    try:
        twins.client().retry("a1:0")
    except LongjobsError:
        return  # refused: retry the array instead
    parent = twins.job("a1")
    assert parent is not None and parent.state not in TERMINAL_JOB_STATES
    assert r.array_key("a1") in twins.table.snapshot()
