"""Launch pacing by Fargate's two limits (RunTask calls, task launches), on simulated time.

The launch stage (``Launches``) waits on a ``LaunchPacer`` before every RunTask. Here the pacer
and the twins share one fake clock whose ``sleep`` advances it, so a burst of 1,000 tasks runs
in milliseconds; the twin launcher enforces the same limits as ECS would (``LaunchLimits``), and
every RunTask is recorded with its simulated time and checked against the limits independently:

- RunTask: 20 calls per second;
- task launches: a token bucket per capacity provider, 100 burst, 20 per second sustained;
  FARGATE (on-demand) and FARGATE_SPOT apart.
https://docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job
from dispatcher.domain.pacing import (
    ON_DEMAND,
    SPOT,
    TASK_LAUNCH_BURST,
    TASK_LAUNCH_PER_SECOND,
    LaunchLimits,
    LaunchPacer,
    RateExceeded,
    TokenBucket,
    split_tasks,
)
from dispatcher.ports.launcher import Launcher, LaunchRequest, LaunchResult, TaskStatus
from dispatcher.stages.launch import Launches, LaunchStats
from dispatcher.stages.policy import LaunchPolicy
from dispatcher.testing.memory_launcher import MemoryLauncher
from tests.twins import FAMILY, FakeClock, Twins

EPS = 1e-6  # float slack on simulated times (the fake clock counts from 1.7e9)
TOKEN_EPS = 1e-3  # and on tokens (a time's rounding error times 20 tokens per second)
CALLS_PER_SECOND = 20


@dataclass
class Recording(Launcher):
    """Records the simulated time and request of every RunTask, then delegates."""

    inner: MemoryLauncher
    clock: FakeClock
    calls: list[tuple[float, LaunchRequest]] = field(default_factory=list)

    def resolve_task_definition(self) -> str:
        return self.inner.resolve_task_definition()

    def run(self, request: LaunchRequest) -> LaunchResult:
        self.calls.append((self.clock(), request))
        return self.inner.run(request)

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        return self.inner.describe(task_arns)

    def stop(self, task_arn: str, reason: str) -> None:
        self.inner.stop(task_arn, reason)


@dataclass
class World:
    twins: Twins
    twin: MemoryLauncher
    launcher: Recording
    pacer: LaunchPacer
    launches: Launches

    def bundles(self, n: int, prefix: str) -> list[Bundle]:
        bundles = [Bundle(f"{prefix}-{i:04}", [f"{prefix}-job-{i:04}"]) for i in range(n)]
        self.twins.store.record(bundles, [Job(job_id=b.job_ids[0], kind="k", payload={},
                                              bundle_id=b.bundle_id) for b in bundles])
        fresh = [self.twins.store.get_bundle(b.bundle_id) for b in bundles]
        return [b for b in fresh if b is not None]

    def launch(self, n: int, prefix: str, *, on_demand: bool = False) -> LaunchStats:
        stats = LaunchStats()
        self.launches.launch(self.bundles(n, prefix), f"{FAMILY}:1", stats, on_demand=on_demand)
        return stats


def world(providers: tuple[str, ...] = (ON_DEMAND,)) -> World:
    twins = Twins()
    clock = twins.clock
    strategy = tuple((p, 1, 0) for p in providers)
    # The twin enforces the limits as ECS would: a call the pacer let through too early
    # would raise RateExceeded there.
    twin = MemoryLauncher(family=FAMILY, clock=clock, limits=LaunchLimits(clock=clock),
                          capacity_strategy=() if providers == (ON_DEMAND,) else strategy)
    launcher = Recording(twin, clock)
    pacer = LaunchPacer(clock=clock, sleep=clock.advance)
    policy = LaunchPolicy(capacity_providers=providers)
    return World(twins, twin, launcher, pacer,
                 Launches(twins.store, launcher, policy, clock, pacer=pacer))


def assert_calls_within_rate(times: list[float]) -> None:
    """No 1-second window [t, t + 1) holds more than 20 RunTask calls."""
    times = sorted(times)
    for i, start in enumerate(times):
        in_window = sum(1 for t in times[i:] if t < start + 1 - EPS)
        assert in_window <= CALLS_PER_SECOND, f"{in_window} RunTask calls in 1 s from {start}"


def assert_within_bucket(launches: list[tuple[float, int]], t0: float) -> None:
    """Replay (time, tasks) launches through a bucket of our own: full at ``t0``, never
    overdrawn; equivalently tasks launched in [t0, t] <= burst + rate * (t - t0) at every t."""
    tokens, last, launched = float(TASK_LAUNCH_BURST), t0, 0
    for t, n in sorted(launches):
        tokens = min(TASK_LAUNCH_BURST, tokens + (t - last) * TASK_LAUNCH_PER_SECOND) - n
        last = t
        launched += n
        assert tokens >= -TOKEN_EPS, f"task bucket overdrawn at +{t - t0:.3f}s"
        assert launched <= TASK_LAUNCH_BURST + TASK_LAUNCH_PER_SECOND * (t - t0) + TOKEN_EPS


def charged(w: World, provider: str) -> list[tuple[float, int]]:
    """(time, tasks) of every launch the twin charged to ``provider``."""
    return [(t, n) for t, p, n in w.twin.launches if p == provider]


def test_a_burst_of_1000_tasks_keeps_to_both_limits() -> None:
    w = world()
    t0 = w.twins.clock()
    stats = w.launch(1000, "burst")

    assert stats.runtask_calls == 100 and stats.bundles_launched == 1000
    assert [r.count for _, r in w.launcher.calls] == [10] * 100
    assert stats.throttled == 0 and stats.left_for_recovery == 0
    assert w.twin.limits is not None and w.twin.limits.throttled == 0  # ECS would agree
    assert {b.state for b in w.twins.bundles()} == {BundleState.LAUNCHED}

    times = [t for t, _ in w.launcher.calls]
    assert_calls_within_rate(times)
    assert_within_bucket([(t, r.count) for t, r in w.launcher.calls], t0)
    assert sum(n for _, n in charged(w, ON_DEMAND)) == 1000

    # The first 100 go at once (the burst, spaced only by the call rate), the other 900 at
    # 20 per second: about (1000 - 100) / 20 = 45 s of simulated time, and no more.
    expected = (1000 - TASK_LAUNCH_BURST) / TASK_LAUNCH_PER_SECOND
    elapsed = times[-1] - t0
    assert elapsed / expected >= 1 - EPS
    assert elapsed / expected <= 1.05
    assert stats.paced_seconds == pytest.approx(w.twins.clock() - t0, abs=EPS)
    # The burst itself was paced by the call rate only.
    assert times[9] - t0 == pytest.approx(9 / CALLS_PER_SECOND, abs=EPS)


def test_many_small_calls_keep_to_20_calls_per_second() -> None:
    w = world()
    t0 = w.twins.clock()
    stats = LaunchStats()
    for i in range(60):  # one bundle per call: only the call rate binds
        w.launches.launch(w.bundles(1, f"one-{i}"), f"{FAMILY}:1", stats)
    times = [t for t, _ in w.launcher.calls]
    assert len(times) == 60 and stats.bundles_launched == 60
    assert_calls_within_rate(times)
    assert_within_bucket([(t, r.count) for t, r in w.launcher.calls], t0)
    assert (times[-1] - t0) / (59 / CALLS_PER_SECOND) == pytest.approx(1.0, abs=1e-3)


def test_spot_and_on_demand_buckets_are_separate() -> None:
    w = world((SPOT,))  # a Spot-only strategy: regular launches draw on FARGATE_SPOT
    t0 = w.twins.clock()
    w.launch(TASK_LAUNCH_BURST, "spot")  # Spot's bucket is now empty
    spot_done = w.twins.clock()
    assert spot_done - t0 < 1  # the burst: call spacing only

    # On-demand (the Spot fallback) charges FARGATE only: its full bucket, no wait for Spot.
    stats = w.launch(TASK_LAUNCH_BURST, "od", on_demand=True)
    assert stats.bundles_launched == TASK_LAUNCH_BURST
    assert w.twins.clock() - spot_done < 1  # a shared bucket would have made it wait ~5 s
    assert [r.on_demand for _, r in w.launcher.calls] == [False] * 10 + [True] * 10

    # A second Spot burst waits for Spot's tokens alone: 200 Spot tasks need
    # (200 - 100) / 20 = 5 s from the start (10 s if on-demand had drawn on the same bucket).
    w.launch(TASK_LAUNCH_BURST, "spot-again")
    last = w.launcher.calls[-1][0]
    assert (last - t0) / (TASK_LAUNCH_BURST / TASK_LAUNCH_PER_SECOND) == pytest.approx(
        1.0, abs=0.02)

    assert sum(n for _, n in charged(w, SPOT)) == 2 * TASK_LAUNCH_BURST
    assert sum(n for _, n in charged(w, ON_DEMAND)) == TASK_LAUNCH_BURST
    assert_within_bucket(charged(w, SPOT), t0)
    assert_within_bucket(charged(w, ON_DEMAND), t0)
    assert w.twin.limits is not None and w.twin.limits.throttled == 0


def test_a_mixed_strategy_charges_the_full_count_to_each_provider() -> None:
    """The stage does not model how a strategy splits a call's tasks: it charges every
    provider the full count (conservative), so on-demand waits after a mixed burst too."""
    pacer = LaunchPacer.simulated()
    for _ in range(10):
        assert pacer.acquire(10, (SPOT, ON_DEMAND)) <= 1 / CALLS_PER_SECOND + EPS
    assert pacer.acquire(10, (ON_DEMAND,)) == pytest.approx(10 / TASK_LAUNCH_PER_SECOND
                                                            - 9 / CALLS_PER_SECOND, abs=EPS)
    # ECS itself charges each provider its share (base first, then by weight).
    assert split_tasks(10, ((SPOT, 3, 0), (ON_DEMAND, 1, 2))) == {SPOT: 6, ON_DEMAND: 4}
    assert split_tasks(10) == {ON_DEMAND: 10}


def test_a_throttled_runtask_is_left_for_recovery_and_retried_with_its_token() -> None:
    """ECS does not promise that a throttled RunTask started nothing: the launch stays
    STARTING (not failed back to PENDING) and recovery repeats it with the same token."""
    w = world()
    w.twin.inject_throttle(1)
    stats = w.launch(3, "throttled")
    assert stats.throttled == 1 and stats.left_for_recovery == 1
    assert stats.bundles_launched == 0
    assert {b.state for b in w.twins.bundles()} == {BundleState.LAUNCHING}

    w.twins.clock.advance(60)
    recovery = LaunchStats()
    w.launches.recover(recovery)
    assert recovery.recovered == 1 and recovery.bundles_launched == 3
    tokens = [r.client_token for _, r in w.launcher.calls]
    assert len(tokens) == 2 and len(set(tokens)) == 1
    assert {b.state for b in w.twins.bundles()} == {BundleState.LAUNCHED}


def test_the_twin_enforces_the_limits_as_ecs_does() -> None:
    clock = FakeClock()
    twin = MemoryLauncher(family=FAMILY, clock=clock, limits=LaunchLimits(clock=clock))

    def run(token: str, count: int = 10) -> LaunchResult:
        return twin.run(LaunchRequest(f"{FAMILY}:1", count, token, "pacing"))

    for i in range(10):  # the bucket's 100 tasks at once
        run(f"t{i}")
    with pytest.raises(RateExceeded, match="task launch rate"):
        run("t10")
    assert len(twin.tasks) == 100  # the refused call started nothing
    clock.advance(0.5)  # 10 tokens back
    assert len(run("t10").task_arns) == 10
    # 20 calls per second, burst and sustained: the 21st call in the same instant is refused.
    clock.advance(10)
    for i in range(20):
        run(f"small-{i}", 1)
    with pytest.raises(RateExceeded, match="calls per second"):
        run("small-20", 1)
    assert twin.limits is not None and twin.limits.throttled == 2


def test_token_bucket_refills_to_its_capacity_only() -> None:
    bucket = TokenBucket(100, 20, now=0.0)
    bucket.take(100, 0.0)
    assert bucket.ready_at(10, 0.0) == pytest.approx(0.5)
    assert bucket.tokens(1000.0) == 100  # capped
    assert bucket.ready_at(500, 1000.0) == 1000.0  # more than it can hold: when full
