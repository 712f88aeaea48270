"""The system model's ``reserve_kept`` check (tests/model_promises.py) on a slow drain: a
tenant's work that came due while the drain let the time go by was not due when the tick looked
at the due work, and its reserve is kept for it from the next tick on.

A tenant given a reserve sends a high job 60 s out; the tick whose drain takes the time past
it (6 s a receive of a backlog of 40) ends with that work due, held by the slots, and no target
for the tenant: the tick's look at the due work came before it was due. The check judged that
work due by the time the tick ended, and said the reserve was not kept."""

from __future__ import annotations

from collections.abc import Callable

from dispatcher.domain.bundles import BundleState
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def _step(m: model.SystemModel) -> None:
    """The invariants the machine checks after every step."""
    m.holds()
    m.operators_hold()


def reserve_due_during_a_drain(m: model.SystemModel) -> None:
    m.submit(spec(priority="high", not_before=60.0, estimated_seconds=None), 1, True)
    _step(m)
    m.tenant_cap("t2", None, reserve=2)
    _step(m)
    m.stream()
    m.deploy_code(False, None)
    m.stream()
    _step(m)
    m.submit(spec(priority="high", estimated_seconds=None), 1, False)
    for _ in range(3):
        m.stream()
        _step(m)
    m.slow_drain_tick(None)
    _step(m)
    m.submit_array(2, 0, "succeed", 1.0)
    m.stream()
    m.stream()
    _step(m)
    # Due 60 s out: during the next-but-one tick's drain, after its look at the due work.
    m.submit(spec(tenant="t2", priority="high", not_before=60.0, max_attempts=1,
                  estimated_seconds=None), 1, False)
    m.stream()
    m.slow_drain_tick(None)
    _step(m)
    m.burst(40, "succeed", None)
    for _ in range(20):
        m.stream()
        _step(m)
    m.submit_array(2, 0, "succeed", 1.0)
    m.slow_drain_tick(None)


def test_work_due_during_a_drain_waits_for_the_next_tick(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "reserve_kept", reserve_due_during_a_drain) == []
    # The scenario's point: t2's work came due during the last tick, and waits for the slots.
    view = m.view()
    t2 = [b for b in view.bundles() if b.tenant == "t2"]
    assert t2 and all(b.state == BundleState.PENDING for b in t2)
