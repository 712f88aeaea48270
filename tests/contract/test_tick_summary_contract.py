"""The tick's summary (what a job's ``waiting_for`` is derived from) and the bundles' records
the operator reads with it, the same on the twin and on DynamoDB."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job
from dispatcher.domain.waiting import TickSummary
from dispatcher.store import Store
from dispatcher.store import codec as r
from tests.contract.tables import BACKENDS, Clock, make_store, make_table

T0 = 1_700_000_000.0


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Store:
    return make_store(make_table(request), Clock(T0))


def test_the_summary_round_trips_and_expires_a_day_later(store: Store) -> None:
    assert store.tick_summary() is None
    summary = TickSummary(at=T0, active=3, max_running=10, kinds={"render": (2, 4)},
                          left_due={"high": 1, "low": 7})
    store.save_tick_summary(summary)
    assert store.tick_summary() == summary
    rec = store.table.get(r.TICK_KEY)
    assert rec is not None and rec.expires_at == int(T0 + 86400)


def test_bundle_records_reads_each_bundle_once(store: Store) -> None:
    for n in range(3):
        bundle = Bundle(bundle_id=f"b{n}", job_ids=[f"j{n}"], next_attempt_at=T0,
                        created_at=T0)
        store.record([bundle], [Job(job_id=f"j{n}", kind="k", payload={}, bundle_id=f"b{n}",
                                    created_at=T0)])
    recs = store.bundle_records(["b0", "b2", "b0", "missing"])
    assert sorted(rec.pk for rec in recs) == [r.bundle_key("b0"), r.bundle_key("b2")]
