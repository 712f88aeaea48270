"""A runner's take of its batch's next follow-on (dispatcher/store/follow_ons.py), on the twin
and on DynamoDB (moto) alike: the follow-on moves onto the task under the fence a launch would
give it, the task's pointer follows it, two takers never take one, and a deploy, a limit on
its kind or the batch's end stop the takes."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import Bundle, BundleState, follow_on_id
from dispatcher.domain.deployment import Deployment
from dispatcher.domain.errors import ConflictError, HandedJobs
from dispatcher.domain.jobs import JobState, Resources
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.table import Set, Update
from dispatcher.store import Fence, JobUpdate, Store
from dispatcher.store import codec as r
from dispatcher.store.follow_ons import Take
from dispatcher.store.values import JobOutcomes
from tests.contract.tables import BACKENDS, Clock, make_store, make_table
from tests.contract.test_store_contract import T0, _jobs, _launch

BATCH = "batch1"
REVISION = "fam:1"  # what tests.contract.test_store_contract._launch launches on


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def record(store: Store, bundle_id: str, *job_ids: str, kind: str | None = None) -> Bundle:
    bundle = Bundle(bundle_id=bundle_id, job_ids=list(job_ids), next_attempt_at=T0,
                    created_at=T0, batch=BATCH, kind=kind)
    assert store.record([bundle], _jobs(*job_ids, bundle_id=bundle_id)) == set()
    return bundle


def follow_ons(store: Store, n: int, kind: str | None = None) -> None:
    for k in range(n):
        record(store, follow_on_id(BATCH, k), f"f{k}", kind=kind)


def tick(store: Store, revision: str = REVISION, kinds: dict[str, tuple[int, int]] | None = None,
         version: int | None = None) -> None:
    """The last tick's word: its revision, the deployment record's version it was decided on
    (0: no record; None: not decided on the record) and the kinds with a limit."""
    store.save_tick_summary(TickSummary(at=T0, active=1, max_running=1, kinds=kinds or {}),
                            revision, version)


def run_to_done(store: Store, bundle: Bundle, arn: str) -> Bundle:
    """Claim ``bundle`` (LAUNCHED on ``arn``), succeed its jobs and end it DONE."""
    fence = Fence(bundle.bundle_id, bundle.attempt, arn)
    claimed = store.claim(fence).bundle
    store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED,
                                  via=JobState.RUNNING, attempts_delta=1)
                        for j in claimed.job_ids], BundleState.DONE)
    done = store.get_bundle(bundle.bundle_id)
    assert done is not None and done.state == BundleState.DONE
    return done


def first_wave(store: Store, arn: str = "arn:task/1", bundle_id: str = "w1") -> Bundle:
    bundle = record(store, bundle_id, f"{bundle_id}-j")
    _launch(store, bundle, arn)
    launched = store.get_bundle(bundle_id)
    assert launched is not None
    return run_to_done(store, launched, arn)


def test_a_runner_takes_its_batch_follow_ons_one_after_another_then_stops_at_the_end(
        store: Store) -> None:
    follow_ons(store, 2)
    tick(store)
    done = first_wave(store)
    pointer = store.table.get(r.task_key("arn:task/1"))
    assert pointer is not None and pointer.expires_at is not None  # the DONE write set it
    take = store.take_follow_on(done, "arn:task/1")
    assert take.bundle is not None
    got = store.get_bundle(take.bundle.bundle_id)
    assert got is not None and got.state == BundleState.LAUNCHED and got.attempt == 1
    assert got.task_arn == "arn:task/1" and got.task_definition == REVISION
    assert store.bundle_for_task("arn:task/1") == got  # its stop settles the follow-on
    pointer = store.table.get(r.task_key("arn:task/1"))
    assert pointer is not None and pointer.expires_at is None  # needed again
    first = take.bundle.bundle_id
    done = run_to_done(store, take.bundle, "arn:task/1")
    take = store.take_follow_on(done, "arn:task/1")
    assert take.bundle is not None
    assert {first, take.bundle.bundle_id} == {follow_on_id(BATCH, 0), follow_on_id(BATCH, 1)}
    done = run_to_done(store, take.bundle, "arn:task/1")
    # None recorded after them, the drain still going: look again later.
    assert store.take_follow_on(done, "arn:task/1").later
    store.end_batch(BATCH, 2)
    assert store.take_follow_on(done, "arn:task/1") == Take(None, later=False)
    assert {j.state for j in store.get_jobs(["w1-j", "f0", "f1"])} == {JobState.SUCCEEDED}


def test_a_follow_on_recorded_after_the_last_one_taken_is_still_found(store: Store) -> None:
    """The drain records follow-ons as it admits: the cursor moves past what was taken, not
    past those not recorded yet."""
    follow_ons(store, 1)
    tick(store)
    done = first_wave(store)
    took = store.take_follow_on(done, "arn:task/1").bundle
    assert took is not None and took.bundle_id == follow_on_id(BATCH, 0)
    record(store, follow_on_id(BATCH, 1), "f1")  # recorded only now
    done = run_to_done(store, took, "arn:task/1")
    again = store.take_follow_on(done, "arn:task/1").bundle
    assert again is not None and again.bundle_id == follow_on_id(BATCH, 1)


def test_two_runners_never_take_one_follow_on_and_the_cursor_passes_none_left(
        store: Store) -> None:
    follow_ons(store, 3)
    tick(store)
    a = first_wave(store, "arn:task/a", "wa")
    b = first_wave(store, "arn:task/b", "wb")
    took_a = store.take_follow_on(a, "arn:task/a").bundle
    took_b = store.take_follow_on(b, "arn:task/b").bundle
    assert took_a is not None and took_b is not None
    assert took_a.bundle_id != took_b.bundle_id
    (left,) = {follow_on_id(BATCH, n) for n in range(3)} - {took_a.bundle_id, took_b.bundle_id}
    cursor = store.table.get(r.batch_key(BATCH))
    assert cursor is not None and int(cursor.batch_next or 0) <= int(left.rsplit("-", 1)[1])


def test_a_taker_that_read_a_follow_on_another_took_meanwhile_reads_again(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    follow_ons(store, 1)
    store.end_batch(BATCH, 1)
    tick(store)
    a = first_wave(store, "arn:task/a", "wa")
    b = first_wave(store, "arn:task/b", "wb")
    read = store.table.get_many
    raced: list[bool] = []

    def get_many(pks: list[str]) -> object:
        recs = read(pks)
        if r.bundle_key(follow_on_id(BATCH, 0)) in pks and not raced:
            raced.append(True)  # a takes what b has just read as PENDING, before b's write
            took = store.take_follow_on(a, "arn:task/a").bundle
            assert took is not None and took.bundle_id == follow_on_id(BATCH, 0)
        return recs

    monkeypatch.setattr(store.table, "get_many", get_many)
    assert store.take_follow_on(b, "arn:task/b") == Take(None)  # refused, then none left
    only = store.get_bundle(follow_on_id(BATCH, 0))
    assert raced and only is not None and only.task_arn == "arn:task/a" and only.attempt == 1
    assert store.bundle_for_task("arn:task/a") == only
    wb = store.bundle_for_task("arn:task/b")
    assert wb is not None and wb.bundle_id == "wb"  # b's pointer did not move


def test_a_follow_on_the_tick_launched_is_skipped(store: Store) -> None:
    follow_ons(store, 2)
    tick(store)
    launched = store.get_bundle(follow_on_id(BATCH, 0))
    assert launched is not None
    _launch(store, launched, "arn:task/other")  # a slot freed: the tick launched it
    done = first_wave(store)
    take = store.take_follow_on(done, "arn:task/1")
    assert take.bundle is not None and take.bundle.bundle_id == follow_on_id(BATCH, 1)
    other = store.get_bundle(follow_on_id(BATCH, 0))
    assert other is not None and other.task_arn == "arn:task/other" and other.attempt == 1


def test_a_follow_on_to_run_one_job_at_a_time_is_taken_so(store: Store) -> None:
    """A follow-on the tick launched, whose task's ambiguous stop settled it to run one job at a
    time (``slots`` 1), keeps that when a runner takes it."""
    follow_ons(store, 1)
    store.table.write(Update(r.bundle_key(follow_on_id(BATCH, 0)), [Set("slots", 1)]))
    tick(store)
    took = store.take_follow_on(first_wave(store), "arn:task/1").bundle
    got = store.get_bundle(follow_on_id(BATCH, 0))
    assert took is not None and took.slots == 1 and got is not None and got.slots == 1


def test_a_revision_the_last_tick_did_not_launch_takes_nothing(store: Store) -> None:
    follow_ons(store, 1)
    tick(store, "fam:2")  # the last tick launched another revision
    done = first_wave(store)
    assert store.take_follow_on(done, "arn:task/1").bundle is None
    left = store.get_bundle(follow_on_id(BATCH, 0))
    assert left is not None and left.state == BundleState.PENDING  # the tick launches it


@pytest.mark.parametrize("deployed_before", [False, True])
def test_a_deploy_since_the_last_tick_ends_the_takes_at_once(store: Store,
                                                              deployed_before: bool) -> None:
    """The tick decided its revision on the deployment record as it was (none, or version
    1); a deploy since writes the next version, and no take commits after it."""
    follow_ons(store, 2)
    first = Deployment(image="img:1", task_definition="fam:1", derived_from="fam:1")
    read = store.save_deployment(first, None) if deployed_before else None
    tick(store, version=read.version if read is not None else 0)
    done = first_wave(store)
    took = store.take_follow_on(done, "arn:task/1").bundle
    assert took is not None
    done = run_to_done(store, took, "arn:task/1")
    store.save_deployment(Deployment(image="img:2", task_definition="fam:3",
                                     derived_from="fam:1"), read)
    assert store.take_follow_on(done, "arn:task/1").bundle is None
    (other,) = {follow_on_id(BATCH, 0), follow_on_id(BATCH, 1)} - {took.bundle_id}
    left = store.get_bundle(other)
    assert left is not None and left.state == BundleState.PENDING and left.attempt == 0


def test_a_follow_on_of_a_kind_limited_since_it_was_recorded_is_left_to_the_tick(
        store: Store) -> None:
    follow_ons(store, 1, kind="report")
    tick(store, kinds={"report": (0, 1)})
    done = first_wave(store)
    assert store.take_follow_on(done, "arn:task/1").bundle is None
    left = store.get_bundle(follow_on_id(BATCH, 0))
    assert left is not None and left.state == BundleState.PENDING


def test_a_task_whose_pointer_moved_on_takes_nothing(store: Store) -> None:
    follow_ons(store, 1)
    tick(store)
    done = first_wave(store)
    store.table.write(Update(r.task_key("arn:task/1"), [Set("bundle_id", "elsewhere")]))
    assert store.take_follow_on(done, "arn:task/1").bundle is None
    left = store.get_bundle(follow_on_id(BATCH, 0))
    assert left is not None and left.state == BundleState.PENDING and left.attempt == 0



def run_to_end(store: Store, bundle: Bundle, arn: str) -> tuple[Fence, Bundle]:
    """Claim ``bundle`` (LAUNCHED on ``arn``) and write its jobs' results, not ending it."""
    fence = Fence(bundle.bundle_id, bundle.attempt, arn)
    claimed = store.claim(fence).bundle
    store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED,
                                  via=JobState.RUNNING, attempts_delta=1)
                        for j in claimed.job_ids])
    return fence, claimed


def first_wave_running(store: Store, arn: str = "arn:task/1") -> tuple[Fence, Bundle]:
    bundle = record(store, "w1", "w1-j")
    _launch(store, bundle, arn)
    launched = store.get_bundle("w1")
    assert launched is not None
    return run_to_end(store, launched, arn)


def test_a_take_ends_the_bundle_before_it_in_the_same_transaction(store: Store) -> None:
    """The task holds one active bundle throughout: the one it ended is DONE exactly when
    the follow-on is LAUNCHED on it, and RUNNING still when none is taken."""
    follow_ons(store, 1)
    tick(store)
    fence, ran = first_wave_running(store)
    take = store.end_and_take(fence, ran, JobOutcomes(1, 0))
    assert take.bundle is not None and take.bundle.bundle_id == follow_on_id(BATCH, 0)
    ended = store.get_bundle("w1")
    assert ended is not None and ended.state == BundleState.DONE
    pointer = store.table.get(r.task_key("arn:task/1"))
    assert pointer is not None and pointer.bundle_id == follow_on_id(BATCH, 0)
    assert pointer.expires_at is None
    fence, ran = run_to_end(store, take.bundle, "arn:task/1")
    store.end_batch(BATCH, 1)
    assert store.end_and_take(fence, ran, JobOutcomes(1, 0)) == Take(None)
    left = store.get_bundle(follow_on_id(BATCH, 0))
    assert left is not None and left.state == BundleState.RUNNING  # ended alone by the caller
    assert [b.bundle_id for b in store.active_bundles()] == [follow_on_id(BATCH, 0)]


def test_a_take_whose_bundle_was_handed_jobs_meanwhile_writes_nothing(store: Store) -> None:
    follow_ons(store, 1)
    tick(store)
    fence, ran = first_wave_running(store)
    store.table.write(Update(r.bundle_key("w1"), [Set("handed", 1),
                                                   Set("handed_jobs", ["urgent"])]))
    with pytest.raises(HandedJobs) as more:
        store.end_and_take(fence, ran, JobOutcomes(1, 0), handed=0)
    assert more.value.job_ids == ["urgent"]
    ended = store.get_bundle("w1")
    left = store.get_bundle(follow_on_id(BATCH, 0))
    assert ended is not None and ended.state == BundleState.RUNNING
    assert left is not None and left.state == BundleState.PENDING and left.attempt == 0


def test_a_take_by_a_task_that_lost_its_bundle_is_a_conflict(store: Store) -> None:
    follow_ons(store, 1)
    tick(store)
    fence, ran = first_wave_running(store)
    store.table.write(Update(r.bundle_key("w1"), [Set("attempt", 2)]))  # a newer attempt
    with pytest.raises(ConflictError):
        store.end_and_take(fence, ran, JobOutcomes(1, 0))
    left = store.get_bundle(follow_on_id(BATCH, 0))
    assert left is not None and left.state == BundleState.PENDING and left.attempt == 0


def test_a_runner_at_its_batchs_end_takes_another_batchs_follow_on_into_that_batch(
        store: Store) -> None:
    tick(store)
    done = first_wave(store)
    store.end_batch(BATCH, 0)  # a batch of one bundle, and over
    assert store.take_follow_on(done, "arn:task/1") == Take(None)  # none anywhere
    other = Bundle(bundle_id=follow_on_id("batch2", 0), job_ids=["g0"], next_attempt_at=T0,
                   created_at=T0, batch="batch2")
    assert store.record([other], _jobs("g0", bundle_id=other.bundle_id)) == set()
    take = store.take_follow_on(done, "arn:task/1")
    assert take.bundle is not None and take.bundle.bundle_id == other.bundle_id
    got = store.get_bundle(other.bundle_id)
    assert got is not None and (got.state, got.task_arn, got.batch) == (
        BundleState.LAUNCHED, "arn:task/1", "batch2")  # its next take is of batch2
    assert store.bundle_for_task("arn:task/1") == got


def test_a_runner_whose_batch_has_none_ready_yet_takes_another_batchs_rather_than_wait(
        store: Store) -> None:
    """A batch whose drain has not written its end (still recording, or its tick died) has
    none ready: another batch's ready follow-on is taken rather than waiting for more."""
    tick(store)
    done = first_wave(store)
    assert store.take_follow_on(done, "arn:task/1") == Take(None, later=True)
    other = Bundle(bundle_id=follow_on_id("batch2", 0), job_ids=["g0"], next_attempt_at=T0,
                   created_at=T0, batch="batch2")
    assert store.record([other], _jobs("g0", bundle_id=other.bundle_id)) == set()
    take = store.take_follow_on(done, "arn:task/1")
    assert take.bundle is not None and take.bundle.bundle_id == other.bundle_id


def test_a_runner_of_a_bundle_of_no_batch_takes_a_batchs_follow_on_into_that_batch(
        store: Store) -> None:
    """A task launched for a bundle alone (a backlog too small to follow on, a retry) goes on
    with a batch's follow-on as it ends it: a stream's ticks cut follow-ons for every running
    task. None anywhere, or a revision the last tick did not launch: it takes nothing."""
    tick(store)
    alone = Bundle(bundle_id="alone", job_ids=["a0"], next_attempt_at=T0, created_at=T0)
    assert store.record([alone], _jobs("a0", bundle_id="alone")) == set()
    _launch(store, alone, "arn:task/1")
    launched = store.get_bundle("alone")
    assert launched is not None and launched.batch is None
    done = run_to_done(store, launched, "arn:task/1")
    assert store.take_follow_on(done, "arn:task/1") == Take(None)  # none anywhere
    other = Bundle(bundle_id=follow_on_id("batch2", 0), job_ids=["g0"], next_attempt_at=T0,
                   created_at=T0, batch="batch2")
    assert store.record([other], _jobs("g0", bundle_id=other.bundle_id)) == set()
    # The last tick cut none and left none due (its summary): nothing is looked for.
    assert store.take_follow_on(done, "arn:task/1") == Take(None)
    fed = TickSummary(at=T0, active=1, max_running=1, fed_seconds=30.0)
    store.save_tick_summary(fed, "fam:2", None)  # a deploy: the rest is the tick's to launch
    assert store.take_follow_on(done, "arn:task/1") == Take(None)
    # Other due work of its priority or higher waits: the slot is left to the tick for it.
    store.save_tick_summary(TickSummary(at=T0, active=1, max_running=1, fed_seconds=30.0,
                                        others_due={"high": 1}), REVISION, None)
    assert store.take_follow_on(done, "arn:task/1") == Take(None)
    store.save_tick_summary(fed, REVISION, None)
    take = store.take_follow_on(done, "arn:task/1")
    assert take.bundle is not None and take.bundle.bundle_id == other.bundle_id
    got = store.get_bundle(other.bundle_id)
    assert got is not None and (got.state, got.task_arn, got.batch) == (
        BundleState.LAUNCHED, "arn:task/1", "batch2")
    assert store.bundle_for_task("arn:task/1") == got


@pytest.mark.parametrize("word", [{"fed_seconds": 30.0}, {"small_jobs_left": True}])
def test_a_runner_with_none_to_take_after_a_tick_that_fed_the_tasks_hears_when(
        store: Store, word: dict[str, object]) -> None:
    """None to take anywhere, but the last tick fed the running tasks as a stream's do, or
    left small jobs in the queue for want of slots: the take says when that tick ended, so
    the runner may wait for the next one's. A trickle's tick (fed little) says nothing."""
    tick(store)
    done = first_wave(store)
    store.end_batch(BATCH, 0)
    at = T0 + 30
    store.save_tick_summary(TickSummary(at=at, active=1, max_running=1, **word),  # type: ignore[arg-type]
                            REVISION, None)
    assert store.take_follow_on(done, "arn:task/1") == Take(None, fed_at=at)
    store.save_tick_summary(TickSummary(at=at, active=1, max_running=1, fed_seconds=5.0),
                            REVISION, None)
    assert store.take_follow_on(done, "arn:task/1") == Take(None)
    # Other due work waits for a slot: the task leaves its slot to the tick, however fed.
    store.save_tick_summary(TickSummary(at=at, active=1, max_running=1, others_due={"low": 1},
                                        **word), REVISION, None)  # type: ignore[arg-type]
    assert store.take_follow_on(done, "arn:task/1") == Take(None)


@pytest.mark.parametrize("why", ["resources", "kind with room"])
def test_a_runner_fed_for_a_stream_does_not_wait_beside_follow_ons_only_its_slot_can_run(
        store: Store, why: str) -> None:
    """The last tick fed the running tasks, but a follow-on waits that this task cannot run
    (other resources; a limited kind, which the tick launches, with room): the runner does
    not hold its slot empty for the next tick's, it leaves it to that follow-on (one runner
    does; the others wait as before). A limited kind at its limit takes no slot yet: the
    runner waits as before."""
    tick(store)
    done = first_wave(store)
    store.end_batch(BATCH, 0)
    cpu = 2048 if why == "resources" else None
    kind = "gpu" if why == "kind with room" else None
    other = Bundle(bundle_id=follow_on_id("batch2", 0), job_ids=["g0"], next_attempt_at=T0,
                   created_at=T0, batch="batch2", kind=kind,
                   resources=Resources(cpu=cpu, memory=4096 if cpu else None))
    assert store.record([other], _jobs("g0", bundle_id=other.bundle_id)) == set()
    at = T0 + 30
    kinds = {"gpu": (1, 2)} if kind else {}
    store.save_tick_summary(TickSummary(at=at, active=1, max_running=1, fed_seconds=30.0,
                                        kinds=kinds), REVISION, None)
    assert store.take_follow_on(done, "arn:task/1") == Take(None)
    got = store.get_bundle(other.bundle_id)
    assert got is not None and got.state == BundleState.PENDING  # the tick's to launch
    # One task leaves its slot for it; the next to find it waits for the stream as before.
    second = first_wave(store, "arn:task/2", "w2")
    assert store.take_follow_on(second, "arn:task/2") == Take(None, fed_at=at)
    if kind:
        store.save_tick_summary(TickSummary(at=at, active=1, max_running=1, fed_seconds=30.0,
                                            kinds={"gpu": (2, 2)}), REVISION, None)
        assert store.take_follow_on(done, "arn:task/1") == Take(None, fed_at=at)


def test_a_tenants_runner_takes_its_own_younger_batch_past_others_older_follow_ons(
        store: Store) -> None:
    """Its batch over, a tenant's task reads its tenant's untaken follow-ons only: a later
    drain's batch of its tenant, behind more of other tenants' (older; one whose name begins
    with its own among them) than one read returns, is taken, not left to the tick."""
    tick(store)
    mine = Bundle(bundle_id="t0@w1", job_ids=["t0-w"], next_attempt_at=T0, created_at=T0,
                  batch="t0@b1")
    assert store.record([mine], _jobs("t0-w", bundle_id="t0@w1")) == set()
    store.end_batch("t0@b1", 0)
    _launch(store, mine, "arn:task/1")
    launched = store.get_bundle("t0@w1")
    assert launched is not None
    done = run_to_done(store, launched, "arn:task/1")
    for n, tenant in enumerate(["t1", "t0x", "t0-", None] * 4):  # older than the one of t0
        batch = f"{tenant}@o{n}" if tenant else f"o{n}"
        other = Bundle(bundle_id=follow_on_id(batch, 0), job_ids=[f"o{n}"],
                       next_attempt_at=T0 - 100 + n, created_at=T0, batch=batch)
        assert store.record([other], _jobs(f"o{n}", bundle_id=other.bundle_id)) == set()
    young = Bundle(bundle_id=follow_on_id("t0@b2", 0), job_ids=["y0"], next_attempt_at=T0,
                   created_at=T0, batch="t0@b2")
    assert store.record([young], _jobs("y0", bundle_id=young.bundle_id)) == set()
    take = store.take_follow_on(done, "arn:task/1")
    assert take.bundle is not None and take.bundle.bundle_id == young.bundle_id


def test_the_untaken_follow_ons_read_past_some_tenants(store: Store) -> None:
    """``apart``: the tenants whose follow-ons the read leaves out (their running tasks take
    them), by the keys' ranges; a tenant whose name begins with one of theirs is not one."""
    for n, tenant in enumerate(["t0", "t0x", None, "t0-", "t1"]):
        batch = f"{tenant}@q{n}" if tenant else f"q{n}"
        b = Bundle(bundle_id=follow_on_id(batch, 0), job_ids=[f"q{n}"], next_attempt_at=T0,
                   created_at=T0, batch=batch)
        assert store.record([b], _jobs(f"q{n}", bundle_id=b.bundle_id)) == set()
    got = store.due_bundles(10, T0 + 1, follow_ons=True, apart={"t0", "t1"})
    assert sorted(str(b.tenant) for b in got) == ["None", "t0-", "t0x"]
    assert len(store.due_bundles(10, T0 + 1, follow_ons=True)) == 5
