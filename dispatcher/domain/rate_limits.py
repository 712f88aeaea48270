"""Rate limits: named token buckets every task shares (pure rules).

An operator names a limit (``longjobs limits set openai --rate 100/min --burst 20``); a job
declares what it takes of it (``uses={"openai": 1}``). The dispatcher launches a bundle only
once its jobs' tokens are granted (one conditional write per key, at launch), so no task is
started, or paid for, to wait for a token; a running job takes more for the calls it makes
mid-job (``ctx.acquire("openai", n)``, which waits, bounded, for them). A key may hold
``{tenant}``: each tenant then has a bucket of its own at that limit (``openai:{tenant}`` is
``openai:acme`` for acme's jobs). A key with no limit set takes nothing and holds no job.

Each bucket is kept as GCRA's one number, its theoretical arrival time (``tat``): a take of
``n`` tokens at ``now`` is granted when ``max(tat, now) + n * interval <= now + tolerance``
(``interval`` = 1 / rate, ``tolerance`` = burst * interval), and moves ``tat`` there; so over
any window of ``w`` seconds a bucket grants at most ``rate * w + burst`` tokens
(https://en.wikipedia.org/wiki/Generic_cell_rate_algorithm). A limit may be split into
``shards`` buckets of ``rate / shards`` and ``burst / shards`` each, whose bounds add up to the
limit's: a take goes to one shard, so one key's takes spread over as many items (each item
takes at most 1,000 writes a second, DynamoDB's per-partition limit:
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.domain.errors import LongjobsError

# A key: 1-64 characters of [A-Za-z0-9._:/-], and ``{tenant}`` for the job's tenant.
MAX_KEY = 64
KEY = re.compile(r"(?:[A-Za-z0-9._:/-]|\{tenant\}){1,64}")
TENANT_FIELD = "{tenant}"
# What the key of a job of no tenant holds for ``{tenant}`` (no tenant's name).
NO_TENANT = "(none)"
# Slack in comparing times: a float near today's epoch is exact to about 2.4e-7 s, so a take
# of exactly a burst is compared with this much room (it lets a bucket grant at most
# rate x EPSILON tokens more: a millionth of a second's worth).
EPSILON = 1e-6
# Keys one job may take from, and the most tokens of one key a job's launch (or one acquire)
# takes.
MAX_USES = 4
MAX_AMOUNT = 1000
# Limits the stack may hold (one item, read once a tick when a job that takes tokens is due).
MAX_LIMITS = 500
# A limit's bounds: tokens a second, a burst, shards.
MAX_RATE = 100_000.0
MAX_BURST = 1_000_000
MAX_SHARDS = 64
UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
         "h": 3600.0, "hour": 3600.0, "d": 86_400.0, "day": 86_400.0}
# Begins the part of a bundle's id after its tenant when its jobs take tokens: the status
# index, which the tick reads due bundles from, holds no bundle's ``uses`` (its projection is
# fixed when it is made; dispatcher.domain.tenants says the same of a tenant), so the tick
# reads the items of the due bundles so marked, and only those. No id a drain makes otherwise
# holds a ".".
BUNDLE_MARK = "r."
RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*")


class RateLimitProblem(LongjobsError, ValueError):
    """A limit or a rate that cannot be: the reason says why."""


@dataclass(frozen=True)
class RateLimit:
    """A limit: ``rate`` tokens a second, ``burst`` at once at most, kept in ``shards``
    buckets (each of ``rate / shards`` and ``burst / shards``); ``said``: the rate as it was
    given (``100/min``)."""

    rate: float
    burst: float
    shards: int = 1
    said: str = ""

    @property
    def interval(self) -> float:
        """Seconds between two tokens of one shard."""
        return self.shards / self.rate

    @property
    def shard_burst(self) -> float:
        """The most tokens one take may have (a take goes to one shard)."""
        return self.burst / self.shards

    @property
    def tolerance(self) -> float:
        return self.shard_burst * self.interval

    def to_json(self) -> dict[str, Any]:
        return {"rate": self.rate, "burst": self.burst, "shards": self.shards,
                "said": self.said}

    @staticmethod
    def from_json(data: Any) -> RateLimit | None:
        if not isinstance(data, dict):
            return None
        try:
            return RateLimit(rate=float(data["rate"]), burst=float(data["burst"]),
                             shards=int(data.get("shards") or 1),
                             said=str(data.get("said") or ""))
        except (KeyError, TypeError, ValueError):
            return None

    def bound(self, window: float) -> float:
        """The most tokens granted in any ``window`` seconds."""
        return self.rate * window + self.burst


def parse_rate(text: str) -> tuple[float, str]:
    """``100/min`` (or ``5/s``, ``1000/hour``, ``3/10s``) as tokens a second, and as said."""
    m = RATE.fullmatch(text.lower())
    if m is None or m.group(3) not in UNITS:
        raise RateLimitProblem(
            f"rate {text!r} must be tokens per unit such as 100/min, 5/s, 1000/hour or 3/10s "
            f"(units: {', '.join(sorted(set(UNITS)))})")
    count, per, unit = float(m.group(1)), float(m.group(2) or 1), m.group(3)
    seconds = per * UNITS[unit]
    if count <= 0 or seconds <= 0:
        raise RateLimitProblem(f"rate {text!r} must be above 0")
    rate = count / seconds
    if rate > MAX_RATE:
        raise RateLimitProblem(f"rate {text!r} is more than {MAX_RATE:.0f} a second")
    said = f"{m.group(1)}/{m.group(2) or ''}{unit}"
    return rate, said


def auto_shards(rate: float) -> int:
    """Shards for a limit of ``rate`` tokens a second: one per 250 (a take is one write, and
    a refused one a second; one item takes 1,000 writes a second)."""
    return max(1, min(MAX_SHARDS, math.ceil(rate / 250.0)))


def limit_problem(name: str, limit: RateLimit) -> str | None:
    """Why ``limit`` cannot be set as ``name``, or None."""
    if (why := key_problem(name)) is not None:
        return why
    if not 0 < limit.rate <= MAX_RATE:
        return f"rate must be above 0 and at most {MAX_RATE:.0f} a second"
    if not 1 <= limit.burst <= MAX_BURST:
        return f"burst must be 1 to {MAX_BURST}"
    if not 1 <= limit.shards <= MAX_SHARDS:
        return f"shards must be 1 to {MAX_SHARDS}"
    if limit.shard_burst < 1:
        return (f"a burst of {limit.burst:g} over {limit.shards} shards leaves less than one "
                f"token a shard: raise --burst to {limit.shards} or more, or lower --shards")
    return None


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot name a limit, or None."""
    if not isinstance(key, str) or len(key) > MAX_KEY or not KEY.fullmatch(key):
        return (f"limit key {key!r} must be 1-{MAX_KEY} characters of [A-Za-z0-9._:/-], "
                f"and {TENANT_FIELD} for the job's tenant")
    return None


def jobs_per_bundle(concurrency: int, limits: Mapping[str, RateLimit],
                    uses: Mapping[str, int]) -> int:
    """Jobs of these ``uses`` one bundle holds (its launch takes all their tokens at once): as
    many as its task starts at once, and no more than half of what one take of each limited
    key can have (a shard's burst), so that its launch is granted while other takers (running
    jobs' acquires) take from the bucket too; one if even that is more (it waits for a full
    bucket, or, past the burst, says what to change)."""
    cap = concurrency
    for key, n in uses.items():
        limit = limits.get(key)
        if limit is not None:
            cap = min(cap, int(limit.shard_burst / 2 // n))
    return max(1, cap)


def marked(rest: str) -> str:
    """The part of a bundle's id after its tenant, for a bundle whose jobs take tokens."""
    return BUNDLE_MARK + rest


def takes_tokens(bundle_id: str) -> bool:
    """Whether a bundle's id says its jobs take tokens (:func:`marked`)."""
    return bundle_id.rpartition("@")[2].startswith(BUNDLE_MARK)


def resolve(key: str, tenant: str | None) -> str:
    """The bucket ``key`` names for a job of ``tenant``: ``{tenant}`` becomes the tenant's
    name in braces (``api:{acme}``), which no key as set can hold, so no tenant's bucket is
    another key's (``api:acme`` set apart is a bucket of its own)."""
    return key.replace(TENANT_FIELD, "{" + (tenant or NO_TENANT) + "}")


def needs(uses: list[Mapping[str, int] | None]) -> dict[str, int]:
    """The tokens of each key a bundle of jobs with these ``uses`` takes at launch."""
    out: dict[str, int] = {}
    for u in uses:
        for key, n in (u or {}).items():
            out[key] = out.get(key, 0) + int(n)
    return out


def latest(now: float, n: float, limit: RateLimit) -> float:
    """The latest a shard's ``tat`` may be for a take of ``n`` tokens at ``now`` to be
    granted (earlier than ``now``: never, more than a shard's burst)."""
    return now + limit.tolerance - n * limit.interval + EPSILON


def grant(tat: float | None, now: float, n: float, limit: RateLimit) -> float | None:
    """The shard's new ``tat`` when a take of ``n`` tokens at ``now`` is granted, else None
    (GCRA: granted while ``max(tat, now) <= latest``)."""
    start = max(tat if tat is not None else now, now)
    if start > latest(now, n, limit):
        return None
    return start + n * limit.interval


def ready_at(tat: float | None, now: float, n: float, limit: RateLimit) -> float | None:
    """When a take of ``n`` tokens could be granted (``now`` if it can be now); None if it
    never can: more than one shard's burst."""
    if n > limit.shard_burst * (1 + 1e-12):
        return None
    start = tat if tat is not None else now
    return max(now, start + n * limit.interval - limit.tolerance)


def most_in_window(grants: list[tuple[float, float]], window: float) -> float:
    """The most tokens ``grants`` (time, tokens) hold in any ``window`` seconds."""
    ordered = sorted(grants)
    most = total = 0.0
    start = 0
    for at, n in ordered:
        total += n
        while ordered[start][0] <= at - window:
            total -= ordered[start][1]
            start += 1
        most = max(most, total)
    return most


def describe(limit: RateLimit) -> str:
    """``100/min, burst 20`` (and its shards, if more than one)."""
    rate = limit.said or f"{limit.rate:g}/s"
    extra = f", {limit.shards} shards" if limit.shards > 1 else ""
    return f"{rate}, burst {limit.burst:g}{extra}"
