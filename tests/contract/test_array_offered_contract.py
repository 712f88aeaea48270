"""An array parent's ``array_offered`` mark (dispatcher/store/array_jobs.py) and its cancel's
use of it (dispatcher/store/array_ops.py), on the twin and on DynamoDB (moto) alike: the mark
rises only while the parent is undecided, and a cancel records CANCELLED the children below it
that no tick recorded, and counts them."""

from __future__ import annotations

import pytest

from dispatcher.domain import arrays
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, JobState
from dispatcher.store import Store
from dispatcher.store import codec as r
from tests.contract.tables import BACKENDS, Clock, make_store, make_table
from tests.contract.test_store_contract import T0


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def parent(store: Store) -> None:
    job = Job(job_id="a", kind="k", payload={"day": 1}, array_size=10, created_at=T0,
              estimated_seconds=1.0)
    assert store.record_parents([job]) == set()


def test_the_mark_rises_only_while_the_parent_is_undecided(store: Store) -> None:
    parent(store)
    assert store.may_offer("a", 4)
    assert store.may_offer("a", 3)  # raised as far already: still offerable
    rec = store.table.get(r.job_key("a"))
    assert rec is not None and rec.array_offered == 4
    store.offered_back("a", 9, 2)  # not this caller's mark: left as it is
    assert store.table.get(r.job_key("a")).array_offered == 4  # type: ignore[union-attr]
    store.offered_back("a", 4, 2)
    assert store.table.get(r.job_key("a")).array_offered == 2  # type: ignore[union-attr]
    store.cancel("a")
    assert not store.may_offer("a", 6)


def test_a_cancel_records_the_offered_children_no_tick_recorded(store: Store) -> None:
    parent(store)
    assert store.may_offer("a", 3)
    child = arrays.child_of(store._job("a"), 0, T0)  # recorded by a tick that then died
    assert store.record([Bundle(bundle_id="b0", job_ids=[child.job_id], created_at=T0,
                                next_attempt_at=T0)], [child]) == set()
    assert store.cancel("a").state == JobState.CANCELLED
    children = store.get_jobs([arrays.child_id("a", i) for i in range(4)])
    assert [(c.array_index, c.state) for c in children] == [
        (0, JobState.CANCELLED), (1, JobState.CANCELLED), (2, JobState.CANCELLED)]
    assert children[1].payload == {"day": 1} and children[1].array_parent == "a"
    assert "before it was recorded" in (children[1].reason or "")
    assert children[1].bundle_id is None
    rec = store.table.get(r.job_key("a"))
    assert rec is not None and rec.array_next == 3
