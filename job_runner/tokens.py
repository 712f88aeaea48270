"""``ctx.acquire(key, n)``: a running job takes a rate limit's tokens for a call it makes
mid-job (dispatcher.domain.rate_limits), from the same buckets the dispatcher's launches take
from, so every task's jobs share the limit.

A take is one conditional write to one shard (dispatcher.store.rate_buckets), tried on each
shard in turn from one picked at random (so a limit's takers spread over its shards); when
every shard refuses, the shards are read (one BatchGetItem) and the job sleeps until the
soonest of them has the tokens (half a token's interval at least, and up to one more at
random, so that waiters do not write in step), waking at once if it is cancelled. The
limits are read once a minute at most (a change applies within that)."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable

from dispatcher.domain import rate_limits
from dispatcher.domain.errors import Interrupted, LongjobsError
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.store.rate_buckets import RateBuckets

# How long the limits read stays fresh.
LIMITS_FRESH_SECONDS = 60.0


class TokensNotGranted(LongjobsError):
    """``ctx.acquire`` could not have its tokens: not within its timeout, or never (more than
    a shard's burst at once). The reason says which, and what to change."""


class Tokens:
    """One task's acquires: the limits (read once a minute at most) and the shards' last
    seen ``bucket_at`` (which of a take's two writes goes first)."""

    def __init__(self, store: RateBuckets, clock: Callable[[], float] = time.time,
                 pick: Callable[[int], int] | None = None) -> None:
        self._store = store
        self._clock = clock
        self._pick = pick or (lambda n: random.randrange(n))
        self._jitter: Callable[[], float] = random.random
        self._limits: dict[str, RateLimit] = {}
        self._read_at: float | None = None
        self._seen: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()

    def limit(self, key: str) -> RateLimit | None:
        with self._lock:
            now = self._clock()
            if self._read_at is None or now - self._read_at >= LIMITS_FRESH_SECONDS:
                self._limits, self._read_at = self._store.rate_limits(), now
            return self._limits.get(key)

    def acquire(self, key: str, n: int, *, tenant: str | None, job_id: str,
                timeout: float | None, cancel: threading.Event) -> bool:
        """Take ``n`` tokens of ``key`` (its job's ``tenant`` resolves ``{tenant}``), waiting
        up to ``timeout`` seconds (None: as long as it takes) and no longer than the job is
        not cancelled. False if ``key`` has no limit set (nothing taken); True once taken."""
        if (why := rate_limits.key_problem(key)) is not None:
            raise TokensNotGranted(why, job_id=job_id)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= rate_limits.MAX_AMOUNT:
            raise TokensNotGranted(f"acquire({key!r}, {n!r}): take 1 to "
                                   f"{rate_limits.MAX_AMOUNT} tokens", job_id=job_id)
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float))
                                    or not math.isfinite(timeout) or timeout < 0):
            raise TokensNotGranted(f"acquire({key!r}, timeout={timeout!r}): a timeout is a "
                                   "number of seconds, 0 or more (None: no end)",
                                   job_id=job_id)
        limit = self.limit(key)
        if limit is None:
            return False
        if n > limit.shard_burst:
            raise TokensNotGranted(
                f"acquire({key!r}, {n}) is more than the limit's burst of "
                f"{limit.shard_burst:g} a take can have: take fewer at a time, or raise it "
                f"(longjobs limits set {key} --burst {n * limit.shards})", job_id=job_id)
        bucket = rate_limits.resolve(key, tenant)
        start = self._clock()
        first = self._pick(limit.shards)
        while True:
            now = self._clock()
            for i in range(limit.shards):
                shard = (first + i) % limit.shards
                tat = self._store.take(bucket, shard, n, limit, now,
                                       self._seen.get((bucket, shard)))
                if tat is not None:
                    self._seen[(bucket, shard)] = tat
                    return True
            tats = self._store.buckets([(bucket, s) for s in range(limit.shards)])
            self._seen.update(tats)
            ready = min((rate_limits.ready_at(tats.get((bucket, s)), now, n, limit) or now
                         for s in range(limit.shards)), default=now)
            # No token comes sooner than a shard's interval; a little more, at random, so
            # that the takers a refusal woke together do not all write again at once.
            pause = max(ready - now, limit.interval / 2) \
                + self._jitter() * limit.interval
            if timeout is not None:
                left = start + timeout - now
                if left <= 0:
                    raise TokensNotGranted(
                        f"acquire({key!r}, {n}): no tokens within {timeout:g} s (its next "
                        f"come in {pause:.1f} s); give a longer timeout, or take fewer",
                        job_id=job_id)
                pause = min(pause, left)
            if cancel.wait(pause):
                raise Interrupted("cancelled while waiting for rate limit tokens",
                                  job_id=job_id)
