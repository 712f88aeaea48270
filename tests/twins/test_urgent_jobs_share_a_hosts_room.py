"""Urgent jobs share a running task's hand-off room.

A tick hands a running task (a host) at most its slots' worth of urgent jobs
(dispatcher/stages/handoff.py): at one job at a time, one a tick. An urgent job taken in by a
look during a drain, before any task ran, is launched in a slot the drain left free at its
end (dispatcher/stages/due_work.py); one sent later, with every slot busy, is handed. The
system model's ``urgent_waits`` check counts the room the tick used, not only the queue's
jobs; these are its steps, replayed (tests/twins/test_system_model.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.domain.bundles import Bundle
from dispatcher.stages.handoff import Handoffs, HandoffStats
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines

__all__ = ["machines"]  # the fixture: fresh model worlds with every check on


class FirstDraw:
    """The model's ``data`` for a rule that picks a task: the first."""

    def draw(self, strategy: Any) -> int:
        return 0


@pytest.fixture
def world(machines: Callable[[], model.SystemModel]) -> model.SystemModel:
    """A fresh model world (as the model test sets it up), with every check on."""
    return machines()


def one_urgent_job_waits_in_the_table(m: model.SystemModel) -> None:
    """Two urgent jobs launch a task; a third, sent during that tick's drain, is taken in
    before the task runs; a fourth is queued; the operator leaves one task of one job at a
    time, and the task claims its bundle."""
    m.urgent(2)
    m.slow_drain_tick(urgent_at=1)
    m.holds()
    m.urgent(1)
    m.change_settings("1", "", "1")
    m.claim(FirstDraw())
    m.holds()


def test_an_urgent_job_a_look_took_in_gets_a_free_slot_and_the_next_one_is_handed(
        world: model.SystemModel) -> None:
    m = world
    one_urgent_job_waits_in_the_table(m)
    host = m.view().job("u001")
    assert host is not None and host.bundle_id is not None
    looked = m.view().job("u003")
    assert looked is not None and looked.bundle_id != host.bundle_id
    launched = m.view().bundle(looked.bundle_id or "")
    assert launched is not None and launched.state == "LAUNCHED"  # the slot the drain left

    m.slow_drain_tick(urgent_at=None)  # every model check holds, urgent_waits among them
    m.holds()
    handed = m.view().bundle(host.bundle_id)
    assert handed is not None and handed.handed_jobs == ["u004"]  # the room: one a tick


def test_a_tick_that_hands_less_than_its_room_still_fails_the_check(
        world: model.SystemModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not lost: a hand-off that hands nothing leaves the queue's urgent job
    waiting while the host's room was free."""
    m = world
    one_urgent_job_waits_in_the_table(m)

    def hands_nothing(self: Handoffs, sources: list[Bundle], hosts: list[Bundle],
                      stats: HandoffStats) -> None:
        return None

    monkeypatch.setattr(Handoffs, "hand", hands_nothing)
    with pytest.raises(AssertionError, match=r"\[urgent_waits\].*u004.*handed 0"):
        m.slow_drain_tick(urgent_at=None)
