"""Jobs that wait for others (``depends_on``) on the twins: held without a slot, released when
their dependencies end as asked, CANCELLED with the reason when one does not, and refused at
submit when they name a job that can never be (tests/twins/test_dependency_on_children.py:
one not recorded yet is accepted)."""

from __future__ import annotations

from collections import Counter

import pytest

from dispatcher.domain import dependencies
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ops.queries import Queries
from tests.twins import Twins
from tests.twins.test_array_jobs import drive, run_launched


def test_a_reduce_waits_for_its_whole_array_and_runs_once_after_it(twins: Twins) -> None:
    client = twins.client()
    client.submit("map", {}, job_id="map", array_size=20, estimated_seconds=1)
    client.submit("reduce", {}, job_id="reduce", depends_on=["map"], estimated_seconds=1)
    stages = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="2")
    order: list[str] = []
    ran: Counter[str] = Counter()

    def outcome(job: Job) -> JobState:
        order.append(job.job_id)
        return JobState.SUCCEEDED

    for _ in range(8):
        stages.tick.tick()
        reduce_job = twins.job("reduce")
        assert reduce_job is not None
        if reduce_job.state == JobState.PENDING and "reduce" not in order:
            shown = Queries(twins.store, clock=twins.clock).show("reduce").summary.waiting_for
            assert shown is not None
            if shown.reason == "dependencies":
                assert shown.detail == "map (succeeded)"
        run_launched(twins, outcome, ran)
        twins.clock.advance(60)
    assert order[-1] == "reduce" and len(order) == 21 and set(ran.values()) == {1}
    reduce_job = twins.job("reduce")
    assert reduce_job is not None and reduce_job.state == JobState.SUCCEEDED
    assert reduce_job.depends_on is None  # released: nothing left to wait for


def test_each_condition_against_a_failed_dependency(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", max_attempts=1, estimated_seconds=1)
    client.submit("k", {}, job_id="needs-success", depends_on=["a"], estimated_seconds=1)
    client.submit("k", {}, job_id="needs-failure", estimated_seconds=1,
                  depends_on=[{"job_id": "a", "condition": "failed"}])
    client.submit("k", {}, job_id="needs-end", estimated_seconds=1,
                  depends_on=[{"job_id": "a", "condition": "finished"}])
    ran: Counter[str] = Counter()
    drive(twins, 5, lambda job: JobState.FAILED if job.job_id == "a" else JobState.SUCCEEDED,
          ran)
    cancelled = twins.job("needs-success")
    assert cancelled is not None and cancelled.state == JobState.CANCELLED
    assert cancelled.reason == "its dependency a ended FAILED; it needed succeeded"
    assert "needs-success" not in ran
    for job_id in ("needs-failure", "needs-end"):
        job = twins.job(job_id)
        assert job is not None and job.state == JobState.SUCCEEDED and ran[job_id] == 1


def test_an_array_past_its_tolerated_failures_cancels_its_dependents(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="arr", array_size=10, max_attempts=1, estimated_seconds=1)
    client.submit("k", {}, job_id="after", depends_on=["arr"], estimated_seconds=1)
    drive(twins, 6, lambda job: JobState.FAILED if job.array_index == 4 else JobState.SUCCEEDED)
    after = twins.job("after")
    assert after is not None and after.state == JobState.CANCELLED
    assert after.reason == "its dependency arr ended FAILED; it needed succeeded"


def test_an_array_records_no_child_before_its_dependency_succeeded(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="first", estimated_seconds=1)
    client.submit("k", {}, job_id="arr", array_size=5, depends_on=["first"],
                  estimated_seconds=1)
    stages = twins.stages()
    stages.tick.tick()
    stages.tick.tick()
    assert [j.job_id for j in twins.jobs() if j.array_parent] == []
    run_launched(twins)  # "first" succeeds
    stages.tick.tick()  # releases the array: its children from this tick on
    drive(twins, 3)
    parent = twins.job("arr")
    assert parent is not None and parent.state == JobState.SUCCEEDED


@pytest.mark.parametrize(("batch", "says"), [
    ([{"job_id": "b", "array_size": 3, "depends_on": ["b:1"]}], "a child of this job"),
    ([{"job_id": "a", "array_size": 3}, {"job_id": "b", "depends_on": ["a:3"]}],
     "no child of array 'a': it has 3 children"),
    ([{"job_id": "b", "depends_on": ["b"]}], "itself"),
    ([{"job_id": "b", "depends_on": ["x", "x"]}], "twice"),
    ([{"job_id": "b", "depends_on": [{"job_id": "x", "condition": "maybe"}]}], "condition"),
    ([{"job_id": "b", "depends_on": [f"j{i}" for i in range(21)]}], "20"),
])
def test_a_bad_dependency_is_refused_at_submit(twins: Twins, batch: list[dict[str, object]],
                                               says: str) -> None:
    with pytest.raises(InvalidMessage, match=says):
        twins.client().submit_many([{"kind": "k", "payload": {}, **spec} for spec in batch])
    assert twins.queue_counts() == (0, 0)


def test_a_dependency_on_a_rejected_job_is_refused_at_submit(twins: Twins) -> None:
    twins.queue.send([("e0", '{"schema_version": 1, "job_id": "bad", "kind": "k"}')])
    twins.stages().tick.tick()  # no payload: REJECTED
    with pytest.raises(InvalidMessage, match="REJECTED"):
        twins.client().submit("k", {}, job_id="b", depends_on=["bad"])


def test_a_dependency_never_recorded_cancels_its_job_after_the_grace(twins: Twins) -> None:
    """A producer that may only send is not checked at submit: the dispatcher waits for the
    dependency to be recorded (SQS may deliver it second), then gives up with the reason."""
    client = twins.client()
    client.cfg = client.cfg.__class__(**{**vars(client.cfg), "table": ""})
    client.submit("k", {}, job_id="b", depends_on=["ghost"], estimated_seconds=1)
    stages = twins.stages()
    stages.tick.tick()
    job = twins.job("b")
    assert job is not None and job.state == JobState.PENDING
    twins.clock.advance(dependencies.UNKNOWN_GRACE_SECONDS + 1)
    stages.tick.tick()
    job = twins.job("b")
    assert job is not None and job.state == JobState.CANCELLED
    assert job.reason is not None and "ghost is unknown" in job.reason


def test_a_dependent_released_by_an_end_stays_released_when_that_job_is_retried(
        twins: Twins) -> None:
    """A dependency's end releases its dependents once: ``b`` (it needs ``a`` finished) is
    released by ``a``'s failure; an operator's retry of ``a`` before ``b`` starts does not
    hold ``b`` back again, and each runs once more."""
    client = twins.client()
    client.submit("k", {}, job_id="a", max_attempts=1, estimated_seconds=1)
    client.submit("k", {}, job_id="b", estimated_seconds=1,
                  depends_on=[{"job_id": "a", "condition": "finished"}])
    stages = twins.stages()
    stages.tick.tick()
    run_launched(twins, lambda job: JobState.FAILED)  # a fails; its end releases b
    twins.clock.advance(60)
    stages.tick.tick()
    b = twins.job("b")
    assert b is not None and b.state == JobState.PENDING and b.bundle_id is not None
    client.retry("a")
    ran: Counter[str] = Counter()
    drive(twins, 3, ran=ran)
    assert ran == Counter({"a": 1, "b": 1})
    for job_id in ("a", "b"):
        job = twins.job(job_id)
        assert job is not None and job.state == JobState.SUCCEEDED
