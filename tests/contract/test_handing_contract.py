"""Urgent jobs handed to a running bundle (dispatcher/store/handing.py), on the twin and on
DynamoDB (moto) alike: the job moves into the host under its fence, the runner learns it from
its heartbeat, and no write that ends or settles the host can close it over a job it missed."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, HandedJobs
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.store import Fence, JobUpdate, Store
from tests.contract.tables import BACKENDS, Clock, make_store, make_table
from tests.contract.test_store_contract import T0, _jobs, _launch

HOST_JOBS = ("h1", "h2", "h3")


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def running_host(store: Store) -> tuple[Bundle, Fence]:
    bundle = Bundle(bundle_id="host", job_ids=list(HOST_JOBS), next_attempt_at=T0,
                    created_at=T0)
    assert store.record([bundle], _jobs(*HOST_JOBS, bundle_id="host")) == set()
    fence = _launch(store, bundle, "arn:task/host")
    store.claim(fence)
    host = store.full_bundles(["host"])[0]
    return host, fence


def waiting_urgent(store: Store, *ids: str, bundle_id: str = "urgent") -> Bundle:
    """A high bundle recorded to wait (no slot was free), as a tick's intake records it."""
    bundle = Bundle(bundle_id=bundle_id, job_ids=list(ids), next_attempt_at=T0, created_at=T0,
                    priority=Priority.HIGH)
    jobs = _jobs(*ids, bundle_id=bundle_id)
    for j in jobs:
        j.priority = Priority.HIGH
    assert store.record([bundle], jobs) == set()
    return bundle


def test_a_handed_job_moves_into_the_running_bundle(store: Store) -> None:
    host, fence = running_host(store)
    assert host.takes_handed and host.handed_jobs == []  # its runner's claim said so
    source = waiting_urgent(store, "u1", "u2")
    assert store.hand(source, ["u1"], host) == ["u1"]
    u1 = store.get_job("u1")
    assert u1 is not None and u1.bundle_id == "host" and u1.state == JobState.PENDING
    left = store.get_bundle("urgent")
    assert left is not None and left.job_ids == ["u2"] and left.state == BundleState.PENDING
    got = store.get_bundle("host")
    assert got is not None and got.job_ids == [*HOST_JOBS, "u1"]  # a rerun would run it
    assert store.heartbeat(fence).handed == ("u1",)
    assert store.hand(source, ["u2"], host) == ["u2"]
    done = store.get_bundle("urgent")
    assert done is not None and done.state == BundleState.DONE  # nothing left to launch


def test_the_runners_end_cannot_close_the_bundle_over_a_handed_job(store: Store) -> None:
    host, fence = running_host(store)
    store.hand(waiting_urgent(store, "u1"), ["u1"], host)
    results = [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED, via=JobState.RUNNING,
                         attempts_delta=1) for j in HOST_JOBS]
    with pytest.raises(HandedJobs) as raised:
        store.apply(fence, results, BundleState.DONE, handed=0)  # it never saw u1
    assert raised.value.job_ids == ["u1"]
    bundle = store.get_bundle("host")
    assert bundle is not None and bundle.state == BundleState.RUNNING
    assert {j.job_id: j.state for j in store.get_jobs(list(HOST_JOBS))} == \
        dict.fromkeys(HOST_JOBS, JobState.SUCCEEDED)  # its results are written
    store.apply(fence, [JobUpdate("u1", JobState.PENDING, JobState.SUCCEEDED,
                                  via=JobState.RUNNING, attempts_delta=1)],
                BundleState.DONE, handed=1)
    bundle = store.get_bundle("host")
    assert bundle is not None and bundle.state == BundleState.DONE


def test_a_settle_read_before_a_hand_off_is_refused(store: Store) -> None:
    host, _ = running_host(store)
    stale = store.get_bundle("host")
    assert stale is not None
    store.hand(waiting_urgent(store, "u1"), ["u1"], host)
    with pytest.raises(ConflictError):
        store.settle(stale, [], BundleState.DONE)
    fresh = store.get_bundle("host")
    assert fresh is not None and "u1" in fresh.job_ids
    store.settle(fresh, [], BundleState.PENDING, retry_at=T0)  # the rerun takes u1 along


def test_nothing_moves_to_a_host_that_moved_on_or_a_job_cancelled(store: Store) -> None:
    host, _ = running_host(store)
    source = waiting_urgent(store, "u1", "u2")
    store.cancel("u1")
    assert store.hand(source, ["u1", "u2"], host) == ["u2"]  # u1 stays where it was
    u1 = store.get_job("u1")
    assert u1 is not None and u1.bundle_id == "urgent" and u1.state == JobState.CANCELLED
    stale = Bundle(**{**vars(host), "handed_jobs": []})  # read before that hand-off
    other = waiting_urgent(store, "u3", bundle_id="urgent2")
    assert store.hand(other, ["u3"], stale) == []
    u3 = store.get_job("u3")
    assert u3 is not None and u3.bundle_id == "urgent2"



def test_a_handed_job_with_a_timeout_gives_the_host_its_timeout(store: Store) -> None:
    """The host kept no timeout (none of its jobs has one); a job handed to it has: the host
    keeps the smallest from then on, so the tick's look for overdue jobs reads the running
    jobs while it runs (dispatcher/stages/reconcile.py)."""
    host, _ = running_host(store)
    assert host.timeout_seconds == 0
    bundle = Bundle(bundle_id="urgent", job_ids=["u1"], next_attempt_at=T0, created_at=T0,
                    priority=Priority.HIGH)
    (job,) = _jobs("u1", bundle_id="urgent")
    job.priority, job.timeout_seconds = Priority.HIGH, 45.0
    assert store.record([bundle], [job]) == set()
    source = store.full_bundles(["urgent"])[0]
    assert source.timeout_seconds == 45.0
    assert store.hand(source, ["u1"], host) == ["u1"]
    assert host.timeout_seconds == 45.0
    got = store.get_bundle("host")
    assert got is not None and got.timeout_seconds == 45.0
