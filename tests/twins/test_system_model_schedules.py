"""The system model's schedule check, shown able to fail: ``schedule_overlap`` (a ``skip``
schedule never has two of its fires' jobs pending or running at once, operators' retries
aside: tests/model_schedules.py). Its sequence: a fire of the skip schedule runs; a second
fire, sent twice, comes while the first one's job is still pending; a fire of the first one
delivered again, late. Today's code skips the second (dispatcher/stages/fires.py); with the
rule broken, both run. And a fire waits for a run that an operator's retry of a skipped fire
was put beside, after the retried job is cancelled again."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain import schedules
from dispatcher.stages.fires import FireGate
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import _Draws as Draws
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


def a_retried_fire_cancelled_beside_a_live_run(m: model.SystemModel) -> None:
    """The first fire runs and the second is skipped; an operator runs the second after all
    (beside the first, which still waits) and cancels it again; a third fire comes."""
    m.fire("sync", False, 1, "succeed")
    m.fire("sync", False, 1, "succeed")
    m.tick(1)
    m.holds()
    second = schedules.fire_id("sync", m.fired["sync"][1])
    m.operator(Draws(second), "retry_from_scratch", False)  # type: ignore[arg-type]
    m.holds()
    m.operator(Draws(second), "cancel", False)  # type: ignore[arg-type]
    m.holds()
    m.fire("sync", False, 1, "succeed")
    m.tick(1)


def test_a_fire_waits_for_the_run_an_operators_retry_was_put_beside(
        machines: Callable[[], model.SystemModel]) -> None:
    """The retried fire's job ended (cancelled), but the first fire's job is still pending:
    the third fire is skipped, not run beside it."""
    m = machines()
    assert seen_by(m, "schedule_overlap", a_retried_fire_cancelled_beside_a_live_run) == []
    first, second, third = (schedules.fire_id("sync", at) for at in m.fired["sync"])
    states = {j.job_id: str(j.state) for j in m.twins.jobs() if j.job_id.startswith("schedule/")}
    assert states == {first: "PENDING", second: "CANCELLED", third: "CANCELLED"}
