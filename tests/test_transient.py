"""A table write that fails for a moment (throttling, a 5xx, a transaction conflict) costs a
retry within the tick, not the hold and a receive; what the tick still gives up on comes back
at once, and the tick says why."""

from __future__ import annotations

import logging

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.ports.store import Store
from dispatcher.ports.table import Op, TransactionCancelled
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins

TRIES = 5


def _conflict(ops: list[Op]) -> Exception:
    return TransactionCancelled(["TransactionConflict"] + [None] * (len(ops) - 1))


class Flaky(MemoryTable):
    """Fails the next ``failures`` transactions with ``error`` (``lost``: after writing them,
    as a response lost on the way back would)."""

    def __init__(self, error: object = _conflict, failures: int = 0, *,
                 lost: bool = False) -> None:
        super().__init__()
        self.error, self.failures, self.lost = error, failures, lost
        self.failed = 0

    def _transact(self, ops: list[Op]) -> None:
        if self.failures:
            self.failures -= 1
            self.failed += 1
            if self.lost:
                super()._transact(ops)
            raise self.error(ops)  # type: ignore[operator]
        super()._transact(ops)


def _world(table: Flaky) -> Twins:
    twins = Twins()
    twins.table = table
    twins.store = Store(table, clock=twins.clock)
    return twins


def _submit(twins: Twins, n: int = 3) -> list[str]:
    return twins.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{i}",
                                        "estimated_seconds": 1} for i in range(n)])


@pytest.mark.parametrize("error", [_conflict], ids=["TransactionConflict"])
def test_a_transient_failure_is_retried_and_the_bundle_launches_in_the_same_tick(
        error: object) -> None:
    table = Flaky(error, failures=2)
    twins = _world(table)
    ids = _submit(twins)
    decision = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").dispatcher.tick()
    assert table.failed == 2
    assert decision.intake.record_failures == 0
    assert sorted(j.job_id for j in twins.jobs()) == sorted(ids)
    assert twins.queue_counts() == (0, 0)  # recorded, then deleted
    assert decision.launch.bundles_launched == 1
    assert [b.state for b in twins.bundles()] == [BundleState.LAUNCHED]
    assert len(twins.task_arns()) == 1


@pytest.mark.parametrize("error", [_conflict], ids=["TransactionConflict"])
def test_a_failure_that_persists_gives_the_messages_back_at_once_and_says_why(
        error: object, caplog: pytest.LogCaptureFixture) -> None:
    table = Flaky(error, failures=1000)
    twins = _world(table)
    _submit(twins)
    with caplog.at_level(logging.ERROR):
        decision = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").dispatcher.tick()
    assert table.failed == TRIES  # retried, then given up
    assert twins.jobs() == [] and twins.task_arns() == []
    # Visible again now, not after LONGJOBS_HOLD_SECONDS (the clock has not moved).
    assert twins.queue_counts() == (3, 0)
    assert decision.intake.record_failures == 1
    assert any("TransactionConflict" in e for e in decision.intake.record_errors)
    logged = [str(getattr(rec, "error", "")) for rec in caplog.records]
    assert any("TransactionConflict" in e for e in logged)
    # The next tick, with the table well again, records and launches them.
    table.failures = 0
    again = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="1").dispatcher.tick()
    assert again.intake.admitted == 3 and again.launch.bundles_launched == 1
    assert twins.queue_counts() == (0, 0)
