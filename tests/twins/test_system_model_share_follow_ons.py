"""The system model's ``share_order`` check (tests/model_promises.py) where a capped tenant's
due work spans two priorities: the caps count against a tenant what launches, not what the
priorities' sharing of the slots then leaves waiting.

t2, capped at one task with a reserve of one and no task running, has a high bundle due and
follow-ons (normal) that no task of its takes; work of no tenant is due at both priorities too.
The free slots are shared between the levels (one each), and the high one goes to the work of
no tenant (the two tenants are as far below their targets, and its name comes first). Its cap
then still has room: the normal slot goes to t2's follow-on, the tenant furthest below its
target, not to a second task of no tenant's past its share. A cap counted against t2's high
bundle before the levels' slots were known (the due work filtered by the caps across the
levels first) held its follow-ons back as if that bundle had launched."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.bundles import (
    ACTIVE_BUNDLE_STATES,
    Bundle,
    follow_on_batch,
    follow_on_id,
)
from dispatcher.stages.tenant_slots import TenantSlots
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def capped_tenant_at_two_levels(m: model.SystemModel) -> None:
    """t2, capped at none, has its burst cut into follow-ons beside a burst of no tenant's;
    t1's job of ten minutes starts; a high bundle of t2's and of no tenant's, and a normal one
    of no tenant's, are recorded due in 300 s. The tasks of no tenant run their batch out and
    end (t1's runs on); t2 is given a cap of one and a reserve of one, and the three come due:
    two slots free, for t2 with no task and its follow-ons, and the work of no tenant."""
    m.tenant_cap("t2", 0)
    m.holds()
    m.submit(spec(tenant="t1", estimated_seconds=600.0), 1, False)
    m.burst(40, "succeed", "t2")
    m.burst(40, "succeed", None)
    m.submit(spec(priority="high", estimated_seconds=600.0, not_before=300.0), 1, False)
    m.submit(spec(priority="high", estimated_seconds=600.0, not_before=300.0, tenant="t2"), 1,
             False)
    m.submit(spec(estimated_seconds=600.0, not_before=300.0), 1, False)
    m.tick(1)
    m.holds()
    for sim in list(m.tasks.values()):
        if sim.key[0].startswith("t1@"):
            sim.claim()
            sim.start_next()
        while sim.key[0].startswith("b") and sim.alive:  # of no tenant: to its batch's end
            sim.pass_(lambda job_id: "succeed")
    m.sync()
    m.holds()
    m.tenant_cap("t2", 1, reserve=1)
    m.holds()
    m.advance(300.0)
    m.tick(1)


def running(m: model.SystemModel) -> list[Bundle]:
    return [b for b in m.view().bundles() if b.state in ACTIVE_BUNDLE_STATES]


def test_a_capped_tenants_follow_on_takes_the_slot_its_high_bundle_was_not_given(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "share_order", capped_tenant_at_two_levels) == []
    tenants = sorted(b.tenant or "(none)" for b in running(m))
    assert tenants == ["(none)", "t1", "t2"]  # each its share: t2 one task, at its cap
    (t2,) = [b for b in running(m) if b.tenant == "t2"]
    # Its batch's first follow-on (normal), not its high bundle, which waits for its cap
    assert t2.bundle_id == follow_on_id(follow_on_batch(t2.bundle_id), 0)


REAL_WITHIN_CAPS = TenantSlots.within_caps


def test_share_order_sees_a_cap_counted_against_work_left_waiting(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: the due work filtered by the caps across the levels before their
    slots are known (a tenant's first bundles take its cap, launched or not)."""
    def across_levels(self: TenantSlots, bundles: list[Bundle],
                      by_level: bool = False) -> list[Bundle]:
        return REAL_WITHIN_CAPS(self, bundles)

    monkeypatch.setattr(TenantSlots, "within_caps", across_levels)
    seen = seen_by(machines(), "share_order", capped_tenant_at_two_levels)
    assert seen and "t2" in seen[0] and "waiting for follow_on" in seen[0]
