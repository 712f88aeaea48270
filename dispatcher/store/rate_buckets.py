"""Rate limits and their token buckets in the table (dispatcher.domain.rate_limits).

- ``LIMIT#policies``: every limit set (``longjobs limits set``), in one item the tick reads when
  a bundle that takes tokens is due; an operator's change is a conditional write on its
  ``version``, so two changes made at once never lose one.
- ``BUCKET#<key>#<shard>``: one shard of a key's bucket, GCRA's ``bucket_at`` (its theoretical
  arrival time). A take is one conditional update of one shard (:meth:`RateBuckets.take`):
  when the bucket has been idle, ``SET bucket_at = now + n * interval`` on condition it is at
  or before ``now``; otherwise ``ADD bucket_at n * interval`` on condition it is after ``now``
  and at most ``now + tolerance - n * interval``. Each form holds GCRA's rule exactly, so two
  takers racing on one shard can never both pass its bound: the second's condition sees the
  first's write. The taker tries the form its last look says, then the other.
"""

from __future__ import annotations

from collections.abc import Iterable

from dispatcher.domain import rate_limits
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.ports.table import (
    Add,
    And,
    ConditionFailed,
    Gt,
    Lacks,
    Le,
    Or,
    Record,
    Set,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import Reads

# A bucket's shard outlives its last take by this much at least (then expires: an idle bucket
# is a full one, as a missing item is).
BUCKET_TTL_SECONDS = 86_400.0


class RateLimitError(LongjobsError):
    """A rate limit could not be set or removed: the reason says why."""


class RateBuckets(Reads):
    """Reading and writing the rate limits and taking their tokens."""

    def rate_limits(self) -> dict[str, RateLimit]:
        """Every limit set, by key."""
        return _limits(self.table.get(r.LIMITS_KEY))

    def set_rate_limit(self, key: str, limit: RateLimit | None) -> RateLimit | None:
        """Set ``key``'s limit (None removes it); the limit set. One read and one
        conditional write (:meth:`change_versioned`)."""
        if limit is not None and (why := rate_limits.limit_problem(key, limit)) is not None:
            raise RateLimitError(f"limit {key}: {why}")

        def change(rec: Record | None) -> Record:
            limits = _limits(rec)
            if limit is None:
                if key not in limits:
                    raise RateLimitError(f"no limit {key!r} is set (longjobs limits lists them)")
                del limits[key]
            else:
                limits[key] = limit
            if len(limits) > rate_limits.MAX_LIMITS:
                raise RateLimitError(f"limit {key}: {rate_limits.MAX_LIMITS} limits are set "
                                     "already; remove one first (longjobs limits delete KEY)")
            return Record(r.LIMITS_KEY, updated_at=self.clock(),
                          limits={k: v.to_json() for k, v in sorted(limits.items())})

        self.change_versioned(r.LIMITS_KEY, change, lambda: RateLimitError(
            f"limit {key}: other changes kept coming first; try again"))
        return limit

    def buckets(self, shards: Iterable[tuple[str, int]]) -> dict[tuple[str, int], float]:
        """The shards' ``bucket_at`` (a shard never taken from is left out)."""
        wanted = {r.bucket_key(k, n): (k, n) for k, n in shards}
        out: dict[tuple[str, int], float] = {}
        pks = sorted(wanted)
        for i in range(0, len(pks), 100):  # BatchGetItem takes 100 keys
            for rec in self.table.get_many(pks[i:i + 100]):
                if rec.bucket_at is not None:
                    out[wanted[rec.pk]] = float(rec.bucket_at)
        return out

    def take(self, bucket: str, shard: int, n: float, limit: RateLimit, now: float,
             known: float | None) -> float | None:
        """Take ``n`` tokens from one shard of ``bucket`` at ``now``: its new ``bucket_at``,
        or None if refused. ``known``: its ``bucket_at`` as last seen (the form tried first);
        one conditional write when that is right, two when not."""
        pk = r.bucket_key(bucket, shard)
        step = n * limit.interval
        latest = rate_limits.latest(now, n, limit)  # the most bucket_at may be for a grant
        if latest < now:
            return None  # more than a shard's burst: never
        expires = Set("expires_at", now + BUCKET_TTL_SECONDS + limit.tolerance)
        idle = Update(pk, [Set("bucket_at", now + step), expires],
                      Or(Lacks("bucket_at"), Le("bucket_at", now)))
        busy = Update(pk, [Add("bucket_at", step), expires],
                      And(Gt("bucket_at", now), Le("bucket_at", latest)))
        forms = [idle, busy] if known is None or known <= now else [busy, idle]
        for op in forms:
            try:
                rec = self.table.write(op)
            except ConditionFailed:
                continue
            return float(rec.bucket_at) if rec is not None and rec.bucket_at is not None \
                else now + step
        return None


def _limits(rec: Record | None) -> dict[str, RateLimit]:
    data = rec.limits if rec is not None and isinstance(rec.limits, dict) else {}
    out = {}
    for key, value in data.items():
        limit = RateLimit.from_json(value)
        if limit is not None:
            out[str(key)] = limit
    return out
