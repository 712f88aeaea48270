"""What a task stop publishes for the alarms: tasks that never started, bundles rerun, the
relaunch's launch failures, and the stops the tick's reconciliation settles."""

from __future__ import annotations

from typing import Any

from dispatcher.domain.stops import StopCode, TaskStop
from dispatcher.ops import metrics
from dispatcher.stages.rerun import StopResult
from dispatcher.store import Fence
from tests.twins import Twins


def values(blob: dict[str, Any]) -> dict[str, float]:
    """Each metric's value in an EMF object (a value, or a list of one)."""
    names = [m["Name"] for d in blob["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]]
    return {n: float(sum(v) if isinstance(v := blob[n], list) else v) for n in names}


def test_a_task_that_never_claimed_its_bundle_never_started(twins: Twins) -> None:
    _, arn = twins.launched("pull")
    twins.launcher.stop_task(arn, StopCode.TASK_FAILED_TO_START, "CannotPullContainerError")
    outcome = twins.stages().reruns.on_stop(
        TaskStop(arn, StopCode.TASK_FAILED_TO_START, "CannotPullContainerError", None))
    assert (outcome.result, outcome.never_started, outcome.rerun) == (
        StopResult.SETTLED, True, ["pull"])
    got = values(metrics.stop_blob(outcome, queue="q"))
    assert (got["TasksNeverStarted"], got["BundlesRerun"], got["Reruns"]) == (1, 1, 1)


def test_a_task_that_claimed_its_bundle_started(twins: Twins) -> None:
    bundle_id, arn = twins.launched("spot")
    twins.store.claim(Fence(bundle_id, 1, arn))
    twins.launcher.stop_task(arn, StopCode.SPOT_INTERRUPTION, "Your Spot Task was interrupted.")
    outcome = twins.stages().reruns.on_stop(
        TaskStop(arn, StopCode.SPOT_INTERRUPTION, "Your Spot Task was interrupted.", None))
    assert (outcome.result, outcome.never_started) == (StopResult.SETTLED, False)
    got = values(metrics.stop_blob(outcome, queue="q"))
    assert (got["TasksNeverStarted"], got["BundlesRerun"]) == (0, 1)


def test_a_refused_relaunch_is_a_launch_failure(twins: Twins) -> None:
    _, arn = twins.launched("refused")
    twins.launcher.inject_failures(["RESOURCE:ENI"])
    outcome = twins.stages().reruns.on_stop(
        TaskStop(arn, StopCode.TASK_FAILED_TO_START, "CannotPullContainerError", None))
    assert (outcome.relaunched, outcome.launch_failures) == (False, 1)
    assert values(metrics.stop_blob(outcome, queue="q"))["LaunchFailures"] == 1


def test_the_tick_publishes_the_stops_its_reconciliation_settles(twins: Twins) -> None:
    """A stop whose event was lost is settled by the tick: its figures are the tick's to
    publish, or the alarms would not count it."""
    _, arn = twins.launched("lost")
    twins.launcher.stop_task(arn, StopCode.TASK_FAILED_TO_START, "CannotPullContainerError")
    twins.clock.advance(3600)
    decision = twins.stages().tick.tick()
    assert [o.task_arn for o in decision.reconcile.outcomes] == [arn]
    blobs = metrics.tick_blobs(decision, backlog=None, running_tasks=1, queue="q")
    (stop,) = [b for b in blobs if "TasksNeverStarted" in b]
    assert values(stop)["TasksNeverStarted"] == 1
    alone = metrics.stop_blob(decision.reconcile.outcomes[0], queue="q")
    assert stop["_aws"]["CloudWatchMetrics"] == alone["_aws"]["CloudWatchMetrics"]
    assert {k: v for k, v in stop.items() if k != "_aws"} == {
        k: v for k, v in alone.items() if k != "_aws"}
