"""Rate limits and their buckets (dispatcher.store.rate_buckets) the same on the twin and on
DynamoDB: a limit set, read and removed; a take's two conditional writes grant and refuse
alike, whichever the taker tries first; the shards read back; a bundle's and a job's ``uses``
round-trip; a summary's ``rate_limit`` waits too."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.domain.waiting import RateWait, TickSummary
from dispatcher.store import Store
from tests.contract.tables import BACKENDS, Clock, make_store, make_table

T0 = 1_700_000_000.0
LIMIT = RateLimit(rate=2.0, burst=4.0, shards=2, said="2/s")  # a shard: 1/s, burst 2


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def test_a_limit_is_set_read_and_removed(store: Store) -> None:
    assert store.rate_limits() == {}
    store.set_rate_limit("api", LIMIT)
    store.set_rate_limit("db:{tenant}", RateLimit(rate=0.5, burst=1.0, said="30/min"))
    assert store.rate_limits()["api"] == LIMIT
    store.set_rate_limit("api", None)
    assert set(store.rate_limits()) == {"db:{tenant}"}


@pytest.mark.parametrize("known", [None, T0 + 100.0])  # the idle form first, the busy one
def test_takes_grant_and_refuse_alike(store: Store, known: float | None) -> None:
    granted = [store.take("api", 0, 1, LIMIT, T0, known) for _ in range(3)]
    assert granted == [T0 + 1.0, T0 + 2.0, None]  # a shard's burst of 2
    assert store.take("api", 1, 2, LIMIT, T0, known) == T0 + 2.0  # the other shard: its own
    assert store.take("api", 0, 1, LIMIT, T0 + 1.0, known) == T0 + 3.0  # a token came
    assert store.take("api", 0, 3, LIMIT, T0 + 50.0, known) is None  # over a shard's burst
    assert store.buckets([("api", 0), ("api", 1), ("api", 2)]) == {
        ("api", 0): T0 + 3.0, ("api", 1): T0 + 2.0}


def test_uses_and_rate_waits_round_trip(store: Store) -> None:
    bundle = Bundle(bundle_id="r.b0", job_ids=["j0"], next_attempt_at=T0, created_at=T0,
                    uses={"api": 2})
    store.record([bundle], [Job(job_id="j0", kind="k", payload={}, bundle_id="r.b0",
                                created_at=T0, uses={"api": 2})])
    assert store.bundles_of(["r.b0"])[0].uses == {"api": 2}
    job = store.get_job("j0")
    assert job is not None and job.uses == {"api": 2}
    summary = TickSummary(at=T0, active=1, max_running=2,
                          rate_limits={"api": RateWait(T0 + 5.0, 2, 2.0, "api")})
    store.save_tick_summary(summary)
    assert store.tick_summary() == summary
