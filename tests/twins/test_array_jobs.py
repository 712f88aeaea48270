"""Array jobs on the twins: one message, N children recorded a page at a time by the ticks,
each run once as an ordinary job, and a parent whose state is its children's aggregate."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from dispatcher.domain import arrays
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Job, JobState
from dispatcher.store import Fence, JobUpdate
from dispatcher.store import codec as r
from tests.twins import Twins


def run_launched(t: Twins, outcome: Callable[[Job], JobState] = lambda job: JobState.SUCCEEDED,
                 ran: Counter[str] | None = None) -> int:
    """Every launched bundle run as a runner would: claimed, each pending job run once to
    ``outcome(job)`` (or cancelled, if that was asked before the claim), the bundle DONE, and
    then its batch's follow-ons taken and run alike (dispatcher/store/follow_ons.py).
    Returns how many jobs ran."""
    n = 0
    # The launched ones through the index (not a copy of the whole table: 100,000 jobs).
    for b in map(r.record_bundle, t.table.query(r.bundle_status(BundleState.LAUNCHED))):
        arn = b.task_arn
        bundle: Bundle | None = t.store.get_bundle(b.bundle_id)
        while arn and bundle is not None:
            n += run_bundle(t, bundle, arn, outcome, ran)
            done = t.store.get_bundle(bundle.bundle_id)
            bundle = t.store.take_follow_on(done, arn).bundle if done is not None \
                and done.state == BundleState.DONE else None
    t.flow()  # the ends release their dependents (the table's stream)
    return n


def run_bundle(t: Twins, b: Bundle, arn: str, outcome: Callable[[Job], JobState],
               ran: Counter[str] | None) -> int:
    fence = Fence(b.bundle_id, b.attempt, arn)
    cancel = t.store.claim(fence).cancel_requested
    updates = []
    for job in t.store.get_jobs(t.store.job_ids_of(b)):
        if job.state != JobState.PENDING:
            continue
        if job.job_id in cancel:
            updates.append(JobUpdate(job.job_id, JobState.PENDING, JobState.CANCELLED,
                                     reason="cancelled on request before it started"))
            continue
        if ran is not None:
            ran[job.job_id] += 1
        updates.append(JobUpdate(job.job_id, JobState.PENDING, outcome(job),
                                 via=JobState.RUNNING, attempts_delta=1))
    t.store.apply(fence, updates, bundle_to=BundleState.DONE)
    return len(updates)


def drive(t: Twins, ticks: int, outcome: Callable[[Job], JobState] = lambda job:
          JobState.SUCCEEDED, ran: Counter[str] | None = None, **cfg: str) -> None:
    stages = t.stages(**cfg)
    for _ in range(ticks):
        stages.tick.tick()
        t.flow()  # arrays its end decided release their dependents
        run_launched(t, outcome, ran)
        t.clock.advance(60)


def test_an_array_runs_each_child_once_and_its_parent_succeeds(twins: Twins) -> None:
    twins.client().submit("k", {"day": "2026-12-01"}, job_id="nightly", array_size=250,
                          estimated_seconds=1)
    assert twins.queue_counts() == (1, 0)  # one message for 250 jobs
    ran: Counter[str] = Counter()
    drive(twins, 6, ran=ran, LONGJOBS_MAX_RUNNING_TASKS="4")
    children = [arrays.child_id("nightly", i) for i in range(250)]
    assert sorted(ran) == sorted(children) and set(ran.values()) == {1}
    for i, job_id in enumerate(children[:3]):
        job = twins.job(job_id)
        assert job is not None and job.state == JobState.SUCCEEDED
        assert job.array_parent == "nightly" and job.array_index == i
        assert job.payload == {"day": "2026-12-01"}
    parent = twins.job("nightly")
    assert parent is not None and parent.state == JobState.SUCCEEDED
    assert parent.bundle_id is None  # the parent never runs
    assert twins.table.snapshot().get(r.array_key("nightly")) is None  # closed
    assert twins.queue_counts() == (0, 0)


def test_more_failures_than_tolerated_fail_the_parent_with_a_reason(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="a", array_size=40, tolerated_failures="5%",
                          max_attempts=1, estimated_seconds=1)
    bad = {3, 17, 30}  # 3 > 5% of 40 (= 2)

    def outcome(job: Job) -> JobState:
        return JobState.FAILED if job.array_index in bad else JobState.SUCCEEDED

    drive(twins, 5, outcome)
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.FAILED
    assert parent.reason is not None and "3 of 40 children failed" in parent.reason
    assert "3, 17, 30" in parent.reason


def test_failures_within_the_tolerance_leave_the_parent_succeeded(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="a", array_size=40, tolerated_failures=2,
                          max_attempts=1, estimated_seconds=1)
    drive(twins, 5, lambda job: JobState.FAILED if job.array_index in (1, 2)
          else JobState.SUCCEEDED)
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"array_size": 1}, "array_size"),
    ({"array_size": 100_001}, "array_size"),
    ({"tolerated_failures": 2}, "for array jobs"),
    ({"array_size": 5, "tolerated_failures": "half"}, "percentage"),
    ({"array_size": 5, "job_id": "x" * 125}, "at most"),
])
def test_a_bad_array_is_refused_at_submit(twins: Twins, kwargs: dict[str, object],
                                          says: str) -> None:
    with pytest.raises(InvalidMessage, match=says):
        twins.client().submit("k", {}, **kwargs)  # type: ignore[arg-type]
    assert twins.queue_counts() == (0, 0)


def test_show_gives_an_arrays_counts_and_a_childs_parent(twins: Twins) -> None:
    from dispatcher.ops.queries import Queries

    twins.client().submit("k", {}, job_id="a", array_size=30, tolerated_failures=5,
                          max_attempts=1, estimated_seconds=1)
    drive(twins, 4, lambda job: JobState.FAILED if job.array_index in (4, 9)
          else JobState.SUCCEEDED)
    queries = Queries(twins.store, clock=twins.clock)
    shown = queries.show("a").to_json()["array"]
    assert shown["size"] == 30 and shown["recorded"] == 30
    assert shown["by_state"] == {"SUCCEEDED": 28, "FAILED or CANCELLED": 2,
                                 "not settled yet": 0, "not recorded yet": 0}
    assert shown["failed_indexes"] == [4, 9]
    assert queries.show("a:9").to_json()["array"] == {"parent": "a", "index": 9}


def test_cancelling_an_array_cancels_its_unfinished_children_and_records_no_more(
        twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=500, estimated_seconds=1)
    stages = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="2", LONGJOBS_BUNDLE_MAX_JOBS="20")
    stages.tick.tick()  # the parent recorded: its children from the next tick on
    assert not [j for j in twins.jobs() if j.array_parent == "a"]
    stages.tick.tick()  # some children recorded and launched, none run yet
    recorded = sum(1 for j in twins.jobs() if j.array_parent == "a")
    assert 0 < recorded < 500
    assert client.cancel("a").state == JobState.CANCELLED
    children = [j for j in twins.jobs() if j.array_parent == "a"]
    assert len(children) == recorded
    for _ in range(3):
        twins.clock.advance(60)
        stages.tick.tick()
        run_launched(twins)
    children = [j for j in twins.jobs() if j.array_parent == "a"]
    assert len(children) == recorded  # none recorded after the cancel
    assert {j.state for j in children} == {JobState.CANCELLED}  # none ran
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.CANCELLED
    assert twins.table.snapshot().get(r.array_key("a")) is None  # settled and closed


def test_retrying_a_failed_array_reruns_only_its_failed_children(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=60, max_attempts=1, estimated_seconds=1)
    ran: Counter[str] = Counter()
    drive(twins, 4, lambda job: JobState.FAILED if job.array_index == 7 and
          job.attempts == 0 and not job.history[1:] else JobState.SUCCEEDED, ran)
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.FAILED
    assert twins.table.snapshot()[r.job_key("a")].expires_at is not None  # ended: kept a while
    assert client.retry("a").state == JobState.RUNNING
    # Undecided again: its end's expiry is gone, so the table does not delete it meanwhile.
    assert twins.table.snapshot()[r.job_key("a")].expires_at is None
    drive(twins, 4, ran=ran)
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED, parent.reason
    assert ran["a:7"] == 2 and all(n == 1 for j, n in ran.items() if j != "a:7")
    assert len(ran) == 60


@pytest.mark.parametrize("writes", [0, 1, 2, 3, 5, 7, 9, 11])
def test_a_crash_at_any_write_while_children_are_recorded_loses_and_doubles_none(
        writes: int) -> None:
    from tests.model_faults import FaultyTable, LambdaDied, model_store, one_thread

    t = Twins()
    t.table = FaultyTable(t.clock)
    t.store = model_store(t.table, t.clock)
    t.client().submit("k", {}, job_id="a", array_size=300, estimated_seconds=1)
    stages = t.stages(LONGJOBS_BUNDLE_MAX_JOBS="40", LONGJOBS_MAX_RUNNING_TASKS="4")
    stages.tick.tick()  # the parent recorded; its children are recorded from the next tick
    t.table.crash_after(writes)  # the tick dies right after this write (of 12)
    with one_thread(), pytest.raises(LambdaDied):
        stages.tick.tick()
    t.table.revive()
    t.clock.advance(3600)  # the lease and the messages' hold run out
    ran: Counter[str] = Counter()
    for _ in range(12):
        stages.tick.tick()
        run_launched(t, ran=ran)
        t.clock.advance(60)
    assert sorted(ran) == sorted(arrays.child_id("a", i) for i in range(300))
    assert set(ran.values()) == {1}
    in_bundles = Counter(j for b in t.bundles() for j in b.job_ids)
    assert set(in_bundles.values()) == {1}
    parent = t.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED


def test_children_whose_recording_failed_are_offered_again_and_run_once(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="a", array_size=50, estimated_seconds=1)
    stages = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="2")
    stages.tick.tick()  # the parent
    record = twins.store.record
    failed: list[int] = []

    def failing_record(*args: object) -> set[str]:
        if not failed:
            failed.append(1)
            raise RuntimeError("InjectedFailure: DynamoDB throttled after retries")
        return record(*args)  # type: ignore[arg-type]

    twins.store.record = failing_record  # type: ignore[method-assign]
    decision = stages.tick.tick()
    assert decision.intake.record_failures == 1 and decision.intake.released > 0
    ran: Counter[str] = Counter()
    drive(twins, 4, ran=ran, LONGJOBS_MAX_RUNNING_TASKS="2")
    assert sorted(ran) == sorted(arrays.child_id("a", i) for i in range(50))
    assert set(ran.values()) == {1}
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED


def test_an_array_recorded_tolerating_more_than_its_size_still_runs_its_children(
        twins: Twins) -> None:
    """A message may no longer tolerate more failures than its array has children; an array
    recorded before that (tolerating 20 of 3) still has its children admitted."""
    parent = Job(job_id="old", kind="k", payload={}, array_size=3, array_tolerated=20,
                 estimated_seconds=1, created_at=twins.clock())
    assert twins.store.record_parents([parent]) == set()
    ran: Counter[str] = Counter()
    drive(twins, 3, ran=ran)
    assert sorted(ran) == ["old:0", "old:1", "old:2"]
    done = twins.job("old")
    assert done is not None and done.state == JobState.SUCCEEDED, done.reason
