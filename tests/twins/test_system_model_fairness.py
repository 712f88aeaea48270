"""Fairness of the launches, replayed as fixed sequences of the system model's steps
(tests/twins/test_system_model.py), each checked by the model's own invariants, and each shown to be
seen by the model's starvation check when the rule it covers is broken on purpose.

- A limited kind with a little room (less than its next bundle needs) and a deep backlog of
  its due bundles must not hide another kind's due bundle from the tick's read of due bundles.
- With one free task slot per tick, a low-priority bundle launches within
  :func:`dispatcher.domain.fairness.patience` ticks while high-priority work keeps arriving.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import pytest

from dispatcher.domain import fairness
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.stages import due_work as due_work_module
from dispatcher.stages.policy import TickPolicy
from dispatcher.store.stage_store import StageStore
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import _first_event, deliver_all, machines, spec, task

__all__ = ["machines"]  # the fixture: fresh model worlds with every check on


def limited_kind_backlog(m: model.SystemModel) -> None:
    """report=3 at 2 jobs per task: two long reports run (room 1), six bundles of two short
    reports each wait (each needs 2); a resize scheduled a minute ahead is then due behind
    them. The due read looks one bundle beyond the free slots (``DUE_LOOKAHEAD`` 1), so
    the backlog fills a read."""
    m.change_settings("2", "report=2", "6")
    m.submit(spec(kind="report", estimated_seconds=None), 2, False)
    m.tick(1)
    for n in (0, 1):  # the long reports start, and run on (heartbeating) to the end
        task(m, n).claim()
        task(m, n).start_next()
    for _ in range(6):  # recorded while report has no room: bundles of two, deferred
        m.submit(spec(kind="report", estimated_seconds=30.0), 2, False)
        m.tick(1)
    m.change_settings("2", "report=3", "6")
    m.submit(spec(kind="resize", estimated_seconds=None, not_before=60.0), 1, False)
    m.tick(1)
    m.advance(120.0)
    m.tick(12)
    m.tick(12)


def launched_at(m: model.SystemModel, job_id: str) -> int | None:
    """The index of the task started for ``job_id``'s bundle, if it was launched."""
    job = m.twins.job(job_id)
    assert job is not None
    bundle = m.twins.bundle(job.bundle_id or "")
    if bundle is None or bundle.state in (BundleState.PENDING, BundleState.RECORDING):
        return None
    return list(m.twins.launcher.tasks).index(bundle.task_arn) if bundle.task_arn else None


def one_slot_a_tick(m: model.SystemModel, ticks: int = 20) -> list[str]:
    """One task at a time, its job ending before each next tick (one free slot a tick): three
    high jobs and a low one scheduled a minute ahead are due together, and two more high ones
    are scheduled each tick, so high work is always due. Returns the priority of each task
    launched, in order."""
    m.stop_event = _first_event(m)  # type: ignore[method-assign]
    m.change_settings("1", "", "1")
    m.submit(spec(priority="high", estimated_seconds=None, not_before=60.0), 3, False)
    m.submit(spec(priority="low", estimated_seconds=None, not_before=60.0), 1, False)
    m.tick(1)
    m.advance(120.0)
    for _ in range(ticks):
        m.submit(spec(priority="high", estimated_seconds=None, not_before=60.0), 2, False)
        m.tick(1)
        task(m).pass_(lambda job_id: "succeed")
        m.sync()
        deliver_all(m)
        m.advance(60.0)
    out = []
    for arn in m.twins.launcher.tasks:
        bundle = m.twins.store.bundle_for_task(arn)
        assert bundle is not None
        out.append(str(bundle.priority))
    return out


def test_a_limited_kinds_backlog_does_not_hide_another_kind(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(due_work_module, "DUE_LOOKAHEAD", 1)
    m = machines()
    limited_kind_backlog(m)
    m.holds()
    resize = m.twins.job("j015")
    assert resize is not None and resize.kind == "resize"
    assert resize.bundle_id == "b000008"  # the bundle the broken read below leaves waiting
    assert launched_at(m, "j015") is not None


def test_the_starvation_check_sees_a_backlog_that_hides_another_kind(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken on purpose: the due read ignores the kinds left out (and the priorities asked
    for), returning the oldest due bundles each time, as before a blocked kind was left out
    of a next read."""
    monkeypatch.setattr(due_work_module, "DUE_LOOKAHEAD", 1)
    real = StageStore.due_page

    def oldest_only(self: StageStore, limit: int, at: float,
                    full_kinds: Collection[str] = (),
                    priorities: Collection[Priority] | None = None, *,
                    follow_ons: bool = False, after: Any = None,
                    apart: Collection[str] = ()) -> Any:
        return real(self, limit, at, follow_ons=follow_ons)

    monkeypatch.setattr(StageStore, "due_page", oldest_only)
    # A free slot left beside it is seen at once (work_conservation), before the ticks of
    # waiting add up (starvation).
    with pytest.raises(AssertionError, match=r"\[work_conservation\] bundle b000008 \(normal"):
        limited_kind_backlog(machines())


def test_low_priority_launches_within_its_patience_at_one_free_slot_a_tick(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    launched = one_slot_a_tick(m)
    m.holds()
    # Due from the first tick on, it launches within its patience (the n-th launch is the
    # n-th tick's).
    assert "low" in launched
    bound = fairness.patience(Priority.LOW, TickPolicy().priority_weights)
    assert launched.index("low") < bound, launched


def _highest_first(capacity: int, demand: Mapping[Priority, int], weights: Mapping[str, int],
                   credit: Mapping[str, float]) -> tuple[dict[Priority, int], dict[str, float]]:
    """The allocation as it was: every free slot to the highest level with work."""
    slots = dict.fromkeys(PRIORITY_ORDER, 0)
    left = capacity
    for p in PRIORITY_ORDER:
        slots[p] = min(left, max(0, demand.get(p, 0)))
        left -= slots[p]
    return slots, {}


def test_the_starvation_check_sees_low_priority_starve_behind_high(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(due_work_module, "allocate", _highest_first)
    with pytest.raises(AssertionError, match=r"\[starvation\].*\(low,"):
        one_slot_a_tick(machines())
