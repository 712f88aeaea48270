"""The system model's ``starvation`` check where a tenant at its cap has more due bundles of a
limited kind than the kind has room for.

t2's report bundle was launched and its task stopped: a rerun, due. Five more high reports of
t2 come, t2's cap is set to 0, and a fire brings work of no tenant. The tick fitted the due
bundles to the kinds' room before the caps: t2's took the report kind's four slots, its fifth
marked the kind blocked (its oldest due bundle waiting for room, the younger ones behind it),
and then the cap held all of them. Nothing of the kind launched, yet it was blocked: its room
was 0 for the drain, any other tenant's report work waited behind t2's for as long as the cap
stood, and t2's jobs were told they waited for the kind's room (4 free), not for their
tenant's cap: to the model, due work with room left waiting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.waiting import FAIR_SHARE, TickSummary
from dispatcher.store import codec
from tests import model_promises as promises
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def report(**given: Any) -> dict[str, Any]:
    return spec(kind="report", priority="high", estimated_seconds=None, max_attempts=1,
                labels=None, uses=None, tenant="t2", **given)


def capped_backlog_of_a_kind(then: Callable[[model.SystemModel], None]
                             ) -> Callable[[model.SystemModel], None]:
    def scenario(m: model.SystemModel) -> None:
        m.change_settings("1", "report=4", "6", "true")
        m.submit(report(not_before=60.0), 1, True)
        m.tick(12)
        m.stop_event(None, again=False, old=False)  # type: ignore[arg-type]
        m.fire("fan", False, 1, "succeed")
        m.submit(report(), 5, False)
        m.tenant_cap("t2", 0)
        then(m)
    return scenario


def ticks(m: model.SystemModel) -> None:
    m.tick(12)


def another_tenants_report(m: model.SystemModel) -> None:
    """t1's report, behind t2's: it launches at the next tick."""
    m.tick(1)
    m.submit(spec(kind="report", priority="normal", estimated_seconds=None, labels=None,
                  uses=None, tenant="t1"), 1, False)
    m.tick(1)
    m.tick(1)


def test_a_capped_tenants_backlog_blocks_no_kind(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "starvation", capped_backlog_of_a_kind(ticks)) == []
    said = TickSummary.from_json(m.view().items[codec.TICK_KEY].summary)
    assert said.blocked == frozenset() and said.kinds["report"] == (0, 4)
    view, now = m.view(), m.twins.clock()
    held = [b for b in view.bundles() if b.tenant == "t2"]
    assert len(held) == 6
    assert {promises.waits(view, b, now).reason for b in held} == {FAIR_SHARE}


def test_another_tenants_work_of_the_kind_passes_a_capped_backlog(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "starvation", capped_backlog_of_a_kind(another_tenants_report)) == []
    t1 = [b for b in m.view().bundles() if b.tenant == "t1"]
    assert len(t1) == 1 and t1[0].state != BundleState.PENDING
