"""A bulk action over an array job's parent: it must act as ``jobs cancel|retry`` of the one
parent does (dispatcher/store/array_ops.py), not as on a plain job."""

from __future__ import annotations

import pytest

from dispatcher.domain.jobs import JobState
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


@pytest.mark.xfail(strict=True, reason="OperatorStore.retry_page retries an array's parent "
                   "with the plain job's ops (a bundle of its own, no open marker) instead of "
                   "as retry() does (array_ops.retry_array): the array is never settled again")
def test_a_bulk_retry_of_a_cancelled_array_reopens_it_as_a_single_retry_does(
        twins: Twins) -> None:
    cancelled_array(twins, "a1")
    report = twins.client().bulk_retry(status="CANCELLED")
    assert report.errors == 0
    parent = twins.job("a1")
    assert parent is not None and parent.bundle_id is None
    assert r.array_key("a1") in twins.table.snapshot()
