"""The system model's ``work_conservation`` check on work that takes tokens, across a slow
drain: a bundle the tick held for its tokens as it began is looked at again as the drain
ends, and launched into a free slot if its tokens came meanwhile
(dispatcher/stages/tick.py, ``TickTokens.held_back``).

The sequence the model found: two high jobs each take a bucket's whole burst; a slow tick
launches the first and holds the second (its tokens come two seconds on); the next tick
begins before they come, and its drain takes eighteen seconds. Its drain's end used to look
only at the due work it had kept, so the second bundle idled beside a free slot until the
tick after, its jobs told that only the slots held them. With the look at what it held, it
launches then; with that look skipped, the check sees the slot left free."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES
from dispatcher.stages.tick_tokens import TickTokens
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name


def tokens_come_during_a_drain(m: model.SystemModel) -> None:
    m.stream()
    m.rate_limit("api:{tenant}", "1/s", 2)
    m.submit(spec(priority="high", estimated_seconds=None, max_attempts=1,
                  uses={"api:{tenant}": 2}), 2, False, "succeed")
    m.slow_drain_tick(None)  # launches one; the other's tokens come 2 s after it ends
    m.holds()
    m.slow_drain_tick(None)  # begins before they come; its drain takes 18 s


def test_work_held_for_its_tokens_launches_at_the_drains_end_once_they_come(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "work_conservation", tokens_come_during_a_drain) == []
    active = [b for b in m.twins.store.active_bundles() if b.state in ACTIVE_BUNDLE_STATES]
    assert len(active) == 2  # both launched, the second by the second tick's drain's end


def test_work_conservation_sees_the_held_work_left_beside_a_free_slot(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: the drain's end does not look again at what the tick held."""
    monkeypatch.setattr(TickTokens, "held_back", lambda self: [])
    seen = seen_by(machines(), "work_conservation", tokens_come_during_a_drain)
    assert seen and "beside a free slot" in seen[0] and "'reason': 'priority'" in seen[0]
