"""The rate limits' tokens as one tick goes (dispatcher.domain.rate_limits).

A bundle whose jobs take tokens (its id says so) is launched only by the tick, and only once
its tokens are granted: no task starts, or is paid for, to wait for one. The tick:

- looks (:meth:`TickTokens.admit`), as it chooses the due work it launches, and at each of
  its drain's bundles that can launch: it reads the due bundles' items (their ``uses``, which
  the status index does not hold), the limits, and the buckets' shards (a few reads, and only
  when such a bundle is due or drained), then keeps, in
  the tick's order, the bundles whose tokens the buckets hold, counting each one's take as it
  goes; the others wait (``rate_limit`` in the tick's summary: the bucket, when its tokens
  come);
- takes (:meth:`TickTokens.take`), just before it launches them: one conditional write per
  key of each bundle (dispatcher.store.rate_buckets), the shard the look chose. A take the
  table refuses (a running job's ``ctx.acquire`` came first) leaves its bundle PENDING, due,
  for the next tick; tokens taken for a bundle whose launch then fails are not given back, so
  a bucket never grants more than its bound.

A key with no limit set takes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.domain import rate_limits
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.domain.waiting import RateWait
from dispatcher.ports.table import TableUnavailable
from dispatcher.store import StageStore

log = logging.getLogger(__name__)

# Buckets a tick's summary names at most (every job read of a waiting job reads the summary).
MAX_RATE_WAITS = 100


@dataclass(frozen=True)
class TokenTake:
    """One key's take of a bundle's launch: the bucket and shard, the tokens, the limit, and
    the shard's ``bucket_at`` as the look saw it (which of the take's two writes goes first)."""

    bucket: str
    shard: int
    tokens: int
    limit: RateLimit
    known: float | None


class TickTokens:
    """The tokens of one tick's launches."""

    def __init__(self, store: StageStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._limits: dict[str, RateLimit] | None = None
        self._tats: dict[tuple[str, int], float] = {}
        self._plans: dict[str, list[TokenTake]] = {}
        self.waits: dict[str, RateWait] = {}
        self.refused = 0  # takes the table refused (another taker came first)

    def admit(self, bundles: list[Bundle]) -> list[Bundle]:
        """``bundles``, in their order, but those whose tokens the buckets do not hold now
        (each one kept counts its take against the buckets, for those after it)."""
        marked = [b for b in bundles if rate_limits.takes_tokens(b.bundle_id)
                  and b.bundle_id not in self._plans]
        if not marked:
            return bundles
        try:
            self._look(marked)
        except TableUnavailable as exc:  # none launches this tick; the next looks again
            log.error("reading the rate limits failed", extra={"reason": exc.reason})
            return [b for b in bundles if not rate_limits.takes_tokens(b.bundle_id)]
        now = self._clock()
        out = []
        for b in bundles:
            if not rate_limits.takes_tokens(b.bundle_id) or b.bundle_id in self._plans \
                    or self._fits(b, now):
                out.append(b)
        return out

    def take(self, bundles: list[Bundle]) -> list[Bundle]:
        """Take the tokens of ``bundles`` about to launch (one conditional write per key of
        each that takes any); those refused are left out, PENDING for the next tick."""
        out = []
        now = self._clock()
        for b in bundles:
            plan = self._plans.pop(b.bundle_id, None) if rate_limits.takes_tokens(b.bundle_id) \
                else []
            if plan is None:  # not looked at (admit first): not launched now
                continue
            if all(self._take(t, now) for t in plan):
                out.append(b)
            else:
                self.refused += 1
        return out

    def _take(self, t: TokenTake, now: float) -> bool:
        try:
            tat = self._store.take(t.bucket, t.shard, t.tokens, t.limit, now, t.known)
        except TableUnavailable as exc:
            log.error("taking a rate limit's tokens failed",
                      extra={"bucket": t.bucket, "reason": exc.reason})
            return False
        return tat is not None

    def _look(self, marked: list[Bundle]) -> None:
        """The marked bundles' ``uses`` (their items), the limits and their buckets' shards."""
        unread = [b for b in marked if b.uses is None]  # due work, read from the index
        full = {b.bundle_id: b for i in range(0, len(unread), 100)
                for b in self._store.bundles_of([m.bundle_id for m in unread[i:i + 100]])}
        for b in unread:
            b.uses = full[b.bundle_id].uses if b.bundle_id in full else None
        keys = {(k, rate_limits.resolve(k, b.tenant)) for b in marked for k in b.uses or {}}
        if self._limits is None:
            self._limits, self._tats = self._store.limits_and_buckets(keys)
        else:
            new = {(bucket, n) for declared, bucket in keys if declared in self._limits
                   for n in range(self._limits[declared].shards)} - set(self._tats)
            self._tats.update(self._store.buckets(new))

    def _fits(self, b: Bundle, now: float) -> bool:
        """Whether ``b``'s tokens are there (its plan noted, and counted, if they are)."""
        assert self._limits is not None
        plan: list[TokenTake] = []
        grants: dict[tuple[str, int], float] = {}
        for declared, n in sorted((b.uses or {}).items()):
            limit = self._limits.get(declared)
            if limit is None:
                continue  # no limit set: nothing to take
            bucket = rate_limits.resolve(declared, b.tenant)
            shard = min(range(limit.shards), key=lambda s: self._tats.get((bucket, s), 0.0))
            tat = self._tats.get((bucket, shard))
            new = rate_limits.grant(tat, now, n, limit)
            if new is None:
                if bucket in self.waits or len(self.waits) < MAX_RATE_WAITS:
                    self.waits[bucket] = RateWait(rate_limits.ready_at(tat, now, n, limit), n,
                                                  limit.shard_burst, declared)
                return False
            plan.append(TokenTake(bucket, shard, n, limit, tat))
            grants[(bucket, shard)] = new
        self._tats.update(grants)
        self._plans[b.bundle_id] = plan
        return True
