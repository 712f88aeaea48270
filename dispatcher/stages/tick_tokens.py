"""The rate limits' tokens as one tick goes (dispatcher.domain.rate_limits).

A bundle whose jobs take tokens (its id says so) is launched only by the tick, and only once
its tokens are granted: no task starts, or is paid for, to wait for one. The tick:

- looks (:meth:`TickTokens.admit`), as it chooses the due work it launches (the due read
  pages on past the bundles held), and as it fills the slots left at its drain's end (the
  due work it held before among them: :meth:`TickTokens.held_back`; a drain of many seconds
  gives their buckets the time to fill): it reads the bundles' items (their ``uses``, which
  the status index does not hold), the limits and the buckets' shards (a few reads, and only
  when such a bundle is in view), and keeps those whose tokens the buckets hold now,
  reserving none;
- takes (:meth:`TickTokens.take`), just before it launches what it chose, in its order: one
  conditional write per key of each bundle (dispatcher.store.rate_buckets), on its fullest
  shard; a bundle whose tokens an earlier one took meanwhile, or whose take the table refuses
  (a running job's ``ctx.acquire`` came first), stays PENDING, and its slot goes to the work
  after it. Tokens taken for a bundle whose launch then fails are not given back, so a bucket
  never grants more than its bound.

A bucket's bundles go in the tick's order: once one is held, those after it wait too (a
bundle of many tokens is not passed forever by smaller ones), but for one that asks more than
a take can ever have (it waits, saying what to change). As the tick ends, the summary names
each bucket that holds back a bundle it saw and did not launch, judged on the buckets as its
takes left them (``rate_limit``: when the first held bundle's tokens come).

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


class TickTokens:
    """The tokens of one tick's launches."""

    def __init__(self, store: StageStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._limits: dict[str, RateLimit] | None = None
        self._tats: dict[tuple[str, int], float] = {}  # each shard's bucket_at, as known
        self._read: set[str] = set()  # buckets whose shards were read
        self._seen: dict[str, Bundle] = {}  # bundles that take tokens, in the order seen
        self._held: dict[str, Bundle] = {}  # those a look kept out, their tokens not there
        self._taken: set[str] = set()  # those whose tokens were taken

    def admit(self, bundles: list[Bundle]) -> list[Bundle]:
        """``bundles``, in their order, but those whose tokens the buckets do not hold now:
        those kept could all be granted in that order (each counted against a copy of the
        buckets for those after it; nothing is reserved: :meth:`take` takes them), so any of
        their slices can be too."""
        marked = [b for b in bundles if rate_limits.takes_tokens(b.bundle_id)]
        if not marked:
            return bundles
        try:
            self._look(marked)
        except TableUnavailable as exc:  # none launches this tick; the next looks again
            log.error("reading the rate limits failed", extra={"reason": exc.reason})
            return [b for b in bundles if not rate_limits.takes_tokens(b.bundle_id)]
        now = self._clock()
        tats, held = dict(self._tats), set[str]()
        out = []
        for b in marked:
            self._seen.setdefault(b.bundle_id, b)
        for b in bundles:
            if rate_limits.takes_tokens(b.bundle_id):
                plan = self._plan(b, now, tats, held)
                if plan is None:
                    self._held.setdefault(b.bundle_id, b)
                    continue
                for t in plan:
                    tats[(t.bucket, t.shard)] = rate_limits.grant(t.known, now, t.tokens,
                                                                  t.limit) or now
            out.append(b)
        return out

    def held_back(self) -> list[Bundle]:
        """The due bundles a look kept out for their tokens and none took since, in the
        order seen: the drain's end looks at them again (a long drain gives a bucket the time
        to fill, and a slot left free beside work whose tokens came would idle until the
        next tick)."""
        return [b for b in self._held.values() if b.bundle_id not in self._taken]

    def take(self, bundles: list[Bundle]) -> list[Bundle]:
        """Take the tokens of ``bundles`` about to launch, in order (one conditional write per
        key of each that takes any); those whose tokens are not there are left out, PENDING
        for a later tick. Only bundles :meth:`admit` looked at launch."""
        out = []
        held = set[str]()
        for b in bundles:
            if not rate_limits.takes_tokens(b.bundle_id):
                out.append(b)
                continue
            now = self._clock()
            plan = self._plan(b, now, self._tats, held) if b.uses is not None else None
            if plan is not None and all(self._take(t, now, held) for t in plan):
                self._taken.add(b.bundle_id)
                out.append(b)
        return out

    def waits(self) -> dict[str, RateWait]:
        """For the tick's summary, as it ends: the buckets that hold back a bundle it saw and
        did not launch, judged on the buckets as they are now (what the tick took, not what
        it only looked at), in the order it saw them; each with when its first held bundle's
        tokens come (:class:`~dispatcher.domain.waiting.RateWait`; at most
        :data:`MAX_RATE_WAITS`)."""
        if self._limits is None:
            return {}
        now = self._clock()
        out: dict[str, RateWait] = {}
        held: set[str] = set()
        for b in self._seen.values():
            if b.bundle_id not in self._taken:
                self._plan(b, now, self._tats, held, out)
        return out

    def _take(self, t: TokenTake, now: float, held: set[str]) -> bool:
        try:
            tat = self._store.take(t.bucket, t.shard, t.tokens, t.limit, now, t.known)
        except TableUnavailable as exc:
            log.error("taking a rate limit's tokens failed",
                      extra={"bucket": t.bucket, "reason": exc.reason})
            tat = None
        if tat is None:  # another taker came first: its shard as it is now, for the wait
            try:
                self._tats.update(self._store.buckets({(t.bucket, t.shard)}))
            except TableUnavailable:
                self._read.discard(t.bucket)  # read again at the next look
            held.add(t.bucket)
            return False
        self._tats[(t.bucket, t.shard)] = tat
        return True

    def _look(self, marked: list[Bundle]) -> None:
        """The marked bundles' ``uses`` (their items, for those read from the index), the
        limits (once a tick) and their buckets' shards not read yet."""
        unread = [b for b in marked if b.uses is None]
        full = {b.bundle_id: b for i in range(0, len(unread), 100)
                for b in self._store.bundles_of([m.bundle_id for m in unread[i:i + 100]])}
        for b in unread:
            if b.bundle_id in full:  # one gone since (launched, cancelled) is not launched
                b.uses = full[b.bundle_id].uses or {}
        if self._limits is None:
            self._limits = self._store.rate_limits()
        buckets = {rate_limits.resolve(k, b.tenant): self._limits[k]
                   for b in marked for k in b.uses or {} if k in self._limits}
        new = {(bucket, n) for bucket, limit in buckets.items() if bucket not in self._read
               for n in range(limit.shards)}
        if new:
            got = self._store.buckets(new)
            for shard in new:
                if shard in got:
                    self._tats[shard] = max(got[shard], self._tats.get(shard, got[shard]))
                else:
                    self._tats.pop(shard, None)
            self._read |= {bucket for bucket, _ in new}

    def _plan(self, b: Bundle, now: float, tats: dict[tuple[str, int], float],
              held: set[str], waits: dict[str, RateWait] | None = None
              ) -> list[TokenTake] | None:
        """``b``'s takes (a shard of each limited key), if its tokens are there now, as
        ``tats`` has the shards and but for a bucket ``held`` for a bundle before it (the
        bucket it is held for is held for those after it, and noted in ``waits``)."""
        if b.uses is None:
            return None  # its item was not read (gone): not launched now
        assert self._limits is not None
        plan: list[TokenTake] = []
        for declared, n in sorted(b.uses.items()):
            limit = self._limits.get(declared)
            if limit is None:
                continue  # no limit set: nothing to take
            bucket = rate_limits.resolve(declared, b.tenant)
            shard = min(range(limit.shards), key=lambda s: tats.get((bucket, s), now))
            tat = tats.get((bucket, shard))
            never = n > limit.shard_burst * (1 + 1e-12)
            if (bucket in held and not never) or rate_limits.grant(tat, now, n, limit) is None:
                self._hold(bucket, n, limit, declared, now, tats, held, waits)
                return None
            plan.append(TokenTake(bucket, shard, n, limit, tat, declared))
        return plan

    @staticmethod
    def _hold(bucket: str, n: int, limit: RateLimit, declared: str, now: float,
              tats: dict[tuple[str, int], float], held: set[str],
              waits: dict[str, RateWait] | None) -> None:
        """A bundle of ``bucket`` held: the bucket's later bundles in this order wait behind
        it (but for one that never can launch), and ``waits`` says when its tokens come (the
        first held)."""
        tat = min((tats.get((bucket, s), now) for s in range(limit.shards)), default=now)
        at = rate_limits.ready_at(tat, now, n, limit)
        if at is not None:
            held.add(bucket)
        if waits is None:
            return
        was = waits.get(bucket)
        if (was is None or was.at is None) \
                and (bucket in waits or len(waits) < MAX_RATE_WAITS):
            waits[bucket] = RateWait(at, n, limit.shard_burst, declared, limit.shards)


@dataclass(frozen=True)
class TokenTake:
    """One key's take of a bundle's launch: the bucket and shard, the tokens, the limit, the
    shard's ``bucket_at`` as the look saw it (which of the take's two writes goes first) and
    the key as jobs declare it."""

    bucket: str
    shard: int
    tokens: int
    limit: RateLimit
    known: float | None
    declared: str
