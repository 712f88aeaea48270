"""Priorities, per-kind limits across tasks and scheduled jobs, on the twins.

Messages are put on the twin queues as a producer would (schema v1 JSON); a task "finishes" by
its bundle being marked DONE in the table twin, which is what its runner's last write does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, BundleState
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.ops.queries import Queries
from dispatcher.ports.table import Update
from dispatcher.store import codec as r
from dispatcher.store.base import status
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.wiring import pipeline
from tests.twins import Twins


class Shapes(Twins):
    """The twins with a queue per priority (high and low; normal is the twins' queue)."""

    def __init__(self) -> None:
        super().__init__()
        self.high = MemoryQueue(clock=self.clock)
        self.low = MemoryQueue(clock=self.clock)

    def stages(self, **overrides: str) -> pipeline.Stages:
        return pipeline.build(self.config(**overrides), queue=self.queue, store=self.store,
                            launcher=self.launcher, clock=self.clock,
                            pacer=LaunchPacer.simulated(),
                            priority_queues={Priority.HIGH: self.high, Priority.LOW: self.low})

    def send(self, queue: MemoryQueue, jobs: list[dict[str, Any]]) -> None:
        for start in range(0, len(jobs), 10):
            queue.send([(str(n), json.dumps({"schema_version": 1, "payload": {}, **j}))
                        for n, j in enumerate(jobs[start:start + 10])])

    def finish_active(self) -> None:
        """Every launched task ends: its bundle DONE (the runner's last write)."""
        for b in self.bundles():
            if b.state in ACTIVE_BUNDLE_STATES:
                self.table.write(Update(r.bundle_key(b.bundle_id),
                                        status(r.bundle_status(BundleState.DONE), self.clock())))

    def launched_jobs(self) -> set[str]:
        return {j for b in self.bundles() if b.state in ACTIVE_BUNDLE_STATES
                for j in b.job_ids}


@pytest.fixture
def shapes() -> Shapes:
    return Shapes()


def jobs(prefix: str, n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"kind": "k", "job_id": f"{prefix}-{i}", "estimated_seconds": 1, **extra}
            for i in range(n)]


ENV = {"LONGJOBS_MAX_RUNNING_TASKS": "4", "LONGJOBS_BUNDLE_MAX_JOBS": "10"}


def test_a_high_priority_job_submitted_later_is_launched_in_the_next_tick(
        shapes: Shapes) -> None:
    shapes.send(shapes.low, jobs("low", 100, priority="low"))
    d = shapes.stages(**ENV).tick
    d.tick()
    assert len(shapes.launched_jobs()) == 40  # every slot taken by the low backlog
    shapes.send(shapes.high, jobs("urgent", 1, priority="high"))
    shapes.finish_active()  # slots free up
    before = len(shapes.launcher.requests)
    d.tick()
    assert "urgent-0" in shapes.launched_jobs()
    first = shapes.launcher.requests[before]  # this tick's first RunTask carries it
    urgent = shapes.job("urgent-0")
    assert urgent is not None and urgent.priority == Priority.HIGH
    bundle = shapes.bundle(urgent.bundle_id or "")
    assert bundle is not None and bundle.launch_id
    assert first.env["LONGJOBS_LAUNCH_ID"] == bundle.launch_id
    assert shapes.low.backlog().visible == 100 - 40 - 30  # low keeps launching beside it


def test_a_backlog_of_urgent_work_does_not_starve_the_rest(shapes: Shapes) -> None:
    shapes.send(shapes.high, jobs("urgent", 100, priority="high"))
    shapes.send(shapes.low, jobs("low", 5, priority="low"))
    shapes.stages(**ENV).tick.tick()
    launched = shapes.launched_jobs()
    assert sum(1 for j in launched if j.startswith("urgent")) == 30  # 3 of the 4 slots
    assert sum(1 for j in launched if j.startswith("low")) == 5  # its guaranteed slot


def test_no_kind_exceeds_its_limit_while_another_kind_keeps_launching(shapes: Shapes) -> None:
    shapes.send(shapes.queue, [{"kind": "report", "job_id": f"report-{i}"} for i in range(6)]
                + [{"kind": "resize", "job_id": f"resize-{i}"} for i in range(6)])
    d = shapes.stages(LONGJOBS_MAX_RUNNING_TASKS="20", LONGJOBS_KIND_LIMITS="report=2").tick
    seen_reports = []
    for _ in range(4):
        d.tick()
        running = [j for j in shapes.launched_jobs() if j.startswith("report")]
        seen_reports.append(len(running))
        assert len(running) <= 2
        assert all(s is not None for s in map(shapes.job, [f"report-{i}" for i in range(6)]))
        shapes.finish_active()
    assert seen_reports[:3] == [2, 2, 2]
    # Every resize job launched in the first tick, beside the reports at their limit.
    resize = [b for b in shapes.bundles() if b.kind == "resize"]  # no limit: one each
    assert len(resize) == 6 and all(b.attempt == 1 for b in resize)
    assert {b.state for b in shapes.bundles()} == {BundleState.DONE}


def test_a_deep_backlog_of_a_kind_at_its_limit_does_not_hide_other_due_bundles(
        shapes: Shapes) -> None:
    """300 reports limited to 1 at a time wait in the table as deferred bundles, more than a
    tick reads past its free slots. A job of another kind that falls due later (scheduled)
    must still be found and launched, not left behind them."""
    shapes.send(shapes.queue, [{"kind": "report", "job_id": f"report-{i}",
                                "estimated_seconds": 100} for i in range(300)])
    d = shapes.stages(LONGJOBS_KIND_LIMITS="report=1", LONGJOBS_MAX_RUNNING_TASKS="5").tick
    for _ in range(3):
        d.tick()
        shapes.clock.advance(60)
    assert len([b for b in shapes.bundles() if b.state == BundleState.PENDING]) > 200
    shapes.send(shapes.queue, [{"kind": "other", "job_id": "other",
                                "not_before": shapes.clock() + 30}])
    d.tick()  # recorded, scheduled
    assert "other" not in shapes.launched_jobs()
    shapes.clock.advance(60)
    d.tick()
    assert "other" in shapes.launched_jobs()
    assert len([j for j in shapes.launched_jobs() if j.startswith("report")]) == 1


def test_a_job_scheduled_an_hour_ahead_waits_then_launches_when_due(shapes: Shapes) -> None:
    due = shapes.clock() + 3600
    shapes.send(shapes.queue, [{"kind": "k", "job_id": "later", "not_before": due},
                               {"kind": "k", "job_id": "later-cancelled", "not_before": due},
                               {"kind": "k", "job_id": "now"}])
    d = shapes.stages().tick
    d.tick()
    later = shapes.job("later")
    assert later is not None and later.state == JobState.PENDING
    assert later.scheduled(shapes.clock())  # shown to operators as SCHEDULED
    operators = Queries(shapes.store, clock=shapes.clock)
    assert sorted(j.job_id for j in operators.list_jobs(status="SCHEDULED")) == [
        "later", "later-cancelled"]
    assert {j.job_id: j.state for j in operators.list_jobs()}["later"] == "SCHEDULED"
    assert shapes.launched_jobs() == {"now"}
    shapes.client().cancel("later-cancelled")
    shapes.clock.advance(3599)
    d.tick()
    assert "later" not in shapes.launched_jobs()
    shapes.clock.advance(2)
    d.tick()
    assert "later" in shapes.launched_jobs()
    assert operators.list_jobs(status="SCHEDULED") == []
    cancelled = shapes.job("later-cancelled")
    assert cancelled is not None and cancelled.state == JobState.CANCELLED
    assert "later-cancelled" not in shapes.launched_jobs()
