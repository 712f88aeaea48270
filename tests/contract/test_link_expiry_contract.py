"""Links of long-waiting dependents, on both tables: the links missing of a list are found by
key, and a link's expiry is moved on once its dependent's wait crosses half the retention
period (never for a link that was not made)."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.store.base import DEFAULT_RETENTION_DAYS
from tests.contract.tables import BACKENDS, Clock, make_store, make_table

T0 = 1_700_000_000.0
HALF = DEFAULT_RETENTION_DAYS * 86400 / 2


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def _record(store: Store, job_id: str) -> None:
    job = Job(job_id=job_id, kind="k", payload={}, created_at=T0, bundle_id=f"b-{job_id}")
    assert store.record([Bundle(bundle_id=f"b-{job_id}", job_ids=[job_id],
                                next_attempt_at=T0, created_at=T0)], [job]) == set()


def _expiry(store: Store, job_id: str, dependent_id: str) -> int | None:
    rec = store.table.get(r.waiter_key(job_id, dependent_id))
    assert rec is not None
    return rec.expires_at


def test_missing_links_are_found_and_long_waits_move_their_expiry_on(store: Store) -> None:
    _record(store, "a")
    assert store.link("d", ["a", "ghost"]) == ["ghost"]
    assert store.unlinked([("a", "d"), ("a", "e"), ("ghost", "d")]) == [("a", "e"),
                                                                         ("ghost", "d")]
    made = _expiry(store, "a", "d")
    assert made == int(T0 + 2 * HALF)
    dependent = Job(job_id="d", kind="k", payload={}, created_at=T0,
                    depends_on=[{"job_id": "a", "condition": "succeeded"},
                                {"job_id": "ghost", "condition": "succeeded"}])
    clock = store.clock
    assert isinstance(clock, Clock)
    clock.t = T0 + HALF - 1  # not half a period yet
    assert store.refresh_links([dependent], 600) == 0
    clock.t = T0 + HALF + 300  # crossed within the last 600 s: moved on (ghost: no link)
    assert store.refresh_links([dependent], 600) == 1
    assert _expiry(store, "a", "d") == int(clock.t + 2 * HALF)
    assert store.table.get(r.waiter_key("ghost", "d")) is None
    clock.t = T0 + HALF + 900  # crossed longer ago: the look before moved it
    assert store.refresh_links([dependent], 600) == 0
