"""The system model's ``share_order`` check (tests/model_promises.py) when a tick's drain
launches work of a tenant whose work its due work's order saw less of: the order goes by the
targets the tick sees as it begins, and the drain's launches then raise their tenant's target
past what that order knew.

One slot first: a tick cuts t1's burst into follow-ons (one launched, the rest untaken) and
records a bundle of no tenant's, due, to wait beside them. Two urgent jobs of no tenant come to
the high queue, and the slots go to six. The next tick's targets are five for t1 and one for no
tenant's work (its one bundle is all it sees of it: the queue says how many jobs wait, not
whose); the high level's two slots go to the queue and the normal level's three to t1's
follow-ons, t1 the furthest below its target. The drain takes the urgent jobs in and launches
them: the targets the tick ends with count them, three each, t1 one past its own (and asked to
give that slot up) and no tenant's bundle left waiting. No launch was past a share the order
could know of: the check allows a tenant a slot of its target for each launch the drain made
of the others' work, as each moves one slot at most (and still sees a launch past that)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.waiting import TickSummary
from dispatcher.stages.tenant_slots import TenantSlots
from dispatcher.store import codec
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by, spec
from tests.twins.test_system_model_share_follow_ons import running

__all__ = ["machines"]  # the fixture, used by name


def slots_added_beside_urgent_jobs(m: model.SystemModel) -> None:
    """t1's burst and a job of no tenant on one slot; two urgent jobs; six slots."""
    m.change_settings("1", "", "1")
    m.burst(40, "succeed", "t1")
    m.submit(spec(), 1, False)  # of no tenant
    m.tick(1)
    m.holds()
    m.urgent(2)
    m.change_settings("1", "", "6")
    m.tick(1)


def summary(m: model.SystemModel) -> TickSummary:
    said = TickSummary.from_json(m.view().items[codec.TICK_KEY].summary)
    assert said is not None
    return said


def test_the_drains_urgent_launches_of_another_tenant_take_no_share_from_the_order(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "share_order", slots_added_beside_urgent_jobs) == []
    tasks = Counter((b.tenant or "(none)", str(b.priority)) for b in running(m))
    assert tasks == {("t1", "normal"): 4, ("(none)", "high"): 2}
    (left,) = [b for b in m.view().bundles() if b.state == BundleState.PENDING
               and b.tenant is None]
    assert str(left.priority) == "normal"
    said = summary(m)
    assert said.tenants["t1"].target == said.tenants["(none)"].target == 3
    assert said.shed == {"t1": 1} and said.wanting == "normal"  # the slot, given up for it


def long_jobs_beside_an_urgent_one(m: model.SystemModel) -> None:
    """As above, but no tenant's work is three jobs of ten minutes (a bundle each) due at
    once, and one urgent job: the order's targets are three each."""
    m.change_settings("1", "", "1")
    m.burst(40, "succeed", "t1")
    m.submit(spec(estimated_seconds=600.0, not_before=30.0), 3, False)  # of no tenant
    m.tick(1)
    m.holds()
    m.advance(60.0)
    m.urgent(1)
    m.change_settings("1", "", "6")
    m.tick(1)


def test_share_order_still_sees_a_launch_past_the_drains_slots(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: t1's work before any of no tenant's, whatever their shares. Its four
    normal slots all go to t1 (five tasks, past its three by more than the one slot the drain's
    urgent launch may have moved)."""
    assert seen_by(machines(), "share_order", long_jobs_beside_an_urgent_one) == []
    monkeypatch.setattr(TenantSlots, "order", lambda self, bundles, *_: sorted(
        bundles, key=lambda b: b.tenant is None))
    seen = seen_by(machines(), "share_order", long_jobs_beside_an_urgent_one)
    assert seen and "tenant t1 was launched past its share" in seen[0]
