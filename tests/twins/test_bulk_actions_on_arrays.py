"""Bulk actions meet array jobs: a bulk retry or cancel acts on an array as a single `jobs
retry|cancel` of it does (its children, the parent decided again), marks the parent so that a
resume skips the whole array, and never retries a child alone, which would run again under a
parent that has decided without it."""

from __future__ import annotations

from collections import Counter

import pytest

from dispatcher.domain import arrays
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.ops.bulk import BulkAction, BulkFilter, BulkVerb
from dispatcher.ports.table import Set, Update
from dispatcher.store import codec as r
from tests.twins import Twins
from tests.twins.test_array_jobs import drive


def failed_array(twins: Twins) -> list[str]:
    """Array ``a`` of 4 whose child 1 fails: the parent FAILED (no failure tolerated)."""
    twins.client().submit("k", {}, job_id="a", array_size=4, tolerated_failures=0,
                          max_attempts=1, estimated_seconds=1)
    children = [arrays.child_id("a", i) for i in range(4)]
    drive(twins, 6, outcome=lambda job: JobState.FAILED if job.job_id == children[1]
          else JobState.SUCCEEDED)
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.FAILED
    return children


def test_a_bulk_retry_retries_an_array_as_its_own_retry_does_and_once(twins: Twins) -> None:
    children = failed_array(twins)
    action = BulkAction(twins.store)
    report = action.run(BulkFilter(BulkVerb.RETRY, "FAILED"))
    parent = twins.job("a")
    assert parent is not None and parent.state != JobState.FAILED
    assert parent.bundle_id is None  # the parent never runs: its children do
    assert report.bulk_id in parent.bulk_ids
    assert twins.table.snapshot().get(r.array_key("a")) is not None  # open again
    again = twins.job(children[1])
    assert again is not None and again.state == JobState.PENDING
    # The failed child is selected too: if the walk reaches it first it is refused (its
    # array's retry retries it); after, it is no longer FAILED. Either way, retried once.
    assert report.acted == 1 and report.errors <= 1
    # A resume of the same action skips the array it retried.
    resumed = action.run(BulkFilter(BulkVerb.RETRY, "FAILED"), bulk_id=report.bulk_id)
    assert resumed.acted == 0
    ran: Counter[str] = Counter()
    drive(twins, 6, ran=ran)
    assert ran == Counter({children[1]: 1})
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED


def test_a_child_is_not_retried_alone(twins: Twins) -> None:
    children = failed_array(twins)
    with pytest.raises(LongjobsError, match="retry the array"):
        twins.client().retry(children[1])
    child = twins.job(children[1])
    assert child is not None and child.state == JobState.FAILED
    # A page holding the child before its parent: the child refused, the array retried.
    out = twins.store.retry_page([children[1], "a"], by="bulk-1", only=JobState.FAILED)
    assert [(o.job_id, o.done) for o in out] == [(children[1], "error"), ("a", "acted")]
    assert "retry the array" in str(out[0].error)
    child = twins.job(children[1])
    assert child is not None and child.state == JobState.PENDING  # by its array's retry


def test_a_bulk_cancel_cancels_an_array_and_its_children(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="a", array_size=4, estimated_seconds=1)
    stages = twins.stages()
    for _ in range(2):  # its children recorded and launched, none run yet
        stages.tick.tick()
        twins.clock.advance(60)
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.RUNNING  # children PENDING
    report = BulkAction(twins.store).run(BulkFilter(BulkVerb.CANCEL, "RUNNING"))
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.CANCELLED
    assert report.bulk_id in parent.bulk_ids
    ran: Counter[str] = Counter()
    drive(twins, 2, ran=ran)  # their tasks start: the cancels asked of them are done
    assert not ran
    for child_id in (arrays.child_id("a", i) for i in range(4)):
        child = twins.job(child_id)
        assert child is not None and child.state == JobState.CANCELLED


def test_an_array_cancel_cut_short_after_its_parent_is_finished_by_cancelling_again(
        twins: Twins) -> None:
    """A cancel whose process died right after writing the parent CANCELLED left children
    to run; cancelling the array again cancels them rather than say nothing is left."""
    twins.client().submit("k", {}, job_id="a", array_size=3, estimated_seconds=1)
    stages = twins.stages()
    for _ in range(2):  # its children recorded and launched, none run yet
        stages.tick.tick()
        twins.clock.advance(60)
    twins.table.write(Update(r.job_key("a"), [Set("state", str(JobState.CANCELLED))]))
    twins.client().cancel("a")
    ran: Counter[str] = Counter()
    drive(twins, 2, ran=ran)
    assert not ran
    for i in range(3):
        child = twins.job(arrays.child_id("a", i))
        assert child is not None and child.state == JobState.CANCELLED
    with pytest.raises(LongjobsError, match="already CANCELLED; nothing to cancel"):
        twins.client().cancel("a")
