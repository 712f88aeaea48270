"""The label index's writes (dispatcher/store/label_index.py) on the twin and on DynamoDB (moto)
alike: a job's entry lives twice the retention past its due time, and a message sent again
never shortens it (its write is conditional: kept where the entry expires later)."""

from __future__ import annotations

import pytest

from dispatcher.domain.jobs import Job
from dispatcher.store import Store, codec
from dispatcher.store.label_index import label_key
from tests.contract.tables import BACKENDS, Clock, make_store, make_table

T0 = 1_700_000_000.0
DAY = 86_400


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def job(not_before: float | None, job_id: str = "j1") -> Job:
    return Job(job_id=job_id, kind="k", payload={}, created_at=T0, not_before=not_before,
               labels={"team": "a"}, tenant="acme")


def expiry(store: Store, key: str, value: str, job_id: str = "j1") -> int | None:
    rec = store.table.get(label_key(key, value, job_id))
    assert rec is not None, f"no entry {key}={value} for {job_id}"
    return None if rec.expires_at is None else int(rec.expires_at)


def test_an_entry_lives_twice_the_retention_past_its_job_due_time(store: Store) -> None:
    due = T0 + 180 * DAY
    store.index_labels([job(due)])
    assert expiry(store, "team", "a") == int(due + 60 * DAY)
    assert expiry(store, "@tenant", "acme") == int(due + 60 * DAY)
    assert [r.job_id for r in store.table.query(f"LABEL#team=a#{codec.shard('j1')}")] == ["j1"]


def test_a_message_sent_again_sooner_keeps_the_first_entry(store: Store) -> None:
    due = T0 + 180 * DAY
    store.index_labels([job(due), job(None, "j2")])
    store.index_labels([job(None), job(None, "j2")])  # j1 again, now; j2 again, as it was
    assert expiry(store, "team", "a") == int(due + 60 * DAY)  # not cut to 60 days from now
    assert expiry(store, "team", "a", "j2") == int(T0 + 60 * DAY)


def test_a_message_sent_again_later_moves_the_entry_on(store: Store) -> None:
    store.index_labels([job(None)])
    later = T0 + 90 * DAY
    store.index_labels([job(later)])
    assert expiry(store, "team", "a") == int(later + 60 * DAY)
