"""The whole-system model's kind-limit check (tests/model_limits.py) on one scenario, played
step by step: four long reports at a limit of one, two ticks, every runner starting what it
may. The real tick launches one report at a time; a tick that forgets the slots its running
bundles hold launches a second, and the check says so."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.stages import bundle as bundle_stage
from dispatcher.stages.due_work import DueWork
from dispatcher.store import operator as operator_store
from tests.twins.test_system_model import SystemModel

REPORT: dict[str, Any] = {"kind": "report", "priority": "normal", "estimated_seconds": 600.0,
                          "not_before": None, "payload_bytes": 0, "max_attempts": 1,
                          "timeout_seconds": None}


def play(model: SystemModel) -> None:
    model.change_settings(concurrency="4", limits="report=1", tasks="3")
    model.submit(REPORT, 4, False)
    for _ in range(2):
        model.tick(1)
        for sim in model.tasks.values():
            if sim.phase == "new" and sim.alive:
                sim.claim()
            while sim.can_start():
                sim.start_next()
        model.holds()


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> SystemModel:
    monkeypatch.setattr(bundle_stage, "new_id", SystemModel.hooks_ids)
    monkeypatch.setattr(operator_store, "new_id", SystemModel.hooks_ids)
    return SystemModel()


def test_one_report_runs_at_a_limit_of_one(model: SystemModel) -> None:
    play(model)
    assert sum(len(sim.live_runs()) for sim in model.tasks.values()) == 1


def test_a_tick_that_forgets_its_running_bundles_is_caught(
        model: SystemModel, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DueWork, "kind_room", lambda self, active: dict(self._policy.kind_limits))
    with pytest.raises(AssertionError, match=r"\[kind_limit\] 2 handlers of kind report"):
        play(model)
