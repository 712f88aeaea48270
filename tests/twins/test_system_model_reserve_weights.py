"""The system model's ``reserve_kept`` check (tests/model_promises.py) where another tenant's due
work comes before a reserved tenant's, with no slot free: a tenant given no slot of its own, or
one with neither a task nor a policy.

An array of no tenant's jobs of ten minutes holds the slots; t2's burst, older than t1's,
waits with no task of t2's running: its weight set to 0 (so no running task gives up its slot
for it), or its cap reached. t1, with a reserve of 2 and no task, has a batch of follow-ons
behind it. With no slot free the tick's looks at the due work page past the running tenants'
work until they hold another tenant's: they stopped at t2's, which never gets a task of its
own and so never joins the running tenants, and t1's work went unseen, its reserve never given
and no task asked to give up a slot for it, for as long as t2's work waited."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.waiting import TickSummary
from dispatcher.store import codec
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def reserve_behind_work_given_no_slot(given_none: str) -> Callable[[model.SystemModel], None]:
    def scenario(m: model.SystemModel) -> None:
        m.submit_array(7, 0, "succeed", 600.0, None)
        m.burst(40, "succeed", "t2")
        m.tenant_cap("t1", None, reserve=2)
        m.contend(None, "succeed")  # no tenant's burst, then t1's behind it
        if given_none == "weight":
            m.tenant_cap("t2", None, weight=0.0)
        else:
            m.tenant_cap("t2", 0)
        m.runners_pass("raise")
        m.tick(12)
    return scenario


@pytest.mark.parametrize("given_none", ["weight", "cap"])
def test_a_reserve_is_kept_behind_the_work_of_a_tenant_given_no_slot(
        machines: Callable[[], model.SystemModel], given_none: str) -> None:
    m = machines()
    assert seen_by(m, "reserve_kept", reserve_behind_work_given_no_slot(given_none)) == []
    said = TickSummary.from_json(m.view().items[codec.TICK_KEY].summary)
    assert said.tenants["t1"].target >= 2  # its reserve, its work seen past t2's


def reserve_behind_a_tenant_without_a_task(m: model.SystemModel) -> None:
    """t2's jobs take a rate limit's tokens: one task of t2 runs, the rest wait for tokens.
    With one slot, no tenant's burst (older) and t1's (a reserve of 1, no task) wait behind
    it. The looks paged past the running tenant's work and stopped at the first other
    tenant's: no tenant's, of no policy and no task; t1's, younger, went unseen, its target
    0, and the slot was promised to no tenant's work instead."""
    m.submit_array(7, 0, "succeed", 600.0, None)
    m.submit(spec(tenant="t2", priority="high", max_attempts=1, labels=None,
                  uses={"api": 1}), 15, False)
    m.advance(1.0)
    m.flaky_tick(1, False)
    m.stream()
    m.stream()
    m.change_settings("1", "", "1", "true")
    m.tenant_cap("t1", None, reserve=1)
    m.contend(None, "succeed")  # no tenant's burst, then t1's behind it
    m.tick(12)


def test_a_reserve_is_kept_behind_the_work_of_a_tenant_without_a_task(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "reserve_kept", reserve_behind_a_tenant_without_a_task) == []
    said = TickSummary.from_json(m.view().items[codec.TICK_KEY].summary)
    assert said.tenants["t1"].target >= 1  # its reserve, its work seen past no tenant's
