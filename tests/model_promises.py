"""The promises the system model (tests/twins/test_system_model.py) holds each tick to, read
from the twins' state alone: work conservation (a free slot never idles beside due work it
could run, unless that work's ``waiting_for`` names what holds it) and ``waiting_for``'s word
(a job told that the next tick launches it is launched within two).

Each check returns the problems it finds as readable lines (empty: it holds).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dispatcher.domain import waiting as w
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.domain.tenant_shares import TenantPolicy
from dispatcher.domain.tenants import NONE
from dispatcher.domain.waiting import TenantShare, TickSummary, Waiting
from dispatcher.ops.job_waits import waiting_of
from dispatcher.store import codec as r
from tests import model_checks as checks
from tests import model_tokens

# What may hold due work beside a free slot, said truly: each names something other than the
# slots (a kind's limit, a backoff, a time, other jobs, a launch or a task on its way).
HELD_BY_OTHER = frozenset({w.KIND_LIMIT, w.SPOT_BACKOFF, w.LAUNCH_BACKOFF, w.SCHEDULED,
                           w.DEPENDENCIES, w.CHILDREN, w.RECORDING, w.LAUNCHING, w.STARTING,
                           w.FAIR_SHARE, w.RATE_LIMIT})
# Clean ticks within which a job told the next tick launches it must have launched.
PROMISE_TICKS = 2


def waits(view: checks.View, b: Bundle, now: float) -> Waiting | None:
    """What the first unfinished job of ``b`` says it waits for (``jobs show``'s rule)."""
    tick = view.items.get(r.TICK_KEY)
    summary = TickSummary.from_json(tick.summary) if tick is not None else None
    bundle = view.items.get(r.bundle_key(b.bundle_id))
    for job_id in b.job_ids:
        rec = view.items.get(r.job_key(job_id))
        if rec is not None and rec.state == JobState.PENDING and rec.bundle_id == b.bundle_id:
            return waiting_of(rec, bundle, summary, now)
    return None


def began_at(view: checks.View, now: float) -> float:
    """When the last tick began, after it: the lease says so (taken then; its release leaves
    ``updated_at`` as it was); ``now`` if it does not."""
    lease = view.items.get(r.LEASE_KEY)
    return float(lease.updated_at) if lease is not None and lease.updated_at is not None \
        else now


def idle_beside_work(view: checks.View, now: float, max_tasks: int,
                     due_before: Iterable[Bundle], room: list[Bundle]) -> list[str]:
    """After a tick that ran whole with no fault: with a slot free, every bundle that was due
    with room for it when the tick began (``due_before``) and still is (``room``: the due
    bundles with room after it) says truly what holds it other than the slots."""
    active = [b for b in view.bundles() if b.state in ACTIVE_BUNDLE_STATES]
    if len(active) >= max_tasks:
        return []
    still = {(b.bundle_id, b.attempt) for b in room}
    out = []
    for b in due_before:
        if (b.bundle_id, b.attempt) not in still:
            continue
        said = waits(view, b, now)
        if said is None or said.reason in HELD_BY_OTHER or (
                said.reason == w.RERUN_PENDING and said.until is not None):
            continue
        out.append(f"bundle {b.bundle_id} ({b.priority}, kind {b.kind}, {len(b.job_ids)} jobs) "
                   f"was due with room for it and a tick left it beside a free slot "
                   f"({len(active)} of {max_tasks} tasks run); it says {said.to_json()}")
    return out


def launches_next(said: Waiting | None) -> bool:
    """Whether ``said`` tells the job that the next tick launches it: a slot is free and
    nothing of its priority or higher is ahead of it."""
    return said is not None and said.until is None and said.reason in (w.PRIORITY,
                                                                        w.RERUN_PENDING) \
        and not said.ahead and (said.running is None or said.limit is None
                                or said.running < said.limit)


@dataclass
class Promises:
    """The bundles whose jobs were told the next tick launches them: for each, the clean
    ticks since, and whether any of them launched other work (which may take the slot first:
    work that came after the promise, or another priority's fair share of the slots,
    dispatcher.domain.fairness)."""

    told: dict[tuple[str, int], tuple[int, bool]] = field(default_factory=dict)

    def forget(self) -> None:
        """The world changed under the promises (settings, a deploy, a fault): they are void."""
        self.told.clear()

    def after_tick(self, view: checks.View, now: float,
                   launched: Mapping[str, int]) -> list[str]:
        """After a clean tick that launched ``launched`` bundles by priority: a promise
        PROMISE_TICKS clean ticks old whose bundle is still PENDING at its attempt, while
        those ticks launched nothing else, is broken; then the promises this tick's summary
        makes are noted."""
        out = []
        for key, (ticks, passed) in list(self.told.items()):
            b = view.bundle(key[0])
            if b is None or b.state != BundleState.PENDING or b.attempt != key[1]:
                del self.told[key]
                continue
            passed = passed or any(launched.values())
            self.told[key] = (ticks + 1, passed)
            if ticks + 1 >= PROMISE_TICKS and not passed:
                out.append(f"bundle {b.bundle_id}'s jobs were told the next tick launches it; "
                           f"{ticks + 1} ticks later it is still PENDING, and nothing else "
                           f"launched instead: {waits(view, b, now)}")
                del self.told[key]
        for b in view.bundles():
            if b.state == BundleState.PENDING and (b.bundle_id, b.attempt) not in self.told \
                    and launches_next(waits(view, b, now)):
                self.told[(b.bundle_id, b.attempt)] = (0, False)
        return out


def share_order(view: checks.View, now: float, launched: Iterable[Bundle],
                due_before: Iterable[Bundle], before: checks.View) -> list[str]:
    """After a tick that ran whole with no fault: no tenant had a bundle launched past its
    share (its tasks above the target the tick's summary ends with) while another tenant
    below its own was left work of that priority that was due with room as the tick began
    (``due_before``) and that only the slots held (``waiting_for`` names the slots: priority,
    capacity, a follow-on's turn). The priorities share the free slots first (each level
    with work gets some, by weight: dispatcher.domain.fairness), then within each level the
    tick launches for the tenants furthest below their targets first, counting what the levels
    above launched: a level's launches are judged with the tenant's tasks less those the
    levels below it launched. A relaunch is no such
    choice, nor is the queue's order (a drain shares its slots among the tenants it has seen
    so far: those past their share give slots up at their bundles' ends): the bundles the
    drain made and launched are no choice among the due work, nor do they count against the
    tenant's share when its due work's launches are judged (they came after them). The summary's
    targets are those the tick ends with: a tick whose drain met a tenant with no bundle as
    it began (``before``) chose by other targets, and is not judged; nor is a tenant's launch
    past a target the drain's launches of the others' work lowered (the queue says how many
    jobs wait, not whose: each such launch is one task more of a tenant whose work the due
    work's order did not see, and moves one slot at most of the targets to it). Nor is work
    that takes a rate limit's tokens whose bucket could not grant all of its due work's as the
    tick began (tests/model_tokens.py): the tick held some for their tokens as it chose (and
    counted none of them towards their tenants' targets), and a slow drain gives the bucket
    the time to fill, so that by the tick's end only the slots hold it."""
    due_before = list(due_before)
    tick = view.items.get(r.TICK_KEY)
    summary = TickSummary.from_json(tick.summary) if tick is not None else None
    if summary is None or len(summary.tenants) < 2:
        return []
    known = {b.tenant or "(none)" for b in before.bundles()
             if b.state in ACTIVE_BUNDLE_STATES or b.state == BundleState.PENDING}
    if any(t not in known for t in summary.tenants):
        return []
    rank = w.PRIORITY_RANK
    # Each tenant's launches by priority level: a level's launches took it past its share if
    # its tasks, less what the levels below launched for it, are past it (the levels above
    # launched first, and count).
    levels: dict[str, Counter[int]] = {}
    relaunched: dict[str, Counter[int]] = {}  # judged not, but launched by its level all
    # the same: what a level below relaunched is no launch of the levels above it
    drained: Counter[str] = Counter()  # the drain's launches of bundles it made, by tenant
    existed = {b.bundle_id for b in before.bundles()}
    for b in launched:
        if b.attempt > 1:  # a relaunch (a rerun keeps its slot), not a choice among tenants
            relaunched.setdefault(b.tenant or "(none)", Counter())[
                rank.get(str(b.priority), 1)] += 1
            continue
        if b.bundle_id not in existed:
            drained[b.tenant or "(none)"] += 1
            continue
        levels.setdefault(b.tenant or "(none)", Counter())[rank.get(str(b.priority), 1)] += 1
    over: dict[str, set[int]] = {}  # tenant: the levels it was launched past its share at
    for t, counts in levels.items():
        share = summary.tenants.get(t)
        if share is None:
            continue
        # Slots the others' drained launches may have taken of its target since the order
        others = sum(n for u, n in drained.items() if u != t)
        again = relaunched.get(t, Counter())
        for level in counts:
            lower = sum(n for other, n in (counts + again).items() if other > level)
            if share.tasks - lower - drained[t] > share.target + others:
                over.setdefault(t, set()).add(level)
    if not over:
        return []
    out = []
    tokens_held = model_tokens.short_as_began(before, due_before, began_at(view, now))
    was_due = {(b.bundle_id, b.attempt) for b in due_before}
    for b in view.bundles():
        if b.state != BundleState.PENDING or (b.bundle_id, b.attempt) not in was_due \
                or b.bundle_id in tokens_held:
            continue
        t = b.tenant or "(none)"
        share = summary.tenants.get(t)
        if share is None or share.tasks >= share.target or t in over:
            continue
        said = waits(view, b, now)
        if said is None or said.reason not in (w.PRIORITY, w.CAPACITY, w.FOLLOW_ON):
            continue
        for x, levels in over.items():
            if rank.get(str(b.priority), 1) in levels:
                out.append(f"tenant {x} was launched past its share ({summary.tenants[x]}) "
                           f"while tenant {t} ({share}) below its own was left bundle "
                           f"{b.bundle_id} ({b.priority}), waiting for {said.reason}")
    return out


# Slot-held reasons: what a tenant's due work says while only the slots hold it.
SLOT_HELD = frozenset({w.PRIORITY, w.CAPACITY, w.FOLLOW_ON})


@dataclass
class Owed:
    """A tenant below its target with due work only the slots hold, since a clean tick: the
    highest priority (rank) of that work, the turns since (spans between clean ticks in which
    a task of a tenant past its target, of that priority or lower, ended a bundle), and the
    tasks it had then."""

    rank: int
    tasks: int
    turns: int = 0


@dataclass
class TenantTurns:
    """Liveness of the tenants' shares: a tenant with work and a weight above 0 never starves.

    After a clean tick, a tenant whose tasks are below its target (a reserve, its slot for
    having work, its weight's share) while it has due work that only the slots hold is owed a
    slot. The slots free as tasks of tenants past their targets end their bundles: the tick
    asked them to give up slots (``shed``), and the first to end does, then the next tick
    launches the owed work. Each span between clean ticks with such an end (of that priority or
    lower: priorities come first) is a turn; each turn gives a tenant below its target a slot,
    and the deficits add up to the slots at most. So a tenant owed over more turns than there
    are slots (plus one, for a drain's launch between) with no task started for it starves.
    Faults, deploys and changed settings void the count (:meth:`forget`)."""

    owed: dict[str, Owed] = field(default_factory=dict)
    # After the last clean tick: its active bundles (id, attempt): (tenant, rank, task), and the
    # tenants past their targets then.
    active: dict[tuple[str, int], tuple[str, int, str | None]] = field(default_factory=dict)
    over: set[str] = field(default_factory=set)

    def forget(self) -> None:
        self.owed.clear()
        self.active.clear()
        self.over.clear()

    def after_tick(self, before: checks.View, view: checks.View, now: float,
                   max_tasks: int) -> list[str]:
        """``before``: the world as this clean tick began; ``view``: as it ended."""
        tick = view.items.get(r.TICK_KEY)
        summary = TickSummary.from_json(tick.summary) if tick is not None else None
        rank = w.PRIORITY_RANK
        was_active = {(b.bundle_id, b.attempt) for b in before.bundles()
                      if b.state in ACTIVE_BUNDLE_STATES}
        ended = []  # (tenant, rank) of the bundles ended since the last clean tick, not rerun
        for key, (tenant, level, _) in self.active.items():
            b = view.bundle(key[0])
            if key not in was_active and tenant in self.over and b is not None \
                    and b.state not in ACTIVE_BUNDLE_STATES and b.state != BundleState.PENDING:
                ended.append((tenant, level))
        tasks_then = {task for _, _, task in self.active.values()}
        active = [b for b in view.bundles() if b.state in ACTIVE_BUNDLE_STATES]
        self.active = {(b.bundle_id, b.attempt): (b.tenant or NONE,
                                                  rank.get(str(b.priority), 1), b.task_arn)
                       for b in active}
        started = {b.tenant or NONE for b in active if b.task_arn not in tasks_then}
        if summary is None:
            self.forget()
            return []
        self.over = {t for t, s in summary.tenants.items() if s.tasks > s.target}
        below = {t for t, s in summary.tenants.items() if s.tasks < s.target}
        due: dict[str, list[Bundle]] = {}  # the below tenants' due work, highest first
        for b in view.bundles():
            if (b.tenant or NONE) in below and b.state == BundleState.PENDING \
                    and b.next_attempt_at <= now:
                due.setdefault(b.tenant or NONE, []).append(b)
        out = []
        for t, share in summary.tenants.items():
            # Its highest priority with work only the slots hold (one look a tenant, mostly).
            level = next((rank.get(str(b.priority), 1) for b in sorted(
                due.get(t, []), key=lambda b: rank.get(str(b.priority), 1))
                if (said := waits(view, b, now)) is not None and said.reason in SLOT_HELD),
                None)
            if share.tasks >= share.target or level is None:
                self.owed.pop(t, None)
                continue
            owed = self.owed.get(t)
            if owed is None or t in started or owed.rank != level:
                self.owed[t] = Owed(level, share.tasks)
                continue
            if any(x != t and x_rank >= level for x, x_rank in ended):
                owed.turns += 1
            if owed.turns > max_tasks + 1:
                out.append(f"tenant {t} ({share}) was below its target with due work only "
                           f"the slots held for {owed.turns} turns of other tenants' tasks "
                           f"past their targets ending bundles, and got no task")
                del self.owed[t]
        for t in list(self.owed):
            if t not in summary.tenants:
                del self.owed[t]
        return out


def reserves_kept(before: checks.View, view: checks.View, now: float,
                  max_tasks: int) -> list[str]:
    """After a clean tick: a tenant below its reserve with due work that only the slots hold
    (due as the tick began: what it records as it goes counts from the next) is given a target
    of its reserve (or of its tasks and that work, if fewer), while the reserves add up to the
    slots at most (more, and they share the slots by weight)."""
    tick = view.items.get(r.TICK_KEY)
    summary = TickSummary.from_json(tick.summary) if tick is not None else None
    rec = view.items.get(r.TENANT_POLICIES_KEY)
    if summary is None or rec is None or not isinstance(rec.tenants, dict):
        return []
    policies = {t: TenantPolicy.from_json(p) for t, p in rec.tenants.items()}
    if sum(p.reserve for p in policies.values()) > max_tasks:
        return []
    # Due as the tick began, not by ``now``: a slow drain moves the clock, and work that came
    # due during it was not due when the tick looked at the due work.
    began = began_at(view, now)
    was_due = {b.bundle_id for b in before.bundles()
               if b.state == BundleState.PENDING and b.next_attempt_at <= began}
    out = []
    for t, p in sorted(policies.items()):
        # A tenant the summary leaves out has no task, no target and no cap.
        share = summary.tenants.get(t, TenantShare(0, 0))
        if share.tasks >= p.reserve:
            continue
        held = [b.bundle_id for b in view.bundles()
                if (b.tenant or NONE) == t and b.state == BundleState.PENDING
                and b.bundle_id in was_due
                and (said := waits(view, b, now)) is not None and said.reason in SLOT_HELD]
        need = min(p.reserve, share.tasks + len(held))
        if share.target < need:
            out.append(f"tenant {t} (reserve {p.reserve}, {share}) has due work {held[:3]} "
                       f"only the slots hold, and a target below the {need} its reserve "
                       "keeps for it")
    return out
