"""Tenants' shares of the task slots: weights, caps, reserves and usage (pure rules).

Each tenant (:mod:`dispatcher.domain.tenants`; the jobs of no tenant count as one more,
:data:`~dispatcher.domain.tenants.NONE`) has a :class:`TenantPolicy`: a ``weight`` (a higher
number gets more; 1 unless set; 0 runs only on slots no one else wants), an optional
``max_running`` cap on its tasks, and a ``reserve``: slots it gets first whenever it has the work
for them. The tick (:mod:`dispatcher.stages.tenant_slots`) turns what it sees of each tenant
(:class:`TenantLoad`: tasks running, bundles waiting, whether more follows) into a target per
tenant (:func:`targets`): reserves first, then a slot for each tenant with work, then the slots
filled by weight, D'Hondt's way (the next slot to the tenant with the highest weight / (slots so
far + 1)), no tenant past its cap or its demand. So every slot is targeted while any tenant has
work for it (work-conserving), and a tenant with work and a weight above 0 gets at least one slot
whenever the slots the reserves leave are at least the tenants with work.

``usage`` is a tenant's vCPU-seconds (tasks running and finished), decayed with a half-life
(:func:`decayed`), as AWS Batch's fair share counts it
(https://docs.aws.amazon.com/batch/latest/userguide/fair-share-scheduling.html): among tenants
equally far from their targets, and for a slot no target claims, the lowest usage / weight goes
first (:func:`rank`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A weight's bounds: 0 (only slots no one else wants) to this.
MAX_WEIGHT = 1000.0
# Tenants with a policy of their own (the others have the default). Their policies share one
# item (read once a tick): well under DynamoDB's 400 KB at ~100 bytes each.
MAX_CONFIGURED = 2000


@dataclass(frozen=True)
class TenantPolicy:
    """A tenant's share: ``weight``; ``max_running`` tasks at most (None: no cap); ``reserve``:
    slots it gets before any weight is counted, while it has work for them."""

    weight: float = 1.0
    max_running: int | None = None
    reserve: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"weight": self.weight, "max_running": self.max_running,
                "reserve": self.reserve}

    @staticmethod
    def from_json(data: Any) -> TenantPolicy:
        if not isinstance(data, dict):
            return DEFAULT
        cap = data.get("max_running")
        return TenantPolicy(weight=float(data.get("weight", 1.0)),
                            max_running=None if cap is None else int(cap),
                            reserve=int(data.get("reserve") or 0))


DEFAULT = TenantPolicy()


def policy_problem(weight: float | None, max_running: int | None,
                   reserve: int | None) -> str | None:
    """Why these settings are refused, or None."""
    if weight is not None and not (0 <= weight <= MAX_WEIGHT and math.isfinite(weight)):
        return f"weight {weight} must be between 0 and {MAX_WEIGHT:g}"
    if max_running is not None and max_running < 0:
        return f"max_running {max_running} must be 0 or more"
    if reserve is not None and reserve < 0:
        return f"reserve {reserve} must be 0 or more"
    if reserve and max_running is not None and reserve > max_running:
        return f"reserve {reserve} is more than max_running {max_running}"
    return None


@dataclass(frozen=True)
class TenantLoad:
    """What a tick saw of one tenant: its tasks ``running``; bundles ``waiting`` that a slot
    could launch now (those it read); ``more``: work beyond those (its batches have follow-ons
    left), so it could use any number of slots; ``usage``: its decayed vCPU-seconds."""

    running: int = 0
    waiting: int = 0
    more: bool = False
    usage: float = 0.0


def demand(load: TenantLoad, policy: TenantPolicy, slots: int) -> int:
    """The slots ``load`` could fill, within its cap."""
    want = slots if load.more else load.running + load.waiting
    return max(0, min(want, slots) if policy.max_running is None
               else min(want, slots, policy.max_running))


def rank(usage: float, policy: TenantPolicy) -> float:
    """Who goes first among equals: the lowest usage per weight (a weight of 0, last)."""
    return usage / policy.weight if policy.weight > 0 else math.inf


def targets(slots: int, loads: Mapping[str, TenantLoad],
            policies: Mapping[str, TenantPolicy]) -> dict[str, int]:
    """Each tenant's slots of ``slots``: reserves first (by weight when they add up to more
    than the slots), then one for each tenant with work and a weight above 0 (the lowest usage
    / weight first), then the rest by weight, D'Hondt's way, up to each tenant's demand; then
    the slots left to tenants of weight 0, evenly. The targets add up to
    ``min(slots, the demands' sum)``."""
    def policy(t: str) -> TenantPolicy:
        return policies.get(t, DEFAULT)

    wants = {t: demand(load, policy(t), slots) for t, load in loads.items()}
    got = dict.fromkeys(loads, 0)
    left = _fill(slots, got, {t: min(policy(t).reserve, w) for t, w in wants.items()},
                 loads, policy)
    # One slot for every tenant with work and a weight (no tenant shut out: the fewest used
    # first when the slots are fewer), then the rest by weight.
    eager = {t: w for t, w in wants.items() if policy(t).weight > 0}
    left = _fill(left, got, {t: max(got[t], min(1, w)) for t, w in eager.items()}, loads,
                 policy, even=True)
    left = _fill(left, got, eager, loads, policy)
    _fill(left, got, wants, loads, policy, even=True)
    return got


def _fill(slots: int, got: dict[str, int], upto: Mapping[str, int],
          loads: Mapping[str, TenantLoad], policy: Any, even: bool = False) -> int:
    """Give ``slots`` one at a time to the tenant of the highest weight / (slots + 1) (or the
    fewest slots, ``even``) below its ``upto``; ties to the lowest usage / weight, then the
    name. The slots left."""
    def key(t: str) -> tuple[float, float, str]:
        p = policy(t)
        share = got[t] + 1.0 if even else (got[t] + 1.0) / p.weight if p.weight > 0 \
            else math.inf
        return share, rank(loads[t].usage, p), t

    heap = [key(t) for t, n in upto.items() if got[t] < n]
    heapq.heapify(heap)
    while slots > 0 and heap:
        _, _, t = heapq.heappop(heap)
        got[t] += 1
        slots -= 1
        if got[t] < upto[t]:
            heapq.heappush(heap, key(t))
    return slots


def decayed(usage: float, since: float, now: float, half_life: float) -> float:
    """``usage`` counted at ``since``, as of ``now``."""
    if half_life <= 0 or now <= since:
        return usage
    return usage * math.pow(0.5, (now - since) / half_life)


def sheds(counts: Mapping[str, int], goal: Mapping[str, int],
          policies: Mapping[str, TenantPolicy], wanting: int) -> dict[str, int]:
    """Tasks each tenant should give up at its next bundle's end: what runs past its cap,
    and, while tenants below their targets want ``wanting`` slots more, what runs past its
    target (the most over first)."""
    out: dict[str, int] = {}
    for t, n in counts.items():
        cap = policies.get(t, DEFAULT).max_running
        if cap is not None and n > cap:
            out[t] = n - cap
    wanting -= sum(out.values())  # those slots free for them too
    # One at a time from the tenant furthest past its target.
    heap = [(-(counts[t] - out.get(t, 0) - goal.get(t, 0)), t) for t in counts]
    heapq.heapify(heap)
    while wanting > 0 and heap and heap[0][0] < 0:
        excess, t = heapq.heappop(heap)
        out[t] = out.get(t, 0) + 1
        wanting -= 1
        heapq.heappush(heap, (excess + 1, t))
    return out
