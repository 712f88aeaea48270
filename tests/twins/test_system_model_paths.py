"""The system model's ``path_told`` check (tests/model_paths.py): the path a job's record
tells (``jobs show``, the console's state changes) is the one its state-change events told.
A run a Spot reclaim stopped (its job rerun), a retried failure and a cancel agree today;
with the rule for a stopped run broken (its rerun left out), the check sees it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from dispatcher.ops.history import Attempt
from dispatcher.ops.job_path import state_changes
from tests import model_paths
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, rounds, seen_by, spec, task

__all__ = ["machines"]  # the fixture, used by name


def reclaimed_retried_cancelled(m: model.SystemModel) -> None:
    m.submit(spec(max_attempts=1), 1, False, "fail")
    rounds(m, 3, "fail", 5.0)
    m.operator(Pick(m, first_failed), "retry", True)  # type: ignore[arg-type]
    m.submit(spec(), 1, False)
    m.tick(1)
    for sim in list(m.tasks.values()):
        if sim.alive:
            sim.claim()
            sim.start_next()
    m.advance(5.0)
    task(m).stop("SpotInterruption", "Your Spot Task was interrupted.", None)
    m.sync()
    rounds(m, 6, "succeed", 30.0)
    m.submit(spec(not_before=3600), 1, False)
    m.tick(1)
    m.operator(Pick(m, newest), "cancel", True)  # type: ignore[arg-type]
    rounds(m, 2, "succeed", 5.0)


class Pick:
    """The operator rule's draw, made by hand: the job ``choose`` names from the table."""

    def __init__(self, m: model.SystemModel, choose: Callable[[list[Any]], str]) -> None:
        self.m, self.choose = m, choose

    def draw(self, strategy: Any, label: str | None = None) -> str:
        return self.choose([rec for pk, rec in self.m.view().items.items()
                            if pk.startswith("JOB#")])


def first_failed(jobs: list[Any]) -> str:
    return sorted(rec.job_id for rec in jobs if rec.state == "FAILED")[0]


def newest(jobs: list[Any]) -> str:
    return max((rec.created_at or 0, rec.job_id) for rec in jobs)[1]


def test_the_path_a_record_tells_is_its_events(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "path_told", reclaimed_retried_cancelled) == []
    told = {(e.previous_state, e.state) for e in m.job_events.events}
    # What the scenario says it walks: a rerun, a retry of a failure, a cancel.
    assert {("RUNNING", "PENDING"), ("FAILED", "PENDING"), ("PENDING", "CANCELLED")} <= told


class First:
    """The stop-event rule's draw, made by hand: the first event."""

    def draw(self, strategy: Any, label: str | None = None) -> int:
        return 0


def rerun_then_failed_unrun(m: model.SystemModel) -> None:
    """Jobs whose handlers kill their task: a stop reruns them, and their relaunches spend
    their budgets, so some end FAILED without running again."""
    m.contend(None, "kill")
    m.stop_event(First(), False, False)  # type: ignore[arg-type]
    m.tick(12)
    m.runners_pass("by_nature")
    m.advance(130.0)
    m.tick(12)


def test_a_job_rerun_and_failed_before_it_ran_again_tells_its_rerun(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "path_told", rerun_then_failed_unrun) == []
    paths: dict[str, list[tuple[str | None, str]]] = {}
    for e in m.job_events.events:
        paths.setdefault(e.job_id, []).append((e.previous_state, e.state))
    assert any(p[-2:] == [("RUNNING", "PENDING"), ("PENDING", "FAILED")]
               for p in paths.values()), "no job was rerun and then failed unrun"


def _forgets_stopped_runs(created_at: float | None, state: str, updated_at: float | None,
                          reason: str | None, attempts: list[Attempt],
                          sequence: int | None = None) -> Any:
    kept = [replace(a, stopped_at=None) if a.outcome is None else a for a in attempts]
    return state_changes(created_at, state, updated_at, reason, kept, sequence)


def test_the_check_sees_a_rerun_left_out(machines: Callable[[], model.SystemModel],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_paths, "state_changes", _forgets_stopped_runs)
    seen = seen_by(machines(), "path_told", reclaimed_retried_cancelled)
    assert seen and "its events" in seen[0]


def failed_by_its_stop_then_retried(m: model.SystemModel) -> None:
    """A job of one attempt whose handler kills its task: the stop of its run fails it (no
    rerun), and an operator retries it."""
    m.submit(spec(priority="high", estimated_seconds=None, max_attempts=1), 1, False, "kill")
    m.slow_drain_tick(None)
    m.runners_pass("by_nature")
    m.stop_event(First(), False, False)  # type: ignore[arg-type]
    m.operator(Pick(m, first_failed), "retry", False)  # type: ignore[arg-type]


def test_a_job_its_stop_failed_then_retried_tells_no_rerun(
        machines: Callable[[], model.SystemModel]) -> None:
    # Its history's stop entry is not its last any more (the retry's boundary follows): it
    # reads as a rerun unless the state the retry found is taken as the job's ending.
    m = machines()
    assert seen_by(m, "path_told", failed_by_its_stop_then_retried) == []
    assert [(e.previous_state, e.state) for e in m.job_events.events] == [
        (None, "PENDING"), ("PENDING", "RUNNING"), ("RUNNING", "FAILED"),
        ("FAILED", "PENDING")]


def rerun_then_failed_unrun_then_retried(m: model.SystemModel) -> None:
    rerun_then_failed_unrun(m)
    for job_id in sorted(str(rec.job_id) for pk, rec in m.view().items.items()
                         if pk.startswith("JOB#") and rec.state == "FAILED"):
        m.operator(Pick(m, named(job_id)), "retry", False)  # type: ignore[arg-type]


def named(job_id: str) -> Callable[[list[Any]], str]:
    return lambda jobs: job_id


def test_a_job_rerun_and_failed_unrun_then_retried_tells_its_rerun(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "path_told", rerun_then_failed_unrun_then_retried) == []
    paths: dict[str, list[tuple[str | None, str]]] = {}
    for e in m.job_events.events:
        paths.setdefault(e.job_id, []).append((e.previous_state, e.state))
    assert any(p[-3:] == [("RUNNING", "PENDING"), ("PENDING", "FAILED"), ("FAILED", "PENDING")]
               for p in paths.values()), "no job was rerun, failed unrun and retried"
