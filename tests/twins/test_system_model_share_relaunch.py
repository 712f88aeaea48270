"""The system model's ``share_order`` check (tests/model_promises.py) where a level below
relaunched a tenant's rerun: that launch is the lower level's, and no launch of the levels
above it.

Five low jobs of no tenant take a rate limit's tokens; a task of theirs is killed, and its
stop puts its bundle back, due, for a second attempt. Then t1's burst (a foothold and
follow-ons) comes beside no tenant's fire's follow-ons, all normal. With three slots free the
priorities give normal 2 and low 1; the targets are no tenant's 2 and t1's 1. Within the
normal level no tenant is further below its target (by 2) and takes both slots, as the order
launches a level at a time, counting only the levels above; then the low level's one slot
relaunches no tenant's rerun: 3 tasks for a target of 2, t1's foothold left. The check judged
the normal level's launches with that relaunch counted among them (it left relaunches out
of the lower levels' launches it takes away), and said the normal level launched no tenant's
work past its share beside t1's. The tick's summary asks no tenant to give a slot up for t1's
work, and the next tick sees to it."""

from __future__ import annotations

from collections.abc import Callable

from dispatcher.domain.waiting import TickSummary
from dispatcher.store import codec
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import _Draws as Draws
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def rerun_relaunched_below(m: model.SystemModel) -> None:
    """The shrunk steps of the model run that found it."""
    m.fire(copies=1, late=False, name="fan", nature="succeed")
    m.submit(copies=5, nature="succeed", resend=False,
             spec=spec(priority="low", max_attempts=1, labels=None, tenant=None,
                       uses={"api": 1}))
    m.stream()
    m.stream()
    m.flaky_tick(k=1, lost=False)
    m.kill(Draws(0), ("EssentialContainerExited", 137))  # type: ignore[arg-type]
    m.burst(copies=40, nature="succeed", tenant="t1")
    m.slow_drain_tick(urgent_at=None)
    m.stop_event(None, again=False, old=False)  # type: ignore[arg-type]
    m.stream()
    m.stream()
    m.runners_pass(behaviour="succeed")
    m.tick(ticks=1)


def test_a_relaunch_below_is_no_launch_of_the_levels_above(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "share_order", rerun_relaunched_below) == []
    view = m.view()
    said = TickSummary.from_json(view.items[codec.TICK_KEY].summary)
    assert said is not None
    # The scenario's point: no tenant past its target with the low level's relaunch, t1
    # below its own, and the sheds ask for t1's normal work.
    assert said.tenants["(none)"].tasks == 3 and said.tenants["(none)"].target == 2
    assert said.tenants["t1"].tasks == 0 and said.tenants["t1"].target == 1
    assert said.shed == {"(none)": 1} and said.wanting == "normal"
    rerun = view.bundle("r.b000000")
    assert rerun is not None and rerun.attempt == 2 and str(rerun.priority) == "low"
