"""One tick's shares of the task slots between tenants (dispatcher.domain.tenant_shares).

The tick (dispatcher/stages/tick.py) counts each tenant's tasks (its active bundles), reads the
tenants' policies and usage (one read, made only when a tenant is in view: an untenanted stack
pays nothing), and, when two tenants or more are in view or one has a policy, looks at what the
running tenants have left (:meth:`TenantSlots.look`: their batches' cursors and next follow-ons,
two reads however many tenants wait). From that it sets each tenant's target
(:func:`~dispatcher.domain.tenant_shares.targets`). Then:

- every launch path of the tick keeps each tenant within its cap (:meth:`TenantSlots.admit`,
  and the drain's ``tenant_room``), and gives the free slots to the tenants furthest below
  their targets first, the lowest usage / weight among equals (:meth:`TenantSlots.order`);
- a tenant whose tasks run past its target while others wait below theirs (or past its cap,
  lowered since they launched) is asked, in the tick's summary, to give up that many slots
  (:meth:`TenantSlots.sheds`): its runners end at their next bundle's end instead of taking a
  follow-on (dispatcher.store.follow_ons), and the next tick launches the others' work there;
- the usage is counted on: each tenant's vCPUs running, times the time since the last count,
  decayed with the half-life (:meth:`TenantSlots.usage_now`).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import groupby

from dispatcher.domain import tenant_shares, tenants
from dispatcher.domain.bundles import Bundle, BundleState, follow_on_batch, follow_on_id
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.domain.tenant_shares import TenantLoad, TenantPolicy
from dispatcher.domain.waiting import TenantShare
from dispatcher.store import StageStore

# Follow-ons of a running batch looked at by the tick (one BatchGetItem holds 100 keys).
LOOK_KEYS = 100
# Tenants a tick's summary shows at most (every runner reads it at each take).
VIEW_MOST = 500
# Usage is counted over at most this long between two ticks (ticks that stopped for a while
# do not charge the tasks of now for it).
MAX_COUNTED_SECONDS = 600.0


@dataclass(frozen=True)
class TenantLimits:
    """What a drain keeps to of the tenants' shares (dispatcher/stages/tenant_slots.py):
    ``caps``, tasks each capped tenant may still start (None for the jobs of none); and their
    ``weights`` (1 unless set), by which a backlog of several tenants' small jobs cut into
    follow-ons shares the free slots it launches into."""

    caps: dict[str | None, int] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)


# The limits, or how to read them when a job of a tenant first comes.
TenantRoom = TenantLimits | Callable[[], TenantLimits] | None


def past_share(opened: Mapping[str | None, int], seen: Collection[str | None], capacity: int,
               tenant: str | None, limits: TenantLimits) -> bool:
    """Whether ``tenant`` has ``opened`` its weight's share of a drain's ``capacity`` free
    slots, among the tenants whose jobs it has ``seen`` (two or more)."""
    if len(seen) < 2:
        return False
    weights = {t: limits.weights.get(t or tenants.NONE, 1.0) for t in seen}
    total = sum(weights.values())
    if total <= 0:
        return False
    return opened.get(tenant, 0) >= math.ceil(capacity * weights[tenant] / total)


def batch_of(bundle_id: str) -> str | None:
    """The batch a bundle's id names (a follow-on's, or a first wave's), if any: the part
    after its tenant (whose name may hold a ``-``) must hold one."""
    rest = bundle_id.rpartition(tenants.MARK)[2]
    return follow_on_batch(bundle_id) if "-" in rest else None


def key(tenant: str | None) -> str:
    """The name a tenant is counted under (the jobs of none as one more)."""
    return tenant or tenants.NONE


class TenantSlots:
    """The tenants' shares for one tick: ``slots`` (the running tasks' limit), the policies
    and usage read, and each tenant's tasks (running, then launched as the tick goes)."""

    def __init__(self, slots: int, policies: Mapping[str, TenantPolicy],
                 usage: Mapping[str, float], running: Iterable[Bundle]) -> None:
        self.slots = slots
        self.policies = dict(policies)
        self.usage = dict(usage)
        self.counts: Counter[str] = Counter(key(b.tenant) for b in running)
        self.goal: dict[str, int] = {}
        self.more: set[str] = set()
        self.found: list[Bundle] = []
        self.seen: set[str] = set()  # tenants with due work in view
        self.held: dict[str, Bundle] = {}  # due work its tenant's cap holds back

    @property
    def shared(self) -> bool:
        """Whether there is anything to share: two tenants or more in view, or one with a
        policy of its own."""
        view = set(self.counts) | self.seen | self.more | {key(b.tenant) for b in self.found}
        return len(view) > 1 or any(t in self.policies for t in view)

    def policy(self, tenant: str) -> TenantPolicy:
        return self.policies.get(tenant, tenant_shares.DEFAULT)

    def look(self, store: StageStore, active: Iterable[Bundle], now: float) -> None:
        """What the running tenants have left: their batches' cursors (one read), then the
        next follow-ons past each (one read): those still PENDING are work the tick can
        launch for their tenant (:attr:`found`), and a tenant with a full look has more
        (:attr:`more`). At most :data:`LOOK_KEYS` batches, taken a tenant at a time in turn
        (the fewest tasks first), so no tenant's many batches crowd out another's."""
        by_tenant: dict[str, list[str]] = {}
        for b in active:
            batch = batch_of(b.bundle_id)
            if batch is not None and batch not in by_tenant.setdefault(key(b.tenant), []):
                by_tenant[key(b.tenant)].append(batch)
        turns = sorted(by_tenant, key=lambda t: (self.counts[t], t))
        batches: list[str] = []
        while len(batches) < LOOK_KEYS and any(by_tenant.values()):
            for t in turns:
                if by_tenant[t] and len(batches) < LOOK_KEYS:
                    batches.append(by_tenant[t].pop(0))
        if not batches:
            return
        cursors = store.batch_cursors(batches)
        per = max(1, LOOK_KEYS // max(1, len(cursors)))
        ids: list[str] = []
        for batch, (first, last) in cursors.items():
            end = first + per if last is None else min(first + per, last)
            ids += [follow_on_id(batch, n) for n in range(first, end)]
        self.found = [b for b in store.bundles_of(ids[:LOOK_KEYS])
                      if b.state == BundleState.PENDING and b.next_attempt_at <= now]
        by = Counter(key(b.tenant) for b in self.found)
        self.more = {t for t, n in by.items() if n >= per}

    def plan(self, waiting: Iterable[Bundle]) -> None:
        """Each tenant's target, from its tasks, the bundles waiting that the tick saw (and
        those :meth:`look` found), and whether it has more."""
        seen = {b.bundle_id: b for b in [*waiting, *self.found, *self.held.values()]}
        by = Counter(key(b.tenant) for b in seen.values())
        loads = {t: TenantLoad(running=self.counts[t], waiting=by[t], more=t in self.more,
                               usage=self.usage.get(t, 0.0))
                 for t in {*self.counts, *by, *self.more}}
        self.goal = tenant_shares.targets(self.slots, loads, self.policies)

    def room(self, tenant: str | None) -> int | None:
        """Tasks ``tenant`` may still start (None: no cap)."""
        cap = self.policy(key(tenant)).max_running
        return None if cap is None else max(0, cap - self.counts[key(tenant)])

    def caps_left(self) -> TenantLimits:
        """Each capped tenant's room, and the weights, for the drain."""
        out: dict[str | None, int] = {}
        for t, p in self.policies.items():
            if p.max_running is not None:
                out[t] = max(0, p.max_running - self.counts[t])
        return TenantLimits(out, {t: p.weight for t, p in self.policies.items()})

    def given_none(self) -> set[str | None]:
        """The tenants (as their bundles name them) whose policies give them no slot of their
        own: a weight of 0 and no reserve (only the slots no one else has work for), or at
        their caps."""
        return {None if t == tenants.NONE else t for t, p in self.policies.items()
                if (p.weight <= 0 and p.reserve <= 0) or self.room(t) == 0}

    def short_of_reserve(self) -> set[str | None]:
        """The tenants (as their bundles name them) with fewer tasks than their reserves: a
        look at the due work with no slot free pages on until it holds theirs, or ends."""
        return {None if t == tenants.NONE else t for t, p in self.policies.items()
                if p.reserve > self.counts[t]}

    def took(self, bundles: Iterable[Bundle]) -> None:
        """``bundles`` launched: their tenants' tasks."""
        self.counts.update(key(b.tenant) for b in bundles)

    def within_caps(self, bundles: list[Bundle], by_level: bool = False) -> list[Bundle]:
        """``bundles``, in their order, that their tenants' caps let start (the others are
        kept in :attr:`held`: their tenants are in view, held by their caps). ``by_level``:
        each priority's as if the levels above launched none of its tenant's: which of them
        launch is known only once the priorities' slots are (:meth:`order` counts those)."""
        left: dict[tuple[str, Priority | None], int | None] = {}
        out = []
        for b in bundles:
            at = (key(b.tenant), b.priority if by_level else None)
            n = left.setdefault(at, self.room(b.tenant))
            if n is None or n > 0:
                out.append(b)
                if n is not None:
                    left[at] = n - 1
            else:
                self.held[b.bundle_id] = b
        return out

    def admit(self, bundles: list[Bundle], by_level: bool = False) -> list[Bundle]:
        """``bundles`` (in the tick's order) that their tenants' caps let start, reordered
        within each priority so that the tenants furthest below their targets go first
        (:meth:`order`). ``by_level``: see :meth:`within_caps`."""
        return self.order(self.within_caps(bundles, by_level))

    def order(self, bundles: list[Bundle],
              level_slots: Mapping[Priority, int] | None = None) -> list[Bundle]:
        """Higher priority first (a stable sort); within a priority, one bundle at a time of
        the tenant furthest below its target (counting those before it in the order that
        launch), the lowest usage / weight among equals; each tenant's own bundles in their
        order. ``level_slots``: the slots the priorities' sharing gave each level
        (dispatcher.domain.fairness), so that only a level's first that many count against
        their tenants below it, and against their caps: a tenant whose cap those take has
        the rest of its bundles left out; None: the caller launches from the front, as many
        as it has slots for (every one before counts), its ``bundles`` within the caps."""
        if not self.goal:
            return bundles
        out: list[Bundle] = []
        launched: Counter[str] = Counter()  # of the levels above, those that launch
        ranked = sorted(bundles, key=lambda b: PRIORITY_ORDER.index(b.priority))
        for priority, level in groupby(ranked, key=lambda b: b.priority):
            picked = Counter(launched)
            queues: dict[str, list[Bundle]] = {}
            for b in level:
                queues.setdefault(key(b.tenant), []).append(b)
            heap = [(self._behind(t, picked), t) for t in queues]
            heapq.heapify(heap)
            ordered: list[Bundle] = []
            while heap:
                _, t = heapq.heappop(heap)
                if level_slots is not None and (room := self.room(t)) is not None \
                        and picked[t] >= room:
                    continue  # its cap taken by what launches before it
                ordered.append(queues[t].pop(0))
                picked[t] += 1
                if queues[t]:
                    heapq.heappush(heap, (self._behind(t, picked), t))
            take = len(ordered) if level_slots is None else level_slots.get(priority, 0)
            launched.update(key(b.tenant) for b in ordered[:take])
            out += ordered
        return out

    def _behind(self, t: str, picked: Counter[str]) -> tuple[int, float]:
        return (self.counts[t] + picked[t] - self.goal.get(t, 0),
                tenant_shares.rank(self.usage.get(t, 0.0), self.policy(t)))

    def wants(self, tenant: str | None) -> bool:
        """Whether the tick would launch ``tenant``'s work into a slot that frees: its cap
        has room and it is below its target."""
        t = key(tenant)
        return self.room(tenant) != 0 and self.goal.get(t, 0) > self.counts[t]

    def sheds(self, waiting: Iterable[Bundle], launched: Collection[str],
              follow_tenants: Iterable[str], free: int = 0
              ) -> tuple[dict[str, int], str | None]:
        """As the tick ends: the targets again, with what it launched (``launched``, their
        ids; ``waiting``: the due bundles it left; ``follow_tenants``: tenants its drain cut
        follow-ons or footholds for, which have more), how many tasks each tenant should give
        up at its next bundle's end for those below their targets (less the ``free`` slots
        the tick left, which they get first), and the highest priority of the work those
        wait with (None: none waits). A task gives up its slot only for work of its own
        priority or higher: the tick launches by priority first."""
        self.more |= set(follow_tenants)
        waiting = list(waiting)
        self.found = [b for b in self.found if b.bundle_id not in launched]
        self.plan(waiting)
        below = {t for t, n in self.goal.items() if n > self.counts[t]}
        if not below:
            return {}, None
        ranks = [PRIORITY_ORDER.index(b.priority) for b in [*waiting, *self.found]
                 if key(b.tenant) in below]
        # A tenant below its target with only the drain's word for its work: normal
        rank = min(ranks) if ranks else PRIORITY_ORDER.index(Priority.NORMAL)
        wanting = sum(self.goal[t] - self.counts[t] for t in below) - max(0, free)
        return (tenant_shares.sheds(self.counts, self.goal, self.policies, wanting),
                str(PRIORITY_ORDER[rank]))

    def view(self) -> dict[str, TenantShare]:
        """For the summary, at most :data:`VIEW_MOST` tenants, the most tasks first: those
        running, with a target, or at their caps (a job of one held by its cap says so,
        ``fair_share``, even with nothing of it running and none of its work in this tick's
        view: a paused tenant's follow-ons need not be among the due work read)."""
        at_cap = [t for t, p in self.policies.items()
                  if p.max_running is not None and self.counts[t] >= p.max_running]
        names = [t for t in {*self.counts, *self.goal, *at_cap}
                 if self.counts[t] or self.goal.get(t) or self.policy(t).max_running is not None]
        names.sort(key=lambda t: (-self.counts[t], -self.goal.get(t, 0), t))
        return {t: TenantShare(self.counts[t], self.goal.get(t, 0), self.policy(t).weight,
                               self.policy(t).max_running) for t in sorted(names[:VIEW_MOST])}

    def usage_now(self, active: Iterable[Bundle], since: float | None, now: float,
                  half_life: float) -> dict[str, float]:
        """Each tenant's usage as of ``now``: as counted at ``since``, decayed, plus the
        vCPUs of its ``active`` bundles over the time between (at most
        :data:`MAX_COUNTED_SECONDS`)."""
        dt = 0.0 if since is None else min(MAX_COUNTED_SECONDS, max(0.0, now - since))
        out = {t: tenant_shares.decayed(u, now if since is None else since, now, half_life)
               for t, u in self.usage.items()}
        for b in active:
            t = key(b.tenant)
            # A task of the task definition's own size counts as 1 vCPU (the tick does not
            # read the definition): the usages are compared, not billed.
            vcpu = b.resources.cpu / 1024 if b.resources.cpu else 1.0
            out[t] = out.get(t, 0.0) + vcpu * dt
        return out
