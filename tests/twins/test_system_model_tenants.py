"""The system model's ``tenants_apart`` check (tests/model_checks.py): no bundle holds another
tenant's job and no task runs two tenants' jobs; and its ``bulk_tenant`` check
(tests/model_operators.py): a bulk action by tenant acts on that tenant's jobs only; and its
``tenant_cap`` check (tests/model_limits.py): no step leaves a tenant past its cap.

Two tenants' bursts, more than the slots take at once, run to their end through follow-ons
and takes of other batches' work. Today nothing mixes; with the rule a take keeps broken (a task
that may run any tenant's follow-ons), or the bundler's (a shape that forgets the tenant), the
check sees it; with a bulk action's tenant ignored, ``bulk_tenant`` sees it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from dispatcher.domain import bundle_sizes, tenant_shares
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import JobState
from dispatcher.stages.tenant_slots import TenantLimits, TenantSlots
from dispatcher.store import follow_ons
from tests.twins import test_system_model as model
from tests.twins.test_system_model_bills import select_by_status_alone
from tests.twins.test_system_model_gaps import machines, rounds, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def two_tenants_bursts(m: model.SystemModel) -> None:
    m.burst(40, "succeed", "t1")
    m.burst(100, "succeed", "t2")
    m.burst(100, "succeed", None)
    m.tick(1)
    for _ in range(12):
        m.runners_pass("succeed")
        m.advance(5.0)
        m.tick(1)


def test_no_bundle_or_task_mixes_tenants(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "tenants_apart", two_tenants_bursts) == []
    owners = {b.tenant for b in m.view().bundles()}
    assert owners == {"t1", "t2", None}


def _any_tenant(ran: Bundle, other: Bundle) -> bool:
    return other.resources == ran.resources


def _shape_without_tenant(self: bundle_sizes.BundleSizes, job: object, at: float) -> object:
    shape = REAL_SHAPE(self, job, at)  # type: ignore[arg-type]
    return (*shape[:4], None, shape[5])


REAL_SHAPE = bundle_sizes.BundleSizes.shape


@pytest.mark.parametrize("broken", ["take", "shape"])
def test_the_check_sees_tenants_mixed(machines: Callable[[], model.SystemModel],
                                      monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    if broken == "take":
        monkeypatch.setattr(follow_ons, "task_can_run", _any_tenant)
    else:
        monkeypatch.setattr(bundle_sizes.BundleSizes, "shape", _shape_without_tenant)
    seen = seen_by(machines(), "tenants_apart", two_tenants_bursts)
    assert seen, f"a broken {broken} rule went unseen"


def bulk_cancel_by_tenant(m: model.SystemModel) -> None:
    m.submit(spec(tenant="t1"), 3, False)
    m.submit(spec(tenant="t2"), 2, False)
    m.submit(spec(), 2, False)  # of no tenant
    m.tick(1)
    m.bulk_action(("cancel", "PENDING"), None, None, False, 100, None, None, "t1")


def test_a_bulk_action_by_tenant_acts_on_its_jobs_only(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "bulk_tenant", bulk_cancel_by_tenant) == []
    touched = set(m.bulk_acts["bulk-000"]) | {j for _, j in m.bulk_requests["bulk-000"]}
    t1 = {j.job_id for j in m.twins.jobs() if j.tenant == "t1"}
    assert len(t1) == 3 and touched == t1  # cancelled, or asked of their tasks


def test_the_bulk_tenant_check_sees_a_job_of_another_tenant(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: a bulk action selects by its status alone, its tenant ignored."""
    select_by_status_alone(monkeypatch)
    seen = seen_by(machines(), "bulk_tenant", bulk_cancel_by_tenant)
    assert seen and "it is not of" in seen[0]


def capped_tenant(m: model.SystemModel) -> None:
    """t1 capped at one task, t2 at none: their jobs (each a task's own: not small) and a
    burst of small ones cut into follow-ons, with three slots; ticks and runs."""
    m.tenant_cap("t1", 1)
    m.tenant_cap("t2", 0)
    m.submit(spec(tenant="t1", estimated_seconds=600.0), 4, False)
    m.submit(spec(tenant="t2", estimated_seconds=600.0), 1, False)
    m.burst(60, "succeed", "t1")
    m.burst(60, "succeed", "t2")
    rounds(m, 4, "succeed", 5.0)


def test_a_tenants_cap_holds_at_every_step(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "tenant_cap", capped_tenant) == []
    assert {j.state for j in m.twins.jobs() if j.tenant == "t1"} >= {JobState.SUCCEEDED}
    assert {j.state for j in m.twins.jobs() if j.tenant == "t2"} == {JobState.PENDING}


def test_the_check_sees_a_cap_ignored(machines: Callable[[], model.SystemModel],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TenantSlots, "caps_left", lambda self: TenantLimits())
    monkeypatch.setattr(TenantSlots, "room", lambda self, tenant: None)
    seen = seen_by(machines(), "tenant_cap", capped_tenant)
    assert seen and "over its cap of 1" in seen[0]


def two_tenants_take_turns(m: model.SystemModel) -> None:
    """t1's six jobs of ten minutes (a task each), then t2's three, all held until a time
    (recorded due then: the due work a tick shares out, not the queue's order); with three
    slots, the tick they come due launches for both tenants."""
    m.submit(spec(tenant="t1", estimated_seconds=600.0, not_before=30.0), 6, False)
    m.tick(1)
    m.submit(spec(tenant="t2", estimated_seconds=600.0, not_before=30.0), 3, False)
    m.tick(1)
    m.advance(60.0)
    rounds(m, 2, "succeed", 5.0)


def test_the_tick_launches_for_the_tenant_below_its_share_first(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "share_order", two_tenants_take_turns) == []
    ran = {j.tenant for j in m.twins.jobs() if j.state != JobState.PENDING}
    assert ran == {"t1", "t2"}  # both got slots the tick their work came due


def test_share_order_sees_tenants_launched_by_age_alone(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: due work launched oldest first, whatever its tenant's share."""
    monkeypatch.setattr(TenantSlots, "order", lambda self, bundles, *_: bundles)
    seen = seen_by(machines(), "share_order", two_tenants_take_turns)
    assert seen and "launched past its share" in seen[0]


def second_tenant_behind_a_backlog(m: model.SystemModel) -> None:
    """t1's backlog holds every slot through follow-ons; t2's comes after it, of no task."""
    m.burst(300, "succeed", "t1")
    rounds(m, 2, "succeed", 5.0)
    m.burst(40, "succeed", "t2")
    rounds(m, 12, "succeed", 5.0)


def test_a_tenant_with_work_gets_a_slot_behind_another_tenants_backlog(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "tenant_turns", second_tenant_behind_a_backlog) == []
    ran = Counter(j.tenant for j in m.twins.jobs() if j.state == JobState.SUCCEEDED)
    assert ran["t2"] == 40 and ran["t1"] < 300  # t2 done while t1's backlog still ran


def test_tenant_turns_sees_a_tenant_shut_out_when_no_task_gives_up_its_slot(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rules: a task past its tenant's share never gives its slot up, nor leaves
    it to another tenant's first due work."""
    monkeypatch.setattr(follow_ons.FollowOns, "_gives_up", lambda self, done, summary: False)
    monkeypatch.setattr(follow_ons.FollowOns, "_yield_to", lambda self, other: False)
    seen = seen_by(machines(), "tenant_turns", second_tenant_behind_a_backlog)
    assert seen and "got no task" in seen[0]


def reserved_tenant(m: model.SystemModel) -> None:
    """t2 reserves two of the three slots (t1's weight of 3 would leave it one); t1's backlog
    holds them all when t2's four jobs (of ten minutes: a task each), held until a time, come
    due together."""
    m.tenant_cap("t1", None, weight=3.0)
    m.tenant_cap("t2", None, reserve=2)
    m.submit(spec(tenant="t2", estimated_seconds=600.0, not_before=20.0), 4, False)
    m.burst(300, "succeed", "t1")
    rounds(m, 10, "succeed", 5.0)


def test_a_reserve_is_kept(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "reserve_kept", reserved_tenant) == []
    assert seen_by(m, "tenant_turns", lambda m: None) == []
    t2 = [b for b in m.view().bundles() if b.tenant == "t2" and b.task_arn is not None]
    assert len(t2) >= 2  # its reserve, at once


def test_reserve_kept_sees_reserves_ignored(machines: Callable[[], model.SystemModel],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: the targets leave reserves out."""
    real = tenant_shares.targets

    def no_reserves(slots: int, loads: Any, policies: Any) -> dict[str, int]:
        return real(slots, loads, {t: replace(p, reserve=0) for t, p in policies.items()})

    monkeypatch.setattr(tenant_shares, "targets", no_reserves)
    seen = seen_by(machines(), "reserve_kept", reserved_tenant)
    assert seen and "reserve 2" in seen[0]


def reserve_behind_follow_ons(m: model.SystemModel) -> None:
    """t2, capped at none, has its burst cut into follow-ons; work of no tenant fills every
    slot; t2's cap is lifted and given a reserve of 2 while no slot is free: the tick sees
    t2's follow-ons (its only due work) and gives it its reserve."""
    m.tenant_cap("t2", 0)
    m.burst(40, "succeed", "t2")
    m.contend(None, "succeed")
    m.holds()
    m.tenant_cap("t2", None, reserve=2)
    m.contend(None, "succeed")


def test_a_reserve_is_kept_for_a_tenant_whose_due_work_is_all_follow_ons(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "reserve_kept", reserve_behind_follow_ons) == []


def reserve_of_a_running_tenant(m: model.SystemModel) -> None:
    """t1 (capped at 2) and t2 share the slots; t2, with one task and follow-ons left, is
    given a reserve of 2 while no slot is free: its follow-ons count towards it."""
    m.burst(40, "succeed", "t1")
    m.burst(40, "succeed", "t2")
    m.tenant_cap("t1", 2)
    m.slow_drain_tick(None)
    m.advance(8_640_000.0)
    m.tenant_cap("t2", None, reserve=2)
    m.ttl()
    m.tick(1)


def test_a_running_tenants_follow_ons_count_towards_its_reserve(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "reserve_kept", reserve_of_a_running_tenant) == []


def reserve_for_work_that_takes_tokens(m: model.SystemModel) -> None:
    """An array of no tenant fills the slots; t1's one job, which takes a rate limit's
    tokens (there to take), waits; t1 is given a reserve of 1 while no slot is free."""
    m.submit_array(7, 0, "succeed", 1.0, None)
    m.slow_drain_tick(None)
    m.submit(spec(priority="high", estimated_seconds=None, max_attempts=1, tenant="t1",
                  uses={"api": 1}), 1, False)
    m.tick(1)
    m.tenant_cap("t1", None, reserve=1)
    m.slow_drain_tick(None)


def test_a_reserve_is_kept_for_a_tenant_whose_due_work_takes_tokens(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "reserve_kept", reserve_for_work_that_takes_tokens) == []
    rounds(m, 3, "succeed", 5.0)  # a slot given up for it, then its launch
    (t1,) = [b for b in m.view().bundles() if b.tenant == "t1"]
    assert t1.task_arn is not None
