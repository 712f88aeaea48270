"""The system model's schedule check, shown able to fail: ``schedule_overlap`` (a ``skip``
schedule never has two of its fires' jobs pending or running at once, operators' retries
aside: tests/model_schedules.py). Its sequence: a fire of the skip schedule runs; a second
fire, sent twice, comes while the first one's job is still pending; a fire of the first one
delivered again, late. Today's code skips the second (dispatcher/stages/fires.py); with the
rule broken, both run."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.stages.fires import FireGate
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by

__all__ = ["machines"]  # the fixture, used by name


def two_fires_while_the_first_runs(m: model.SystemModel) -> None:
    m.fire("sync", False, 1, "succeed")
    m.tick(1)
    m.holds()
    m.advance(30.0)
    m.fire("sync", False, 2, "succeed")
    m.tick(1)
    m.holds()
    m.fire("sync", True, 1, "succeed")
    m.tick(1)


def test_a_skip_schedule_runs_one_fire_at_a_time(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "schedule_overlap", two_fires_while_the_first_runs) == []
    states = sorted(str(j.state) for j in m.twins.jobs() if j.job_id.startswith("schedule/"))
    assert states == ["CANCELLED", "PENDING"]


def test_the_overlap_check_sees_two_fires_run_at_once(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: every fire runs, whatever its schedule says."""
    monkeypatch.setattr(FireGate, "judge", lambda self, *args: None)
    seen = seen_by(machines(), "schedule_overlap", two_fires_while_the_first_runs)
    assert seen and "schedule sync skips overlapping fires, yet these run at once" in seen[0]
