"""Due work that names a tenant makes the tick read the untaken follow-ons, even when the
lease says no tick before saw a tenant and that due work alone fills the free slots.

A tick drains tenant b's backlog (cut into follow-ons behind its first bundles) and tenant
a's jobs scheduled a little later, launches b's first bundles and dies before it gives the
lease back: no word of the tenants is left on the lease. b's tasks end their bundles without
taking a follow-on (as after a deploy). When a's jobs come due, the next tick has every slot
free, no task of a tenant running, and a's due work filling those slots (a read of it far
from full, so no cap was looked at). b is as far below its share as a: it gets its share of
the slots for its follow-ons, not none of them while a's work takes them all."""

from __future__ import annotations

import pytest

from dispatcher.domain.bundles import BundleState, untaken_follow_on
from dispatcher.domain.jobs import JobState
from dispatcher.store import codec
from tests.twins import Twins
from tests.twins.test_array_jobs import run_bundle

SLOTS = 4
ENV = {"LONGJOBS_MAX_RUNNING_TASKS": str(SLOTS), "LONGJOBS_TASK_CONCURRENCY": "1",
       "LONGJOBS_FOLLOW_ON_SECONDS": "10", "LONGJOBS_TICK_ONE_AT_A_TIME": "true"}


class LambdaDied(BaseException):
    """The tick's Lambda ended (killed, out of time) before it gave the lease back."""


def succeed(job: object) -> JobState:
    return JobState.SUCCEEDED


def test_a_tenants_follow_ons_get_its_share_beside_due_work_of_another_after_a_dead_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tw = Twins()
    client = tw.client()
    for i in range(SLOTS):  # each its own bundle, due in 30 s
        client.submit("k", {}, job_id=f"a{i}", estimated_seconds=1.0, tenant="a",
                      not_before=tw.clock() + 30 + i)
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"b{i:03d}",
                         "estimated_seconds": 1.0, "tenant": "b"} for i in range(200)])
    stages = tw.stages(**ENV)

    def dies(*args: object, **kwargs: object) -> None:
        raise LambdaDied

    with monkeypatch.context() as m:
        m.setattr(tw.store, "release_lease", dies)
        with pytest.raises(LambdaDied):
            stages.tick.tick()
    lease = tw.table.snapshot().get(codec.LEASE_KEY)
    assert lease is not None and lease.tenanted_at is None  # it left no word of the tenants
    first = tw.store.active_bundles()
    assert first and {b.tenant for b in first} == {"b"}
    for b in first:  # b's tasks end their bundles and take no follow-on
        assert b.task_arn is not None
        run_bundle(tw, b, b.task_arn, succeed, None)
    untaken = [b for b in tw.bundles() if untaken_follow_on(b) and b.tenant == "b"]
    assert untaken, "b's backlog was not cut into follow-ons: not the scenario meant"
    scheduled = [b for b in tw.bundles() if b.tenant == "a"]
    assert len(scheduled) == SLOTS and all(b.state == BundleState.PENDING for b in scheduled)

    tw.clock.advance(60)
    report = stages.tick.tick()
    assert report.capacity == SLOTS
    active = tw.store.active_bundles()
    running = sorted(str(b.tenant) for b in active)
    assert running == ["a", "a", "b", "b"], f"b's follow-ons did not get b's share: {running}"
    follow_ons = {b.bundle_id for b in untaken}
    assert all(b.bundle_id in follow_ons for b in active if b.tenant == "b")
