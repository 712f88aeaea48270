"""The system model's fault rules (tests/model_faults.py) as fixed sequences: a tick that dies
after each of its writes in turn, then ticks that take over what it left; a table that fails
longer than the store retries, and the check that the tick gives the messages back, shown able
to fail."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.stages import recorder as recorder_module
from tests import model_checks as checks
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, spec

__all__ = ["machines"]  # the fixture: fresh model worlds with every check on

TRIES = 5  # TableRetry's attempts
WRITES = 8  # the table writes of the tick below: its lease's first, its summary with its
# lease's last (one transaction), its claim of the look at every held dependent (its backlog,
# 9 jobs for 3 slots, is too small to be cut into follow-ons: no revision written as it begins)


@pytest.mark.parametrize("writes", range(WRITES + 1))
def test_a_tick_that_dies_after_any_write_is_taken_over(
        machines: Callable[[], model.SystemModel], writes: int) -> None:
    m = machines()
    m.change_settings("2", "", "3")
    m.submit(spec(estimated_seconds=None), 5, False)  # long jobs: a bundle each
    m.submit(spec(), 4, False)  # short ones: bundled together
    m.crashing_tick(writes, True)
    assert m.table.deaths == (writes < WRITES)  # after the last write, the tick ended well
    m.holds()
    m.tick(1)  # takes over: recovers recordings and launches, records what came back
    m.holds()
    bundles = m.twins.bundles()
    assert not [b for b in bundles if b.state in (BundleState.RECORDING, BundleState.LAUNCHING)]
    view = checks.View.read(m.table, m.twins.queue)
    waiting = {j for j in m.submitted if view.job(j) is None}
    assert all(view.queued_job(j) for j in waiting)  # beyond the slots: still in the queue
    assert m.twins.queue_counts()[1] == 0  # and none of them held
    assert 1 <= len(m.twins.launcher.tasks) <= 3  # at most three at once (none twice: holds)


def test_a_table_failing_beyond_the_retries_gives_the_messages_back(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    m.submit(spec(), 3, False)
    m.flaky_tick(TRIES + 1, False)
    # The first bundle (two jobs) fails all its tries: its messages are visible again at
    # once; the second (the third job) is recorded at its second try and launched.
    assert m.table.failed == TRIES + 1
    assert m.twins.queue_counts() == (2, 0)
    assert [j.job_id for j in m.twins.jobs()] == ["j003"]
    m.tick(1)
    m.holds()
    assert m.twins.queue_counts() == (0, 0) and len(m.twins.jobs()) == 3


def test_the_check_sees_messages_a_tick_did_not_give_back(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken on purpose: the intake gives nothing back, as before a failed recording's
    messages were released."""
    monkeypatch.setattr(recorder_module.Recorder, "give_back",
                        staticmethod(lambda queue, msgs: 0))
    m = machines()
    m.submit(spec(), 3, False)
    with pytest.raises(AssertionError, match=r"\[given_back\] message m1 "):
        m.flaky_tick(TRIES + 1, False)
    assert checks.visible(m.twins.queue) == set()
