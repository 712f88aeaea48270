"""Links from a job to the jobs that wait for it, on both tables: a link counts once however
often it is made, a job not recorded cannot be linked (and says so), the links of a job are
found through the index, and a job's own writes keep its count of waiters."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.lifecycle import DEPENDENTS_HELD_AT
from dispatcher.store import Store
from tests.contract.tables import BACKENDS, Clock, make_store, make_table

T0 = 1_700_000_000.0


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def _record(store: Store, job: Job, due: float = T0) -> Bundle:
    bundle = Bundle(bundle_id=f"b-{job.job_id}", job_ids=[job.job_id], next_attempt_at=due,
                    created_at=T0)
    job.bundle_id = bundle.bundle_id
    assert store.record([bundle], [job]) == set()
    return bundle


def test_links_count_once_and_are_found_by_their_job(store: Store) -> None:
    _record(store, Job(job_id="a", kind="k", payload={}, created_at=T0))
    for dependent in ("d1", "d2", "d1"):
        assert store.link(dependent, ["a"]) == []
    assert store.link("d3", ["a", "ghost"]) == ["ghost"]  # not recorded: nothing written
    a = store.get_job("a")
    assert a is not None and a.waiters == 3
    assert sorted(store.waiting_for("a")) == ["d1", "d2", "d3"]
    assert store.waiting_for("ghost") == [] and store.get_job("ghost") is None


def test_a_held_dependent_is_found_released_and_then_no_longer_held(store: Store) -> None:
    dependent = Job(job_id="d", kind="k", payload={}, created_at=T0,
                    depends_on=[{"job_id": "a", "condition": "succeeded"}])
    bundle = _record(store, dependent, due=DEPENDENTS_HELD_AT)
    (held,) = store.held_dependents(["d", "ghost"])
    assert held[0].bundle_id == bundle.bundle_id
    assert [(b.bundle_id, j.job_id) for b, j in store.held_dependents()] == [
        (bundle.bundle_id, "d")]
    assert store.held_bundles() == []  # the retries' look does not read it
    store.release_held(*held)
    assert store.held_dependents(["d"]) == [] and store.held_dependents() == []
    got = store.get_bundle(bundle.bundle_id)
    assert got is not None and got.state == BundleState.PENDING and got.next_attempt_at == T0
    job = store.get_job("d")
    assert job is not None and job.state == JobState.PENDING and job.depends_on is None


def test_the_look_at_every_held_dependent_is_claimed_once_per_period(store: Store) -> None:
    clock = store.clock
    assert isinstance(clock, Clock)
    first = store.claim_sweep(300)
    assert first is not None
    assert store.claim_sweep(300) is None
    clock.t += 301
    assert store.claim_sweep(300) == clock.t
    # A look that could not do all it should gives its claim back: one a minute on may look.
    assert store.give_back_sweep(first, 300, 60) is False  # not the standing claim
    assert store.claim_sweep(300) is None
    claimed = clock.t
    assert store.give_back_sweep(claimed, 300, 60) is True
    clock.t += 30
    assert store.claim_sweep(300) is None
    clock.t += 31
    assert store.claim_sweep(300) == clock.t
    # Once a period: the look made again, cut short too, waits the whole period.
    assert store.give_back_sweep(clock.t, 300, 60) is False
    clock.t += 61
    assert store.claim_sweep(300) is None
    clock.t = claimed + 301
    assert store.claim_sweep(300) is None  # the period runs from the look made again
    clock.t = claimed + 61 + 301
    assert store.claim_sweep(300) == clock.t
    assert store.give_back_sweep(clock.t, 300, 60) is True  # a new period: given back
