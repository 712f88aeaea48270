"""The Store roles' contract on both tables: the policy lives once in the port, so the same
calls must have the same outcomes on the twin and on DynamoDB (moto): recording with
duplicates, the claim fence, fenced results, cancel and retry, the dispatcher lease."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, IllegalTransition, LongjobsError
from dispatcher.domain.jobs import Job, JobState, Rejection
from dispatcher.domain.launches import Launch
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.record import Record
from dispatcher.ports.table import Put, Set, Update
from dispatcher.store import Fence, JobUpdate, LaunchOutcome, Store
from dispatcher.store import codec as r
from dispatcher.store.values import JobOutcomes, Lease, TaskPointer
from tests.contract.tables import BACKENDS, Clock, make_store, make_table

T0 = 1_700_000_000.0


@pytest.fixture(params=BACKENDS)
def env(request: pytest.FixtureRequest) -> tuple[Store, Clock]:
    clock = Clock(T0)
    return make_store(make_table(request), clock), clock


def _jobs(*ids: str, bundle_id: str) -> list[Job]:
    return [Job(job_id=i, kind="k", payload={"i": i}, bundle_id=bundle_id, created_at=T0,
                estimated_seconds=1.0) for i in ids]


def _record(store: Store, bundle_id: str, *ids: str) -> Bundle:
    bundle = Bundle(bundle_id=bundle_id, job_ids=list(ids), next_attempt_at=T0, created_at=T0)
    assert store.record([bundle], _jobs(*ids, bundle_id=bundle_id)) == set()
    return bundle


def _launch(store: Store, bundle: Bundle, arn: str) -> Fence:
    launch = Launch(launch_id=f"L-{bundle.bundle_id}", bundle_ids=[bundle.bundle_id],
                    task_definition="fam:1", created_at=T0)
    store.begin_launch(launch, [bundle])
    store.finish_launch(launch, LaunchOutcome(assigned=[(bundle.bundle_id, arn)]), {})
    return Fence(bundle.bundle_id, bundle.attempt, arn)


def test_record_leaves_duplicates_out(env: tuple[Store, Clock]) -> None:
    store, _ = env
    _record(store, "b1", "j1", "j2")
    b2 = Bundle(bundle_id="b2", job_ids=["j2", "j3"], created_at=T0, next_attempt_at=T0)
    b3 = Bundle(bundle_id="b3", job_ids=["j1"], created_at=T0, next_attempt_at=T0)
    dup = store.record([b2, b3], _jobs("j2", "j3", bundle_id="b2") + _jobs("j1", bundle_id="b3"))
    assert dup == {"j1", "j2"}
    assert b2.job_ids == ["j3"] and store.get_bundle("b3") is None
    got = store.get_bundle("b2")
    assert got is not None and got.job_ids == ["j3"] and got.state == BundleState.PENDING
    j2 = store.get_job("j2")
    assert j2 is not None and j2.bundle_id == "b1"  # the existing job is untouched
    assert [j.job_id for j in store.get_jobs(["j3", "nope", "j1"])] == ["j3", "j1"]
    # A repeat of the same record (a lost response) writes nothing new.
    again = Bundle(bundle_id="b1", job_ids=["j1", "j2"], created_at=T0, next_attempt_at=T0)
    assert store.record([again], _jobs("j1", "j2", bundle_id="b1")) == {"j1", "j2"}


def test_reject_is_idempotent_per_message(env: tuple[Store, Clock]) -> None:
    store, _ = env
    store.reject([Rejection(key="bad", message_id="m1", reason="not JSON", body="{",
                            created_at=T0)])
    store.reject([Rejection(key="bad", message_id="m1", reason="not JSON", body="{",
                            created_at=T0)])
    store.reject([Rejection(key="bad", message_id="m2", reason="other", body="x",
                            created_at=T0)])
    first = store.get_rejection("bad")
    assert first is not None and first.message_id == "m1"
    second = store.get_rejection("bad#m2")
    assert second is not None and second.reason == "other"
    assert len(store.list_jobs(JobState.REJECTED)) == 2


def test_launch_claim_fence_and_pointer(env: tuple[Store, Clock]) -> None:
    store, _ = env
    bundle = _record(store, "b1", "j1")
    assert [b.bundle_id for b in store.due_bundles(10, T0)] == ["b1"]
    fence = _launch(store, bundle, "arn:task/1")
    assert store.due_bundles(10, T0) == []
    assert [b.bundle_id for b in store.active_bundles()] == ["b1"]
    pointed = store.bundle_for_task("arn:task/1")
    assert pointed is not None and pointed.state == BundleState.LAUNCHED
    assert pointed.attempt == 1
    with pytest.raises(ConflictError):  # a stale or duplicate task loses
        store.claim(Fence("b1", 1, "arn:task/other"))
    with pytest.raises(ConflictError):
        store.claim(Fence("b1", 0, "arn:task/1"))
    claimed = store.claim(fence).bundle
    assert claimed.state == BundleState.RUNNING and claimed.heartbeat_at == T0
    with pytest.raises(ConflictError):  # claimed once only
        store.claim(fence)
    with pytest.raises(ConflictError):  # the same launch cannot be begun twice
        store.begin_launch(Launch("L-b1", ["b1"], "fam:1", created_at=T0),
                           [Bundle(bundle_id="b1", job_ids=["j1"])])


def test_a_task_claims_what_its_pointer_names_only_while_it_is_launched_there(
        env: tuple[Store, Clock]) -> None:
    store, _ = env
    assert store.claim_assigned("arn:task/1") is None  # nothing assigned
    bundle = _record(store, "b1", "j1")
    launch = Launch(launch_id="L-b1", bundle_ids=["b1"], task_definition="fam:1", created_at=T0)
    store.begin_launch(launch, [bundle])
    store.table.write(Put(Record(r.task_key("arn:task/1"), bundle_id="b1")))
    assert store.claim_assigned("arn:task/1") is None  # LAUNCHING: the launch under way
    store.finish_launch(launch, LaunchOutcome(assigned=[("b1", "arn:task/1")]), {})
    assert store.claim_assigned("arn:task/other") is None  # not its pointer's
    claim = store.claim_assigned("arn:task/1")
    assert claim is not None and (claim.bundle.state, claim.bundle.attempt,
                                  claim.bundle.job_ids) == (BundleState.RUNNING, 1, ["j1"])
    assert store.claim_assigned("arn:task/1") is None  # claimed once only


def test_apply_with_a_lost_fence_writes_nothing(env: tuple[Store, Clock]) -> None:
    store, clock = env
    fence = _launch(store, _record(store, "b1", "j1", "j2"), "arn:task/1")
    store.claim(fence)
    clock.t += 5
    store.apply(fence, [JobUpdate("j1", JobState.PENDING, JobState.SUCCEEDED,
                                  via=JobState.RUNNING, attempts_delta=1, result={"ok": 1})])
    j1 = store.get_job("j1")
    assert j1 is not None and (j1.state, j1.attempts, j1.result) == (
        JobState.SUCCEEDED, 1, {"ok": 1})
    stale = Fence("b1", fence.attempt, "arn:task/stale")
    with pytest.raises(ConflictError):
        store.apply(stale, [JobUpdate("j2", JobState.PENDING, JobState.RUNNING)])
    with pytest.raises(ConflictError):
        store.heartbeat(stale)
    with pytest.raises(ConflictError):
        store.save_checkpoint(stale, "j2", {"step": 1})
    j2 = store.get_job("j2")
    assert j2 is not None and j2.state == JobState.PENDING
    with pytest.raises(IllegalTransition):
        store.apply(fence, [JobUpdate("j1", JobState.SUCCEEDED, JobState.RUNNING)])
    store.apply(fence, [JobUpdate("j2", JobState.PENDING, JobState.RUNNING)])
    store.save_checkpoint(fence, "j2", {"step": 1})
    store.apply(fence, [JobUpdate("j2", JobState.RUNNING, JobState.FAILED, reason="boom")],
                bundle_to=BundleState.DONE)
    j2 = store.get_job("j2")
    assert j2 is not None and (j2.state, j2.checkpoint, j2.reason) == (
        JobState.FAILED, {"step": 1}, "boom")
    done = store.get_bundle("b1")
    assert done is not None and done.state == BundleState.DONE


def test_a_runners_count_rides_on_its_pointer_unless_the_table_refuses_a_result(
        env: tuple[Store, Clock]) -> None:
    """The move to DONE carries the runner's count onto the task's pointer, for the task's
    stop to report without reading the jobs; a result refused in that same write takes it
    off (the refused job may name the task as its run's); a pointer naming another bundle
    than the counted one (it took a follow-on since) has none."""
    store, _ = env
    fence = _launch(store, _record(store, "b1", "j1", "j2"), "arn:task/1")
    store.claim(fence)
    store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED, via=JobState.RUNNING,
                                  attempts_delta=1) for j in ("j1", "j2")],
                bundle_to=BundleState.DONE, ended=JobOutcomes(2, 0))
    assert store.task_pointer("arn:task/1") == TaskPointer("b1", JobOutcomes(), JobOutcomes(2, 0))

    fence = _launch(store, _record(store, "b2", "j3", "j4"), "arn:task/2")
    store.claim(fence)
    # Meanwhile j3 is moved on by another writer (failed as overdue, say): refused below.
    store.table.write(Update(r.job_key("j3"), [Set("state", "FAILED"),
                                               Set("status_key", r.job_status("FAILED", "j3"))]))
    refused = store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED,
                                            via=JobState.RUNNING, attempts_delta=1)
                                  for j in ("j3", "j4")],
                          bundle_to=BundleState.DONE, ended=JobOutcomes(2, 0))
    assert refused == {"j3"}
    assert store.task_pointer("arn:task/2") == TaskPointer("b2", JobOutcomes(), None)
    done = store.get_bundle("b2")
    assert done is not None and done.state == BundleState.DONE

    store.table.write(Update(r.task_key("arn:task/1"), [Set("bundle_id", "b2")]))
    assert store.task_pointer("arn:task/1") == TaskPointer("b2", JobOutcomes(), None)


def test_settle_requeues_only_the_bundle_it_read(env: tuple[Store, Clock]) -> None:
    store, clock = env
    fence = _launch(store, _record(store, "b1", "j1"), "arn:task/1")
    store.claim(fence)
    store.apply(fence, [JobUpdate("j1", JobState.PENDING, JobState.RUNNING, attempts_delta=1)])
    read = store.get_bundle("b1")
    assert read is not None
    stale = Bundle(**{**read.__dict__, "task_arn": "arn:task/old"})
    with pytest.raises(ConflictError):
        store.settle(stale, [], BundleState.PENDING, retry_at=T0)
    store.settle(read, [JobUpdate("j1", JobState.RUNNING, JobState.PENDING, attempts_delta=-1)],
                 BundleState.PENDING, retry_at=T0 + 30)
    assert store.due_bundles(10, T0 + 29) == []
    due = store.due_bundles(10, T0 + 30)
    assert [b.bundle_id for b in due] == ["b1"] and due[0].launch_id is None
    j1 = store.get_job("j1")
    assert j1 is not None and (j1.state, j1.attempts) == (JobState.PENDING, 0)
    clock.t += 1


def test_finish_launch_failures_back_off(env: tuple[Store, Clock]) -> None:
    store, _ = env
    b = _record(store, "b1", "j1")
    launch = Launch("L1", ["b1"], "fam:1", created_at=T0)
    store.begin_launch(launch, [b])
    assert [x.launch_id for x in store.orphaned_launches(T0)] == ["L1"]
    store.finish_launch(launch, LaunchOutcome(failed=[("b1", "RESOURCE:CPU short")]),
                        {"b1": T0 + 60})
    assert store.orphaned_launches(T0 + 3600) == []
    got = store.get_bundle("b1")
    assert got is not None and (got.state, got.launch_failures, got.last_failure) == (
        BundleState.PENDING, 1, "RESOURCE:CPU short")
    assert store.due_bundles(10, T0) == []
    with pytest.raises(ConflictError):
        store.finish_launch(launch, LaunchOutcome(failed=[("b1", "again")]), {"b1": T0})


def test_cancel_pending_now_and_running_by_request(env: tuple[Store, Clock]) -> None:
    store, _ = env
    _record(store, "b1", "j1", "j2")
    cancelled = store.cancel("j1")
    assert cancelled.state == JobState.CANCELLED
    b1 = store.get_bundle("b1")
    assert b1 is not None and b1.state == BundleState.PENDING  # j2 still waits in it
    assert store.cancel("j2").state == JobState.CANCELLED
    b1 = store.get_bundle("b1")
    assert b1 is not None and b1.state == BundleState.DONE  # the last one closed it
    with pytest.raises(LongjobsError):
        store.cancel("j2")

    fence = _launch(store, _record(store, "b2", "j3", "j4"), "arn:task/2")
    store.claim(fence)
    assert store.cancel("j3").state == JobState.PENDING  # requested, not yet honoured
    store.cancel("j4")
    store.cancel("j3")  # a repeated request finds the first standing: kept once
    assert store.heartbeat(fence).cancel_requested == {"j3", "j4"}
    b2 = store.table.get("BUNDLE#b2")
    assert b2 is not None and b2.cancel_jobs == ["j3", "j4"]


def test_retry_runs_a_failed_job_in_a_new_bundle(env: tuple[Store, Clock]) -> None:
    store, _ = env
    _record(store, "b1", "j1")
    with pytest.raises(LongjobsError):
        store.retry("j1")  # PENDING: nothing to retry
    store.cancel("j1")
    job = store.retry("j1")
    assert job.state == JobState.PENDING and job.bundle_id not in (None, "b1")
    assert job.attempts == 0
    fresh = store.get_bundle(job.bundle_id or "")
    assert fresh is not None and fresh.job_ids == ["j1"]
    with pytest.raises(LongjobsError):
        store.retry("nope")


def test_lease_is_exclusive_until_it_expires(env: tuple[Store, Clock]) -> None:
    store, clock = env
    assert store.acquire_lease("a", 60)
    assert not store.acquire_lease("b", 60)
    assert store.acquire_lease("a", 60)  # the owner renews
    store.release_lease("b")  # not b's: nothing happens
    assert not store.acquire_lease("b", 60)
    clock.t += 61
    assert store.acquire_lease("b", 60)  # expired: taken over
    store.release_lease("b")
    assert store.acquire_lease("a", 60)


def test_the_ticks_summary_rides_on_its_lease_release_unless_the_lease_was_lost(
        env: tuple[Store, Clock]) -> None:
    store, clock = env
    summary = TickSummary(at=T0, active=1, max_running=4, left_due={"normal": 2})
    held = store.acquire_lease("a", 60)
    store.release_lease("a", held=held, summary=(summary, "fam:3", 2))
    assert store.tick_summary() == summary
    assert store.acquire_lease("b", 60)  # given back
    clock.t += 61
    assert store.acquire_lease("c", 60)  # b's lease expired: c took it over
    store.release_lease("b", summary=(TickSummary(at=T0 + 61, active=0, max_running=4),
                                      "fam:4", 3))
    assert store.tick_summary() == summary  # b lost its lease: its summary is not written
    assert not store.acquire_lease("d", 60)  # and c's lease is c's


def test_a_lease_hands_the_next_holder_what_its_last_holder_left(
        env: tuple[Store, Clock]) -> None:
    store, _ = env
    a = store.acquire_lease("a", 60)
    assert a == Lease("a", None, 1, recordings_left=True)  # the first: nothing known
    store.release_lease("a", swept_at=T0, held=a, clean=True)
    b = store.acquire_lease("b", 60)
    assert b == Lease("b", T0, 2, recordings_left=False)  # a recorded all it began
    store.release_lease("b", held=b)  # knew nothing new, and may have left a recording
    c = store.acquire_lease("c", 60, one_at_a_time=True)
    assert c == Lease("c", T0, 3, recordings_left=True)
    store.release_lease("c", held=c, clean=True)
    assert store.acquire_lease("d", 60, one_at_a_time=True) == Lease("d", T0, 4, False)
    # d dies holding it: whatever it began recording is looked for by the next, which knows
    # it took the lease over
    e = store.acquire_lease("e", 60, one_at_a_time=True)
    assert e == Lease("e", T0, 5, recordings_left=True, taken_over=True)
    store.release_lease("d", swept_at=T0 + 1, held=e, clean=True)  # not d's: nothing written
    store.release_lease("e", swept_at=T0 + 2, held=e, clean=True)
    assert store.acquire_lease("f", 60) == Lease("f", T0 + 2, 6, recordings_left=False)
    store.release_lease("f")  # given back without saying which: the next cannot tell
    g = store.acquire_lease("g", 60)
    assert g == Lease("g", T0 + 2, 7, True, taken_over=True)
    # One that saw a tenant's work says so, and it stays said for every holder after
    store.release_lease("g", held=g, tenanted=True)
    h = store.acquire_lease("h", 60)
    assert h is not None and h.tenanted
    store.release_lease("h", held=h)
    i = store.acquire_lease("i", 60)
    assert i is not None and i.tenanted


def test_a_lease_of_ticks_run_one_at_a_time_passes_between_them_at_once(
        env: tuple[Store, Clock]) -> None:
    store, clock = env
    assert store.acquire_lease("a", 960, one_at_a_time=True)
    assert store.acquire_lease("b", 960, one_at_a_time=True)  # a died: b runs, so a does not
    assert not store.acquire_lease("by-hand", 60)  # anything else waits out b's term
    store.release_lease("b")
    assert store.acquire_lease("by-hand", 60)
    assert not store.acquire_lease("c", 960, one_at_a_time=True)  # by-hand's is respected
    clock.t += 61
    assert store.acquire_lease("c", 960, one_at_a_time=True)


def test_fail_overdue_only_the_run_it_read(env: tuple[Store, Clock]) -> None:
    store, _ = env
    fence = _launch(store, _record(store, "b1", "j1"), "arn:task/1")
    store.claim(fence)
    store.apply(fence, [JobUpdate("j1", JobState.PENDING, JobState.RUNNING, attempts_delta=1)])
    running = store.running_jobs()
    assert [j.job_id for j in running] == ["j1"]
    stale = Job(**{**running[0].__dict__, "attempts": 0})
    with pytest.raises(ConflictError):
        store.fail_overdue(stale, "late")
    store.fail_overdue(running[0], "past its timeout")
    j1 = store.get_job("j1")
    assert j1 is not None and j1.state == JobState.FAILED and j1.error == {
        "type": "Timeout", "message": "past its timeout"}


def test_a_retry_of_a_job_whose_run_may_be_alive_is_held_until_released(
        env: tuple[Store, Clock]) -> None:
    store, clock = env
    fence = _launch(store, _record(store, "b1", "j1"), "arn:task/1")
    store.claim(fence)
    store.apply(fence, [JobUpdate("j1", JobState.PENDING, JobState.RUNNING, attempts_delta=1,
                                  history=[{"attempt": 1, "task_arn": "arn:task/1"}])])
    store.fail_overdue(store.running_jobs()[0], "timeout")
    job = store.retry("j1")
    assert job.live_task == "arn:task/1" and job.state == JobState.PENDING
    clock.t += 3600
    assert store.due_bundles(10, clock.t) == []  # held: never due by itself
    (held,) = store.held_bundles()
    assert held.bundle_id == job.bundle_id
    store.release_held(held, job)
    assert [b.bundle_id for b in store.due_bundles(10, clock.t)] == [job.bundle_id]
    assert store.held_bundles() == []
    released = store.get_job("j1")
    assert released is not None and released.live_task is None
    with pytest.raises(ConflictError):
        store.release_held(held, job)  # released already


def test_operator_queries(env: tuple[Store, Clock]) -> None:
    store, _ = env
    _record(store, "b1", "j1", "j2")
    assert store.count_jobs(JobState.PENDING) == 2
    assert len(store.list_jobs(JobState.PENDING, kind="k", limit=1)) == 1
    assert store.list_jobs(JobState.PENDING, kind="other") == []
    found = store.detail("j1")
    assert found is not None and found[0].job_id == "j1" and found[1] is not None
    assert found[1].pk == "BUNDLE#b1"
    assert store.detail("nope") is None


def test_an_on_demand_launch_is_recorded_as_such(env: tuple[Store, Clock]) -> None:
    """Recovery repeats a launch byte for byte (its clientToken): the Spot fallback's launch
    type must survive in the launch record."""
    store, _ = env
    store.record([Bundle("od", ["od-1"])], [Job(job_id="od-1", kind="k", payload={},
                                                bundle_id="od")])
    bundle = store.get_bundle("od")
    assert bundle is not None
    store.begin_launch(Launch("L-od", ["od"], "fam:1", created_at=T0, on_demand=True), [bundle])
    (orphan,) = store.orphaned_launches(older_than=T0 + 1)
    assert orphan.on_demand is True


def test_a_launchs_labels_and_a_bundles_survive_the_index(env: tuple[Store, Clock]) -> None:
    """Neither the status index's rows nor its projection hold labels: an orphaned launch
    (its tags repeat byte for byte) and a bundle read whole still have theirs."""
    store, _ = env
    shared = {"customer": "acme"}
    store.record([Bundle("l.b", ["lb-1"], labels=shared)],
                 [Job(job_id="lb-1", kind="k", payload={}, bundle_id="l.b", labels=shared)])
    (bundle,) = store.bundles_of(["l.b"])
    assert bundle.labels == shared
    store.begin_launch(Launch("L-lb", ["l.b"], "fam:1", created_at=T0, labels=shared),
                       [bundle])
    (orphan,) = store.orphaned_launches(older_than=T0 + 1)
    assert orphan.labels == shared


def test_the_credit_and_a_launchs_slots_are_kept_on_both_tables(
        env: tuple[Store, Clock]) -> None:
    """What the tick keeps between ticks (the priorities' credit) and what the runner reads
    (the slots its bundle launched with), through the real adapter."""
    store, _ = env
    assert store.priority_credit() == {}
    store.save_priority_credit({"high": -2.5, "normal": 0.0, "low": 3.0})
    assert store.priority_credit() == {"high": -2.5, "normal": 0.0, "low": 3.0}
    bundle = Bundle(bundle_id="b", job_ids=["j"], kind="report", slots=1)
    job = Job(job_id="j", kind="report", payload={}, bundle_id="b")
    store.record([bundle], [job])
    bundle.slots = 3
    store.begin_launch(Launch("L", ["b"], "fam:1"), [bundle])
    got = store.get_bundle("b")
    assert got is not None and got.slots == 3


def test_job_states_span_their_shards_and_the_key_of_before(env: tuple[Store, Clock]) -> None:
    """Jobs land on several shards of a state; a job the table holds with the unsharded key
    of before the index was sharded is read too, and gets a shard at its next change."""
    store, _ = env
    ids = [f"j{i}" for i in range(12)]
    _record(store, "b1", *ids)
    assert len({r.job_status(JobState.PENDING, j) for j in ids}) > 1
    assert {rec.status_key for rec in store.table.get_many([r.job_key(j) for j in ids])} == {
        r.job_status(JobState.PENDING, j) for j in ids}
    old = r.job_record(Job(job_id="old", kind="k", payload={}, bundle_id="b1",
                           created_at=T0 - 10, state=JobState.PENDING))
    old.status_key = "JOB#PENDING"  # as written before sharding
    store.table.write(Put(old))
    assert store.count_jobs(JobState.PENDING) == 13
    listed = store.list_jobs(JobState.PENDING, limit=None)  # newest first: the old one last
    assert len(listed) == 13 and listed[-1].job_id == "old"
    assert store.list_jobs(JobState.PENDING, limit=3) == listed[:3]
    store.cancel("old")
    cancelled = store.table.get(r.job_key("old"))
    assert cancelled is not None and cancelled.status_key == r.job_status("CANCELLED", "old")
    assert store.count_jobs(JobState.PENDING) == 12
    assert [i.job_id for i in store.list_jobs(JobState.CANCELLED)] == ["old"]


def test_running_jobs_read_whole_and_only_those_that_may_be_overdue(
        env: tuple[Store, Clock]) -> None:
    store, clock = env
    bundle = _record(store, "b1", "quick", "slow")
    fence = _launch(store, bundle, "arn:t1")
    store.claim(fence)
    store.table.write(Update(r.job_key("slow"), [Set("timeout_seconds", 100)]))
    store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.RUNNING, attempts_delta=1,
                                  history=[{"task_arn": "arn:t1", "started_at": clock.t}])
                        for j in ("quick", "slow")])
    running = store.running_jobs()
    assert sorted(j.job_id for j in running) == ["quick", "slow"]
    assert all(j.history and j.payload == {"i": j.job_id} for j in running)  # whole items
    assert store.running_jobs(overdue_by=T0 + 99) == []  # created at T0, 100 s of timeout
    (slow,) = store.running_jobs(overdue_by=T0 + 100)
    assert slow.job_id == "slow" and slow.history[-1]["started_at"] == clock.t
