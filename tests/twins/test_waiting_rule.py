"""dispatcher/domain/waiting.py: which reason a PENDING job waits for, from which facts."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain.lifecycle import HELD_AT
from dispatcher.domain.waiting import BundleFacts, TickSummary, Waiting, waiting_for

NOW = 1000.0
FREE = TickSummary(at=NOW, active=1, max_running=4)
FULL = TickSummary(at=NOW, active=4, max_running=4)


def rule(bundle: BundleFacts | None, summary: TickSummary | None = FREE, *, state: str = "PENDING",
         not_before: float | None = None, runs: int = 0, reason: str | None = None) -> Waiting:
    w = waiting_for(state, not_before=not_before, runs=runs, reason=reason, bundle=bundle,
                    summary=summary, now=NOW)
    assert w is not None
    return w


def pending(**kw: Any) -> BundleFacts:
    return BundleFacts(state="PENDING", **{"next_attempt_at": NOW, **kw})


@pytest.mark.parametrize("state", ["RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"])
def test_only_a_pending_job_waits(state: str) -> None:
    assert waiting_for(state, not_before=None, runs=0, reason=None, bundle=pending(),
                       summary=FULL, now=NOW) is None


def test_a_launch_in_flight_and_a_task_not_yet_claiming() -> None:
    w = rule(BundleFacts(state="LAUNCHING", launch_id="L1", updated_at=990.0))
    assert (w.reason, w.launch_id, w.since) == ("launching", "L1", 990.0)
    for state in ("LAUNCHED", "RUNNING"):
        w = rule(BundleFacts(state=state, task_arn="arn:t", updated_at=980.0))
        assert (w.reason, w.task_arn, w.since) == ("starting", "arn:t", 980.0)
    assert rule(None).reason == rule(BundleFacts(state="RECORDING")).reason == "recording"


def test_scheduled_until_its_not_before_or_its_bundles_due_time() -> None:
    assert rule(pending(next_attempt_at=NOW + 50), not_before=NOW + 50) == \
        Waiting("scheduled", until=NOW + 50)
    assert rule(pending(), not_before=NOW + 10) == Waiting("scheduled", until=NOW + 10)
    assert rule(pending(next_attempt_at=NOW + 5)) == Waiting("scheduled", until=NOW + 5)


def test_a_backoff_names_spot_or_the_launch_and_the_last_error() -> None:
    spot = rule(pending(next_attempt_at=NOW + 60, launch_failures=2,
                        last_failure="Capacity is unavailable at this time."))
    assert (spot.reason, spot.until, spot.last_error) == \
        ("spot_backoff", NOW + 60, "Capacity is unavailable at this time.")
    other = rule(pending(next_attempt_at=NOW + 60, launch_failures=1,
                         last_failure="RESOURCE:MEMORY"))
    assert other.reason == "launch_backoff"
    # Once the backoff has passed, the slots decide.
    assert rule(pending(launch_failures=1, last_failure="RESOURCE:MEMORY"), FULL).reason == \
        "capacity"


def test_a_kind_at_its_limit_before_the_task_slots() -> None:
    summary = TickSummary(at=NOW, active=4, max_running=4, kinds={"render": (3, 3)})
    assert rule(pending(kind="render"), summary) == Waiting("kind_limit", running=3, limit=3,
                                                           kind="render")
    # Room for one job, not for a bundle of two.
    summary = TickSummary(at=NOW, active=1, max_running=4, kinds={"render": (2, 3)})
    assert rule(pending(kind="render", slots=1), summary).reason == "priority"
    assert rule(pending(kind="render", slots=2), summary).reason == "kind_limit"
    # The tick found the kind's oldest due bundle too wide for its room: all of it waits.
    blocked = TickSummary(at=NOW, active=1, max_running=4, kinds={"render": (2, 3)},
                          blocked=frozenset({"render"}))
    assert rule(pending(kind="render"), blocked).reason == "kind_limit"


def test_capacity_then_priority() -> None:
    assert rule(pending(), FULL) == Waiting("capacity", running=4, limit=4)
    assert rule(pending(), None).reason == "capacity"  # no tick has looked yet
    behind = TickSummary(at=NOW, active=4, max_running=4, left_due={"high": 2, "normal": 5})
    assert rule(pending(priority="normal"), behind) == \
        Waiting("priority", ahead=2, running=4, limit=4)
    assert rule(pending(priority="low"), behind).ahead == 7
    assert rule(pending(priority="high"), behind).reason == "capacity"
    free = TickSummary(at=NOW, active=1, max_running=4, left_due={"normal": 3})
    assert rule(pending(), free) == Waiting("priority", ahead=3, running=1, limit=4)


def test_a_rerun_carries_its_attempt_and_why() -> None:
    held = rule(pending(next_attempt_at=HELD_AT), runs=1, reason="retried; waits until task t")
    assert held == Waiting("rerun_pending", attempt=2, detail="retried; waits until task t")
    later = rule(pending(next_attempt_at=NOW + 30), runs=2, reason="stopped")
    assert later == Waiting("rerun_pending", until=NOW + 30, attempt=3, detail="stopped")
    assert rule(pending(stopped_task="arn:t"), runs=1) == \
        Waiting("rerun_pending", attempt=2, detail="task arn:t stopped")
    # Blocked by the slots: that is the reason, with the attempt still said.
    full = rule(pending(), FULL, runs=1, reason="stopped")
    assert (full.reason, full.attempt) == ("capacity", 2)


def test_the_summary_survives_its_json() -> None:
    s = TickSummary(at=NOW, active=2, max_running=9, kinds={"r": (1, 2)}, left_due={"low": 1},
                    blocked=frozenset({"r"}))
    assert TickSummary.from_json(s.to_json()) == s
    assert TickSummary.from_json(None) is None
