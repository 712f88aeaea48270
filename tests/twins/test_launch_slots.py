"""A bundle's slots are decided whenever it launches, by whichever path launches it: the tick,
a launch whose bundles are read again after a conflict, and a stop's immediate relaunch."""

from __future__ import annotations

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job
from dispatcher.domain.stops import TaskStop
from dispatcher.stages.launch import LaunchStats, launch_slots
from tests.twins import Twins

SPOT = ("SpotInterruption", "Your Spot Task was interrupted.", None)


def test_bundles_read_again_after_a_launch_conflict_keep_the_slots_decided_for_it() -> None:
    """A limited kind's deferred bundle is recorded with no slots; the tick decides 2. Another
    bundle of the same launch moved on meanwhile (the status index is eventually consistent):
    the launch reads its bundles again, and the one it launches still counts 2, not none."""
    tw = Twins()
    stages = tw.stages(LONGJOBS_KIND_LIMITS="report=2", LONGJOBS_TASK_CONCURRENCY="8")
    report = Bundle("A", ["a1", "a2", "a3", "a4"], kind="report", next_attempt_at=tw.clock())
    other = Bundle("B", ["b1"], next_attempt_at=tw.clock())
    jobs = [Job(job_id=j, kind="report", payload={}, bundle_id="A") for j in report.job_ids]
    jobs.append(Job(job_id="b1", kind="x", payload={}, bundle_id="B"))
    tw.store.record([report, other], jobs)
    due = {b.bundle_id: b for b in tw.store.due_bundles(10, tw.clock())}
    a, b = due["A"], due["B"]
    a.slots = launch_slots(a, 8, {"report": 2})
    assert a.slots == 2
    b.attempt = 7  # a stale copy: its launch condition fails
    stages.launches.launch([a, b], "longjobs-worker:1", LaunchStats())
    launched = tw.bundle("A")
    assert launched is not None and launched.state == BundleState.LAUNCHED
    assert launched.slots == 2


def test_a_stopped_bundle_of_a_limited_kind_is_relaunched_by_the_tick_within_the_limit_of_now(
        ) -> None:
    """Ten reports launched at a limit of 10 run ten at once; the limit is lowered to 5, then
    their task is interrupted: the stop leaves the bundle to the next tick (only the tick
    counts a kind's room), which relaunches it running at most 5 at once, not 10."""
    tw = Twins()
    env = {"LONGJOBS_TASK_CONCURRENCY": "10", "LONGJOBS_MAX_RUNNING_TASKS": "5"}
    client = tw.client()
    for n in range(10):
        client.submit("report", {}, job_id=f"r{n}", estimated_seconds=1)
    tw.stages(LONGJOBS_KIND_LIMITS="report=10", **env).tick.tick()
    (bundle,) = tw.bundles()
    assert bundle.slots == 10 and bundle.task_arn is not None
    lowered = tw.stages(LONGJOBS_KIND_LIMITS="report=5", **env)
    out = lowered.reruns.on_stop(TaskStop(bundle.task_arn, *SPOT))
    assert not out.relaunched and out.reason and "next tick" in out.reason
    waiting = tw.bundle(bundle.bundle_id)
    assert waiting is not None and waiting.state == BundleState.PENDING
    lowered.tick.tick()
    again = tw.bundle(bundle.bundle_id)
    assert again is not None and again.state == BundleState.LAUNCHED
    assert again.task_arn != bundle.task_arn and again.slots == 5


def test_stopped_bundles_of_a_kind_whose_limit_was_set_meanwhile_relaunch_within_it() -> None:
    """Three bundles of reports launched while the kind had no limit never start; a limit of
    1 is set; the tick finds their tasks stopped and settles them: it relaunches one, not
    all three at once (the sequence the system model found)."""
    tw = Twins()
    env = {"LONGJOBS_TASK_CONCURRENCY": "1", "LONGJOBS_MAX_RUNNING_TASKS": "3",
           "LONGJOBS_BUNDLE_MAX_JOBS": "2"}
    client = tw.client()
    for n in range(5):
        client.submit("report", {}, job_id=f"r{n}", estimated_seconds=0.5)
    tw.stages(**env).tick.tick()
    first = tw.bundles()
    assert len(first) == 3 and all(b.task_arn for b in first)
    for b in first:
        assert b.task_arn is not None
        tw.stages(LONGJOBS_KIND_LIMITS="report=1", **env).reruns.on_stop(
            TaskStop(b.task_arn, "TaskFailedToStart", "CannotPullContainerError", None))
    tw.stages(LONGJOBS_KIND_LIMITS="report=1", **env).tick.tick()
    active = [b for b in tw.bundles() if b.state in (BundleState.LAUNCHED,
                                                      BundleState.RUNNING)]
    assert [b.slots for b in active] == [1]


def test_a_limit_set_after_a_bundle_was_recorded_applies_when_it_launches() -> None:
    """Reports scheduled for later are recorded while their kind has no limit; a limit of 2
    is set before they are due: their bundle launches running 2 at once, not all 6. A
    bundle of several kinds recorded so cannot say which of its jobs the limit is for."""
    tw = Twins()
    client = tw.client()
    for n in range(6):
        client.submit("report", {}, job_id=f"r{n}", estimated_seconds=1,
                      not_before=tw.clock() + 3600)
    for n in range(2):
        client.submit("report" if n else "resize", {}, job_id=f"m{n}", estimated_seconds=1,
                      not_before=tw.clock() + 7200)
    tw.stages(LONGJOBS_TASK_CONCURRENCY="8").tick.tick()
    by_first = {b.job_ids[0]: b for b in tw.bundles()}
    assert by_first["r0"].kind == "report" and by_first["m0"].kind is None
    tw.clock.advance(7300)
    tw.stages(LONGJOBS_TASK_CONCURRENCY="8", LONGJOBS_KIND_LIMITS="report=2").tick.tick()
    reports = tw.bundle(by_first["r0"].bundle_id)
    assert reports is not None and reports.state == BundleState.LAUNCHED
    assert reports.slots == 2
    mixed = tw.bundle(by_first["m0"].bundle_id)
    assert mixed is not None and mixed.state == BundleState.LAUNCHED and mixed.slots == 0


def test_a_stopped_bundle_of_a_limited_kind_keeps_its_place_among_the_kinds_due_bundles(
        ) -> None:
    """report=1: r0 runs, r1 and r2 (sent a minute later) wait for room. r0's task is
    interrupted: the tick relaunches r0 first, not the reports that came after it."""
    tw = Twins()
    env = {"LONGJOBS_KIND_LIMITS": "report=1", "LONGJOBS_TASK_CONCURRENCY": "1",
           "LONGJOBS_BUNDLE_MAX_JOBS": "1"}
    client = tw.client()
    client.submit("report", {}, job_id="r0", estimated_seconds=1)
    tw.stages(**env).tick.tick()
    tw.clock.advance(60)
    for n in (1, 2):
        client.submit("report", {}, job_id=f"r{n}", estimated_seconds=1)
    tw.stages(**env).tick.tick()
    first = tw.job("r0")
    assert first is not None and first.bundle_id
    bundle = tw.bundle(first.bundle_id)
    assert bundle is not None and bundle.task_arn
    tw.clock.advance(60)
    out = tw.stages(**env).reruns.on_stop(TaskStop(bundle.task_arn, *SPOT))
    assert not out.relaunched
    tw.stages(**env).tick.tick()
    active = [b for b in tw.bundles() if b.state == BundleState.LAUNCHED]
    assert [b.job_ids for b in active] == [["r0"]]


def test_a_bundle_reconciliation_settles_leaves_its_kinds_room_to_the_same_tick() -> None:
    """report=2, two reports in bundles of one, both launched; one task stops and no event
    comes: the tick's reconciliation settles its bundle and the same tick relaunches it, as
    its kind's room no longer counts it."""
    tw = Twins()
    env = {"LONGJOBS_KIND_LIMITS": "report=2", "LONGJOBS_TASK_CONCURRENCY": "1",
           "LONGJOBS_BUNDLE_MAX_JOBS": "1"}
    client = tw.client()
    for n in (0, 1):
        client.submit("report", {}, job_id=f"r{n}", estimated_seconds=1)
    tw.stages(**env).tick.tick()
    launched = tw.bundles()
    assert len(launched) == 2 and all(b.task_arn for b in launched)
    stopped = launched[0]
    assert stopped.task_arn is not None
    tw.launcher.stop_task(stopped.task_arn, "TaskFailedToStart", "CannotPullContainerError")
    tw.clock.advance(600)  # past the look at launched bundles that never started
    report = tw.stages(**env).tick.tick()
    assert [o.bundle_id for o in report.reconcile.outcomes] == [stopped.bundle_id]
    again = tw.bundle(stopped.bundle_id)
    assert again is not None and again.state == BundleState.LAUNCHED and again.attempt == 2
