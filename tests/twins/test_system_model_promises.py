"""The system model's promise checks, each shown able to fail: a fixed sequence of the model's
steps that today's code passes, and the same sequence failing once the rule the check guards
is broken on purpose.

- ``task_limit``: the tasks running never pass ``LONGJOBS_MAX_RUNNING_TASKS`` after a step
  that adds one. Its sequence: a batch's tasks run, the limit is lowered to one, a task is
  killed; its stop's rerun waits for the tick instead of relaunching at once beside the
  others (dispatcher/stages/rerun.py).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.store.base import Reads
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import deliver_all, machines, seen_by, task

__all__ = ["machines"]  # the fixture, used by name


def limit_lowered_then_a_kill(m: model.SystemModel) -> None:
    """Forty small jobs on three tasks; the limit lowered to one; a task is killed."""
    m.burst(40, "succeed")
    m.tick(1)
    m.holds()
    m.change_settings("1", "", "1")
    task(m, 0).stop("EssentialContainerExited", "OutOfMemoryError", 137)
    m.sync()
    m.holds()
    deliver_all(m)


def test_a_rerun_at_a_lowered_limit_waits_for_the_tick(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "task_limit", limit_lowered_then_a_kill) == []


def test_the_task_limit_check_sees_a_relaunch_past_the_limit(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: a stop relaunches its rerun whatever the others run."""
    monkeypatch.setattr(Reads, "active_count", lambda self: 0)
    seen = seen_by(machines(), "task_limit", limit_lowered_then_a_kill)
    assert seen and "3 tasks run after this step (2 before it), over the limit of 1" in seen[0]
