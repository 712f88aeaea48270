"""The system model's ``share_order`` check (tests/model_promises.py) where a tenant's work
below its share was held by its rate limit's tokens as the tick chose, and only by the slots
as it ended: the tokens came during a slow drain.

A limit of one token a burst (30/min). No tenant's high bundle and t1's normal one wait beside
t2's high bundle, whose one job takes a token. A tick takes that token for t2's launch and
dies before it: the token is not given back (the bucket's bound is never passed). The next
tick begins within the two seconds the token takes to come back: t2's bundle is held by its
tokens, and its tenant's target counts it not; the two free slots go to no tenant's bundle and
t1's. Its drain takes 36 s (6 s a receive), cuts t2's follow-ons, and at its end the token is
back, but no slot is left: t2's bundle says it waits for ``capacity``, while no tenant's work
runs past the target the tick ends with. That bundle was held by its tokens, not the slots, as
the order chose: no launch went past a share the order could give it. The check judged it by
what it said as the tick ended."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.waiting import TickSummary
from dispatcher.store import codec
from tests import model_promises as promises
from tests import model_tokens
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def tokens_back_during_a_slow_drain(m: model.SystemModel, burst: int = 1) -> None:
    """The shrunk steps of the model run that found it (``burst``: of 2, the tick that dies
    leaves a token for the next)."""
    m.rate_limit(burst=burst, key="api", rate="30/min")
    m.slow_drain_tick(urgent_at=1)
    m.submit(copies=5, nature="succeed", resend=False,
             spec=spec(priority="high", max_attempts=1, labels=None, uses=None, tenant=None))
    m.fire(copies=1, late=False, name="fan", nature="succeed")
    m.submit(copies=1, nature="succeed", resend=False,
             spec=spec(priority="high", estimated_seconds=3600.0, max_attempts=1, labels=None,
                       tenant="t2", uses={"api": 1}))
    m.urgent(1)
    m.urgent(1)
    m.contend(first="t1", nature="succeed")
    m.crashing_tick(expire_lease=False, writes=5)
    m.holds()
    m.slow_drain_tick(urgent_at=None)


def test_work_held_by_its_tokens_as_the_tick_chose_is_not_judged_by_the_slots(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "share_order", tokens_back_during_a_slow_drain) == []
    view = m.view()
    said = TickSummary.from_json(view.items[codec.TICK_KEY].summary)
    assert said is not None
    assert said.tenants["(none)"].tasks > said.tenants["(none)"].target  # launched past it
    assert said.tenants["t2"].tasks < said.tenants["t2"].target
    (held,) = [b for b in view.bundles() if b.tenant == "t2" and "@r." in b.bundle_id]
    assert held.state == BundleState.PENDING
    waits = promises.waits(view, held, m.twins.clock())
    assert waits is not None and waits.reason == "capacity"  # as the tick ended
    # Its tokens came during the drain: the sheds the summary asks are for its high work, so
    # a running task of no tenant, of high work, gives up its slot for it.
    assert said.shed == {"(none)": 1} and said.wanting == "high"


def test_share_order_still_judges_work_whose_tokens_were_there(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a bucket short as the tick began takes its work out of the check: with a burst of
    2 the tick that dies leaves a token, none is, and t2's bundle, furthest below its target,
    takes the high level's first slot."""
    held: list[set[str]] = []
    short_as_began = model_tokens.short_as_began
    monkeypatch.setattr(model_tokens, "short_as_began",
                        lambda *a: held.append(short_as_began(*a)) or held[-1])
    assert seen_by(machines(), "share_order", tokens_back_during_a_slow_drain) == []
    assert held[-1] == {"t2@r.b000006"}
    held.clear()
    m = machines()
    assert seen_by(m, "share_order", lambda m: tokens_back_during_a_slow_drain(m, 2)) == []
    assert not any(held)
    assert m.view().bundle("t2@r.b000006").state != BundleState.PENDING
