"""The whole-system model's checks of the rate limits (dispatcher.domain.rate_limits).

- ``rate_bound``: no bucket grants more than ``rate x window + burst`` in any window (1, 10 and
  60 s), counted over the grants made under one limit (an operator's change starts a new
  count: the bound is the limit's in force);
- ``tokens_taken``: no step starts a task for a bundle whose jobs (as their items say, not its
  id) take a limited key's tokens without granting them in that step (a launch, a relaunch;
  a take of it by a running task would start none: none may);
- ``rate_limit`` claims are true: right after a tick, a bucket its summary says was short
  could not grant its first held bundle's tokens at the tick's time (its fullest shard as the
  table holds it, by GCRA's rule written out here again).

And for ``share_order`` (tests/model_promises.py): the due work a bucket held as a tick began
(:func:`short_as_began`).

Grants are seen through the store's one primitive for them (``take``), which every taker
calls: the tick's launches and the runners' ``ctx.acquire``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dispatcher.domain import rate_limits
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.domain.waiting import TickSummary
from dispatcher.store import Store, codec
from tests.model_checks import View

WINDOWS = (1.0, 10.0, 60.0)


@dataclass
class TokenWatch:
    """Every grant: (time, bucket, tokens, the limit it was granted under)."""

    grants: list[tuple[float, str, float, RateLimit]] = field(default_factory=list)
    _step: dict[str, float] = field(default_factory=dict)  # tokens granted this step
    _before: set[tuple[str, int]] = field(default_factory=set)  # active (bundle, attempt)

    def watch(self, store: Store) -> None:
        take = store.take

        def counted(bucket: str, shard: int, n: float, limit: RateLimit, now: float,
                    known: float | None) -> float | None:
            got = take(bucket, shard, n, limit, now, known)
            if got is not None:
                self.grants.append((now, bucket, n, limit))
                self._step[bucket] = self._step.get(bucket, 0.0) + n
            return got

        store.take = counted  # type: ignore[method-assign]

    def over_bound(self) -> list[str]:
        groups: dict[tuple[str, RateLimit], list[tuple[float, float]]] = {}
        for at, bucket, n, limit in self.grants:
            groups.setdefault((bucket, limit), []).append((at, n))
        out = []
        for (bucket, limit), grants in groups.items():
            for w in WINDOWS:
                most = rate_limits.most_in_window(grants, w)
                if most > limit.bound(w) + 1e-6:
                    out.append(f"bucket {bucket} granted {most:g} tokens within {w:g} s, over "
                               f"its bound of {limit.bound(w):g} ({rate_limits.describe(limit)})")
        return out

    def untaken(self, view: View, recovered: bool) -> list[str]:
        """Bundles that take limited keys' tokens, started this step without their grants."""
        limits = _limits(view)
        active = [b for b in view.bundles() if b.state in ACTIVE_BUNDLE_STATES]
        started = [b for b in active if (b.bundle_id, b.attempt) not in self._before]
        self._before = {(b.bundle_id, b.attempt) for b in active}
        granted, self._step = self._step, {}
        if recovered:  # a crashed tick's launches, completed: their tokens were taken then
            return []
        need: dict[str, float] = {}
        for b in started:
            for job_id in b.job_ids:
                job = view.job(job_id)
                for key, n in (job.uses or {}).items() if job is not None else ():
                    if key in limits:
                        bucket = rate_limits.resolve(key, b.tenant)
                        need[bucket] = need.get(bucket, 0.0) + float(n)
        return [f"{need[b]:g} tokens of {b} were needed by the bundles started this step, "
                f"{granted.get(b, 0.0):g} granted" for b in sorted(need)
                if granted.get(b, 0.0) < need[b] - 1e-9]

    def false_claims(self, view: View) -> list[str]:
        """Buckets the last tick's summary says were short, that could grant then."""
        tick = view.items.get(codec.TICK_KEY)
        summary = TickSummary.from_json(tick.summary) if tick is not None else None
        if summary is None:
            return []
        limits = _limits(view)
        set_at = view.items.get(codec.LIMITS_KEY)
        if set_at is not None and (set_at.updated_at or 0.0) > summary.at:
            return []  # a limit changed since the tick: its claims were of the limit before
        out = []
        for bucket, wait in summary.rate_limits.items():
            limit = limits.get(wait.declared)
            if limit is None or wait.at is None:
                continue  # removed since; or only a bundle past the burst was held
            if _spare(view, bucket, limit, summary.at, wait.need) >= -1e-4:
                out.append(f"the tick said bucket {bucket} was short of {wait.need} tokens at "
                           f"{summary.at}, and its fullest shard could grant them")
        return out


def short_as_began(before: View, due: Iterable[Bundle], began: float) -> set[str]:
    """The ``due`` bundles that take tokens of a bucket that could not grant all of theirs
    as the tick began (at ``began``, its shards as ``before`` holds them; one take of their
    sum on its fullest shard, which is at least as hard as any order of their takes): the tick
    held some of them for their tokens, and in its order those after a held one wait too,
    whatever their jobs say as it ends (a bucket fills as a drain goes)."""
    limits = _limits(before)
    need: dict[tuple[str, str], float] = {}
    of: dict[tuple[str, str], set[str]] = {}
    for b in due:
        if not rate_limits.takes_tokens(b.bundle_id):
            continue
        # What its launch takes: the bundle's item says (its jobs' uses, added up)
        jobs = [before.job(j) for j in b.job_ids]
        uses = b.uses or rate_limits.needs([j.uses for j in jobs if j is not None])
        for key, n in uses.items():
            if key in limits:
                at = (rate_limits.resolve(key, b.tenant), key)
                need[at] = need.get(at, 0.0) + float(n)
                of.setdefault(at, set()).add(b.bundle_id)
    out: set[str] = set()
    for (bucket, key), n in need.items():
        if _spare(before, bucket, limits[key], began, n) < -1e-6:  # the take's slack: 1 us
            out |= of[(bucket, key)]
    return out


def _spare(view: View, bucket: str, limit: RateLimit, at: float, need: float) -> float:
    """Seconds to spare when ``bucket``'s fullest shard, as ``view`` holds it, grants
    ``need`` tokens at ``at`` (below 0: it cannot)."""
    items = [view.items.get(codec.bucket_key(bucket, s)) for s in range(limit.shards)]
    fullest = min((t.bucket_at if t is not None and t.bucket_at is not None else at)
                  for t in items)
    # GCRA: n tokens are there at t once max(tat, t) + n / rate_a_shard <= t + burst /
    # rate_a_shard (the shard's rate and burst: the limit's over its shards).
    per = limit.shards / limit.rate
    return at + (limit.burst / limit.shards) * per - need * per - max(fullest, at)


def _limits(view: View) -> dict[str, RateLimit]:
    rec = view.items.get(codec.LIMITS_KEY)
    data = rec.limits if rec is not None and isinstance(rec.limits, dict) else {}
    return {str(k): lim for k, v in data.items()
            if (lim := RateLimit.from_json(v)) is not None}
