"""Local mode's Fargate model: ``LocalLauncher`` starts a task only after
its start latency, reports some tasks in ``failures[]`` for lack of capacity, and throttles
RunTask calls over Fargate's limits as ECS does.

Tasks here run a trivial command instead of ``python -m job_runner`` (or never start at all:
a long start latency, then ``shutdown``), so the file takes a few seconds. Rate limits run on
a fake clock; the only real waits are on conditions (a task reported RUNNING, a timer ended).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job
from dispatcher.domain.pacing import CAPACITY_UNAVAILABLE, LaunchPacer, RateExceeded
from dispatcher.domain.stops import LastStatus, StopCode
from dispatcher.local.local_launcher import LocalLauncher, TaskExit
from dispatcher.ports.launcher import LaunchRequest, LaunchResult
from dispatcher.settings import Config
from dispatcher.stages.launch import NO_CAPACITY, Launches, LaunchStats
from dispatcher.stages.policy import LaunchPolicy
from tests.twins import FakeClock, Twins

BASE = {"LONGJOBS_QUEUE_URL": "q", "LONGJOBS_TABLE": "t", "LONGJOBS_CLUSTER": "c",
        "LONGJOBS_TASK_FAMILY": "f", "LONGJOBS_LAUNCHER": "local"}
# A task that stays up until it is stopped (SIGTERM ends it).
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
NEVER = "3600"  # a start latency no test waits for: the task never starts before shutdown


def config(**env: str) -> Config:
    return settings.load("dispatcher", {**BASE, **env})


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def request(token: str, count: int = 1, *, on_demand: bool = False) -> LaunchRequest:
    return LaunchRequest("f:1", count, token, "local-fargate", on_demand=on_demand)


@pytest.fixture
def exits() -> list[TaskExit]:
    return []


def launcher(cfg: Config, exits: list[TaskExit], *, command: list[str] | None = None,
             seed: int | None = None,
             clock: Callable[[], float] = time.monotonic) -> LocalLauncher:
    return LocalLauncher(cfg, env={"PATH": "/usr/bin:/bin"}, on_exit=exits.append,
                         stop_timeout=5, command=command, seed=seed, clock=clock)


def test_a_task_is_not_running_until_its_start_latency_has_passed(
        exits: list[TaskExit]) -> None:
    low = 0.2
    local = launcher(config(LONGJOBS_LOCAL_START_SECONDS="0.2-0.3"), exits, command=SLEEPER)
    try:
        before = time.monotonic()
        arns = local.run(request("latency", 2)).task_arns
        first = local.describe(arns)
        if time.monotonic() - before < low:  # (a machine that slow proves nothing either way)
            assert {s.last_status for s in first} <= {LastStatus.PROVISIONING,
                                                      LastStatus.PENDING}
        assert not any(s.last_status.gone for s in first)
        assert set(local.running()) == set(arns)  # provisioning tasks are not gone

        samples = []

        def all_running() -> bool:
            statuses = local.describe(arns)
            samples.append((time.monotonic(), statuses))
            return all(s.last_status is LastStatus.RUNNING for s in statuses)

        assert wait_for(all_running)
        for at, statuses in samples:  # RUNNING only once its own start latency had passed
            for s in statuses:
                task = local.tasks[s.task_arn]
                assert (s.last_status is LastStatus.RUNNING) <= (
                    at - task.created_at >= task.start_delay)
        assert all(low <= local.tasks[a].start_delay <= 0.3 for a in arns)

        local.stop(arns[0], "longjobs: cancelled")
        assert wait_for(lambda: local.describe(arns[:1])[0].last_status is LastStatus.STOPPED)
        stopped = local.describe(arns[:1])[0]
        assert stopped.stop_code == StopCode.USER_INITIATED
        assert stopped.stopped_reason == "longjobs: cancelled"
        assert stopped.exit_code == 143  # SIGTERM
    finally:
        local.shutdown(grace=5)
    assert local.running() == []


# A task that, like the runner, exits 0 on SIGTERM; and one that ignores it.
GRACEFUL = [sys.executable, "-c", "import signal, sys, time; "
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); time.sleep(60)"]
DEAF = [sys.executable, "-c", "import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"]


@pytest.mark.parametrize(("command", "exit_code"), [(GRACEFUL, 0), (DEAF, 137)],
                         ids=["exits on SIGTERM", "killed after the warning"])
def test_a_reclaimed_task_gets_sigterm_then_sigkill_and_reports_a_spot_interruption(
        exits: list[TaskExit], command: list[str], exit_code: int) -> None:
    local = launcher(config(LONGJOBS_LOCAL_START_SECONDS="0"), exits, command=command)
    try:
        (arn,) = local.run(request("spot")).task_arns
        assert wait_for(lambda: local.tasks[arn].process is not None)
        time.sleep(0.5)  # its signal handler is set
        local.reclaim(arn, warning=1.0)
        assert wait_for(lambda: bool(exits))
        (gone,) = exits
        assert (gone.stop_code, gone.exit_code) == ("SpotInterruption", exit_code)
        assert "Spot interruption" in gone.stopped_reason
    finally:
        local.shutdown(grace=5)


def test_a_task_stopped_before_it_starts_never_starts(exits: list[TaskExit]) -> None:
    local = launcher(config(LONGJOBS_LOCAL_START_SECONDS="0.2"), exits, command=SLEEPER)
    try:
        stop_me, lose_me = local.run(request("early", 2)).task_arns
        local.stop(stop_me, "longjobs: cancelled before it started")
        local.kill(lose_me, StopCode.SPOT_INTERRUPTION)
        for arn in (stop_me, lose_me):  # their start timers are over: nothing can start them
            timer = local.tasks[arn].timer
            assert timer is not None
            timer.join(timeout=30)
            assert not timer.is_alive()
            assert local.tasks[arn].process is None
        stopped, lost = local.describe([stop_me, lose_me])
        assert stopped.last_status is LastStatus.STOPPED
        assert stopped.stop_code == StopCode.USER_INITIATED
        assert stopped.stopped_reason == "longjobs: cancelled before it started"
        assert stopped.exit_code is None  # the container never ran
        assert lost.last_status is LastStatus.STOPPED
        assert lost.stop_code == StopCode.SPOT_INTERRUPTION and lost.exit_code is None
        # Each stop is reported once, as ECS's STOPPED event would be.
        assert sorted((e.task_arn, e.stop_code, e.exit_code, e.started_at) for e in exits) == \
            sorted([(stop_me, "UserInitiated", None, None),
                    (lose_me, "SpotInterruption", None, None)])
        local.stop(stop_me, "again")  # stopping a stopped task is not an error
        assert len(exits) == 2
        assert local.running() == []
    finally:
        local.shutdown(grace=5)


def test_capacity_errors_come_back_in_failures_reproducibly_with_a_seed(
        exits: list[TaskExit]) -> None:
    cfg = config(LONGJOBS_LOCAL_CAPACITY_ERRORS="0.5", LONGJOBS_LOCAL_START_SECONDS=NEVER)

    def launch_all(seed: int) -> list[LaunchResult]:
        local = launcher(cfg, exits, seed=seed, clock=FakeClock())
        try:
            return [local.run(request(f"cap-{i}", 10)) for i in range(10)]
        finally:
            local.shutdown(grace=5)

    results = launch_all(seed=7)
    failures = [f for r in results for f in r.failures]
    assert all(len(r.task_arns) + len(r.failures) == 10 for r in results)
    assert 20 <= len(failures) <= 80  # about half of 100 tasks
    assert set(failures) == {CAPACITY_UNAVAILABLE}
    assert all(f.startswith(NO_CAPACITY) for f in failures)  # what the stage falls back on
    again = launch_all(seed=7)
    assert [len(r.failures) for r in again] == [len(r.failures) for r in results]

    # On-demand requests (the Spot fallback) are not refused for capacity.
    local = launcher(cfg, exits, seed=7, clock=FakeClock())
    try:
        fallback = local.run(request("on-demand", 10, on_demand=True))
        assert len(fallback.task_arns) == 10 and fallback.failures == []
    finally:
        local.shutdown(grace=5)


def test_runtask_over_the_limits_is_throttled_as_aws_does(exits: list[TaskExit]) -> None:
    clock = FakeClock()
    local = launcher(config(LONGJOBS_LOCAL_START_SECONDS=NEVER,
                            LONGJOBS_CAPACITY_STRATEGY="FARGATE_SPOT:1"), exits, clock=clock)
    try:
        for i in range(10):  # Spot's bucket: 100 tasks at once
            local.run(request(f"spot-{i}", 10))
        with pytest.raises(RateExceeded, match="FARGATE_SPOT task launch rate"):
            local.run(request("spot-10", 10))
        assert len(local.tasks) == 100  # the throttled call started nothing...
        # ...and was not remembered: its token works once the bucket has refilled.
        on_demand = local.run(request("on-demand", 10, on_demand=True))  # FARGATE's own bucket
        assert len(on_demand.task_arns) == 10
        clock.advance(10 / 20)
        assert len(local.run(request("spot-10", 10)).task_arns) == 10

        clock.advance(60)  # every bucket full again: 20 calls at once, not 21
        for i in range(20):
            local.run(request(f"call-{i}", 1))
        with pytest.raises(RateExceeded, match="calls per second"):
            local.run(request("call-20", 1))
        assert local.limits is not None and local.limits.throttled == 2
    finally:
        local.shutdown(grace=5)
    assert {e.stop_code for e in exits} == {"UserInitiated"} and len(exits) == len(local.tasks)
    assert all(e.exit_code is None for e in exits)  # none of them ever started


def test_the_paced_stage_is_never_throttled_by_local_fargate(exits: list[TaskExit]) -> None:
    """The launch stage's pacer and the local launcher's limits on one clock: a burst of 300
    tasks goes through without a single ThrottlingException."""
    twins = Twins()
    clock = twins.clock
    local = launcher(config(LONGJOBS_LOCAL_START_SECONDS=NEVER), exits, clock=clock)
    launches = Launches(twins.store, local, LaunchPolicy(), clock,
                        pacer=LaunchPacer(clock=clock, sleep=clock.advance))
    bundles = [Bundle(f"b{i:03}", [f"j{i:03}"]) for i in range(300)]
    twins.store.record(bundles, [Job(job_id=f"j{i:03}", kind="k", payload={},
                                     bundle_id=f"b{i:03}") for i in range(300)])
    fresh = [b for b in (twins.store.get_bundle(b.bundle_id) for b in bundles) if b]
    stats = LaunchStats()
    try:
        launches.launch(fresh, "f:1", stats)
    finally:
        local.shutdown(grace=5)
    assert stats.bundles_launched == 300 and stats.throttled == 0
    assert local.limits is not None and local.limits.throttled == 0
    assert {b.state for b in twins.bundles()} == {BundleState.LAUNCHED}
    assert stats.paced_seconds == pytest.approx((300 - 100) / 20, rel=0.05)


def test_shutdown_stops_tasks_still_provisioning(exits: list[TaskExit]) -> None:
    local = launcher(config(LONGJOBS_LOCAL_START_SECONDS=NEVER), exits)
    arns = local.run(request("pending", 3)).task_arns
    assert {s.last_status for s in local.describe(arns)} == {LastStatus.PROVISIONING}
    local.shutdown(grace=5)
    assert [s.last_status for s in local.describe(arns)] == [LastStatus.STOPPED] * 3
    assert sorted(e.task_arn for e in exits) == sorted(arns)
    assert local.running() == []
