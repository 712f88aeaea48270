"""Fargate's launch limits and how a launch is spread and paced within them.

Shared by every launcher: ``LaunchPacer`` (the launch stage waits on it before every RunTask,
whatever the launcher) and ``LaunchLimits`` (the same limits enforced as ECS enforces them, by the
launchers that model ECS: local mode, optionally the twin). Pure rules on an injected clock: no
I/O, nothing else of the project.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

# Fargate's two launch limits, per account and Region.
# https://docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html
# - task launches: a token bucket per capacity provider ("Fargate Resource rate quota" for
#   On Demand tasks and, separately, for Spot tasks), bucket maximum (burst) 100 tasks, refill
#   (sustained) 20 tasks per second;
# - RunTask calls: "20 calls per second (burst and sustained)", each launching up to 10 tasks.
RUNTASK_PER_SECOND = 20.0
TASK_LAUNCH_BURST = 100
TASK_LAUNCH_PER_SECOND = 20.0
ON_DEMAND = "FARGATE"  # the on-demand capacity provider (and launchType FARGATE)
SPOT = "FARGATE_SPOT"

# RunTask's failures[] reason when Fargate has no capacity for a task.
# https://repost.aws/knowledge-center/ecs-fargate-runtask-capacity
CAPACITY_UNAVAILABLE = ("Capacity is unavailable at this time. Please try again later or in a "
                        "different availability zone")


class RateExceeded(Exception):
    """RunTask refused by a rate limit: ECS answers ``ThrottlingException: Rate exceeded``.

    https://docs.aws.amazon.com/AmazonECS/latest/APIReference/request-throttling.html ("If you
    exceed an API throttling quota, you get the ThrottlingException error code ... Rate
    exceeded"). The throttling pages do not promise that a throttled RunTask started nothing,
    so this is *not* a ``LaunchError``: by the port's rule (any other exception is an unknown
    outcome) the caller repeats the call later with the same clientToken, which is safe.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TokenBucket:
    """A token bucket (``capacity`` tokens, refilled at ``per_second``), on a caller's clock.

    Reservations may be made for a time ahead of the last one: the bucket's time only moves
    forward, so reserving ``at`` a future time and sleeping until then is exact.
    """

    def __init__(self, capacity: float, per_second: float, now: float) -> None:
        if capacity <= 0 or per_second <= 0:
            raise ValueError("a token bucket needs a positive capacity and rate")
        self.capacity = float(capacity)
        self.per_second = float(per_second)
        self._tokens = float(capacity)
        self._stamp = now

    def tokens(self, at: float) -> float:
        """Tokens in the bucket at ``at`` (no earlier than its last reservation)."""
        at = max(at, self._stamp)
        return min(self.capacity, self._tokens + (at - self._stamp) * self.per_second)

    def ready_at(self, amount: float, now: float) -> float:
        """The earliest time from ``now`` at which ``amount`` tokens are in the bucket
        (``amount`` is capped at the capacity: a bucket never holds more)."""
        at = max(now, self._stamp)
        missing = min(amount, self.capacity) - self.tokens(at)
        return at if missing <= 0 else at + missing / self.per_second

    def take(self, amount: float, at: float) -> None:
        """Remove ``amount`` tokens at ``at`` (may go below zero if the caller did not wait)."""
        self._tokens = self.tokens(at) - amount
        self._stamp = max(at, self._stamp)


def providers_for(on_demand: bool, capacity_providers: tuple[str, ...]) -> tuple[str, ...]:
    """The capacity providers a request may draw tasks from: on-demand only, or the
    strategy's providers (``FARGATE`` when no strategy is set)."""
    if on_demand or not capacity_providers:
        return (ON_DEMAND,)
    return tuple(dict.fromkeys(capacity_providers))


def split_tasks(count: int, strategy: Sequence[tuple[str, int, int]] = ()) -> dict[str, int]:
    """How ECS spreads ``count`` tasks over a capacity provider strategy of (provider,
    weight, base): ``base`` tasks first, the rest in proportion to the weights. An empty
    strategy (or an on-demand request) puts every task on FARGATE.
    https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CapacityProviderStrategyItem.html
    """
    if not strategy:
        return {ON_DEMAND: count}
    out = dict.fromkeys((p for p, _, _ in strategy), 0)
    left = count
    for provider, _, base in strategy:
        n = min(base, left)
        out[provider] += n
        left -= n
    total = sum(w for _, w, _ in strategy)
    if left and total:
        shares = [(provider, left * weight / total) for provider, weight, _ in strategy]
        given = {p: int(share) for p, share in shares}
        rest = left - sum(given.values())
        for provider, _ in sorted(shares, key=lambda s: -(s[1] - int(s[1])))[:rest]:
            given[provider] += 1
        for provider, n in given.items():
            out[provider] += n
    elif left:
        out[strategy[0][0]] += left
    return {p: n for p, n in out.items() if n}


class LaunchPacer:
    """Waits before each RunTask until Fargate's two limits allow it, so none is throttled.

    - calls: spaced at least ``1 / runtask_per_second`` apart (a bucket of one token, stricter
      than AWS's 20-token bucket: no 1-second window ever holds more than the rate);
    - tasks: one bucket per capacity provider (``task_launch_burst`` tokens, refilled at
      ``task_launch_per_second``); a call waits until every provider it names holds ``count``
      tokens, then takes them from each.

    ``clock`` and ``sleep`` are injectable (a fake clock whose ``sleep`` advances it simulates
    any burst instantly). Thread-safe: waits are reserved in order under one lock, then slept
    outside it. One pacer per process: it cannot see launches by other processes of the account.
    """

    def __init__(self, *, runtask_per_second: float = RUNTASK_PER_SECOND,
                 task_launch_burst: int = TASK_LAUNCH_BURST,
                 task_launch_per_second: float = TASK_LAUNCH_PER_SECOND,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._calls = TokenBucket(1, runtask_per_second, clock())
        self._burst = task_launch_burst
        self._rate = task_launch_per_second
        self._tasks: dict[str, TokenBucket] = {}
        self.waited = 0.0  # seconds slept in total (for logs and tests)

    @classmethod
    def simulated(cls, *, runtask_per_second: float = RUNTASK_PER_SECOND,
                  task_launch_burst: int = TASK_LAUNCH_BURST,
                  task_launch_per_second: float = TASK_LAUNCH_PER_SECOND) -> LaunchPacer:
        """A pacer on a clock of its own that its sleeps advance: it computes every wait
        (``waited``, and what ``acquire`` returns) but waits for none (twins, dry runs)."""
        now = [0.0]

        def sleep(seconds: float) -> None:
            now[0] += seconds

        return cls(runtask_per_second=runtask_per_second, task_launch_burst=task_launch_burst,
                   task_launch_per_second=task_launch_per_second, clock=lambda: now[0],
                   sleep=sleep)

    def acquire(self, count: int, providers: tuple[str, ...]) -> float:
        """Wait for one call token and ``count`` task tokens of each provider; returns the
        seconds waited."""
        with self._lock:
            now = self._clock()
            buckets = [self._bucket(p, now) for p in dict.fromkeys(providers)]
            at = max([self._calls.ready_at(1, now),
                      *(b.ready_at(count, now) for b in buckets)])
            self._calls.take(1, at)
            for bucket in buckets:
                bucket.take(count, at)
            delay = at - now
            self.waited += max(delay, 0.0)
        if delay > 0:
            self._sleep(delay)
        return max(delay, 0.0)

    def _bucket(self, provider: str, now: float) -> TokenBucket:
        bucket = self._tasks.get(provider)
        if bucket is None:
            bucket = self._tasks[provider] = TokenBucket(self._burst, self._rate, now)
        return bucket


class LaunchLimits:
    """Fargate's two limits as ECS enforces them, for launchers that model ECS (the local
    launcher, optionally the twin): a RunTask over a limit is refused with ``RateExceeded``
    and starts nothing (a call refused for its tasks has spent its call token, as any API
    request does; no task tokens are taken).

    - calls: a bucket of ``runtask_per_second`` tokens refilled at that rate ("20 calls per
      second (burst and sustained)");
    - tasks: a bucket per capacity provider (``task_launch_burst``, ``task_launch_per_second``),
      charged with the tasks launched on that provider.

    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html
    """

    # Float slack (in tokens), so a caller paced by LaunchPacer on the same clock is never
    # refused for a rounding error (a clock counting from 1.7e9 s resolves ~2.4e-7 s).
    SLACK = 1e-3

    def __init__(self, *, runtask_per_second: float = RUNTASK_PER_SECOND,
                 task_launch_burst: int = TASK_LAUNCH_BURST,
                 task_launch_per_second: float = TASK_LAUNCH_PER_SECOND,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._calls = TokenBucket(max(1.0, runtask_per_second), runtask_per_second, clock())
        self._burst = task_launch_burst
        self._rate = task_launch_per_second
        self._tasks: dict[str, TokenBucket] = {}
        self.throttled = 0  # calls refused so far

    def call(self) -> float:
        """Charge one RunTask call (before anything else is looked at); returns the time."""
        now = self._clock()
        if self._calls.tokens(now) < 1 - self.SLACK:
            self.throttled += 1
            raise RateExceeded("ThrottlingException: Rate exceeded (RunTask calls per second)")
        self._calls.take(1, now)
        return now

    def tasks(self, per_provider: dict[str, int], now: float) -> None:
        """Charge the tasks about to launch on each provider, all or none."""
        buckets = {p: self._bucket(p, now) for p, n in per_provider.items() if n > 0}
        for provider, bucket in buckets.items():
            if bucket.tokens(now) < per_provider[provider] - self.SLACK:
                self.throttled += 1
                raise RateExceeded(f"ThrottlingException: Rate exceeded ({provider} task "
                                   "launch rate)")
        for provider, bucket in buckets.items():
            bucket.take(per_provider[provider], now)

    def _bucket(self, provider: str, now: float) -> TokenBucket:
        bucket = self._tasks.get(provider)
        if bucket is None:
            bucket = self._tasks[provider] = TokenBucket(self._burst, self._rate, now)
        return bucket
