"""Why a job is not running: the rule that names what a PENDING job waits for.

Bundles are what wait (a bundle is the unit of launch), so the facts are the job's own (state,
``not_before``, attempts, reason), its bundle's (state, next attempt, launch failures, task) and
the last tick's summary (:class:`TickSummary`: running tasks against the maximum, each limited
kind's running jobs against its limit, the due bundles it left waiting by priority). The tick
writes that summary once per tick; nothing is written per job or per bundle for it: a job's
:class:`Waiting` is computed when it is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain import tenants
from dispatcher.domain.jobs import PRIORITY_ORDER
from dispatcher.domain.lifecycle import DEPENDENTS_HELD_AT

# The reasons, as ``waiting_for.reason`` says them (``jobs list --waiting-for REASON``).
SCHEDULED = "scheduled"  # until its not_before (or its bundle's due time)
KIND_LIMIT = "kind_limit"  # its kind runs as many jobs as its limit lets
CAPACITY = "capacity"  # every task slot is taken
SPOT_BACKOFF = "spot_backoff"  # Fargate had no capacity: a relaunch after a backoff
LAUNCH_BACKOFF = "launch_backoff"  # RunTask refused otherwise: a relaunch after a backoff
PRIORITY = "priority"  # free slots went to bundles ahead of its own
LAUNCHING = "launching"  # its bundle's launch is in flight
STARTING = "starting"  # its bundle has a task that has not claimed it yet
RERUN_PENDING = "rerun_pending"  # a rerun, waiting for its backoff or an earlier run to end
RECORDING = "recording"  # its bundle is still being written
CHILDREN = "children"  # an array job's parent: for its children to be recorded and run
DEPENDENCIES = "dependencies"  # for the jobs it depends on to end (detail: which)
# A follow-on of a large batch no task has run yet: the batch's running tasks take them in
# turn, and a slot that other due work leaves free gets the oldest (dispatcher.store.follow_ons).
FOLLOW_ON = "follow_on"
# Its tenant runs as many tasks as its cap lets, or its share of the slots while every slot is
# taken: a slot that frees goes to a tenant below its share first
# (dispatcher.domain.tenant_shares).
FAIR_SHARE = "fair_share"
# Its jobs take a rate limit's tokens and the last tick found too few (``key``, the bucket;
# ``until``: when they come; dispatcher.domain.rate_limits).
RATE_LIMIT = "rate_limit"
REASONS = (SCHEDULED, KIND_LIMIT, CAPACITY, SPOT_BACKOFF, LAUNCH_BACKOFF, PRIORITY, LAUNCHING,
           STARTING, RERUN_PENDING, RECORDING, CHILDREN, DEPENDENCIES, FOLLOW_ON, FAIR_SHARE,
           RATE_LIMIT)

# How RunTask's failures[] reason starts when Fargate (Spot or on-demand) has no capacity.
# https://repost.aws/knowledge-center/ecs-fargate-runtask-capacity
NO_CAPACITY = "Capacity is unavailable"
PRIORITY_RANK = {str(p): n for n, p in enumerate(PRIORITY_ORDER)}


@dataclass(frozen=True)
class TenantShare:
    """A tenant as a tick left it: its ``tasks`` (running and launched), its ``target``
    (dispatcher.domain.tenant_shares.targets), its ``weight`` and cap."""

    tasks: int
    target: int
    weight: float = 1.0
    max_running: int | None = None

    def to_json(self) -> list[Any]:
        return [self.tasks, self.target, self.weight, self.max_running]

    @staticmethod
    def from_json(data: Any) -> TenantShare:
        v = list(data) if isinstance(data, list) else []
        v += [0, 0, 1.0, None][len(v):]
        return TenantShare(int(v[0]), int(v[1]), float(v[2]),
                           None if v[3] is None else int(v[3]))


@dataclass(frozen=True)
class RateWait:
    """A bucket a tick held bundles back for: the first of them (in the tick's order) takes
    ``need`` tokens, which come at ``at`` (None: never, more than a shard's ``burst``); its
    later ones wait behind it (a tick launches a bucket's bundles in order). ``declared``: the
    limit's key as jobs declare it (``{tenant}`` and all)."""

    at: float | None
    need: int
    burst: float  # a shard's: the most one take can have
    declared: str
    shards: int = 1

    def to_json(self) -> list[Any]:
        return [self.at, self.need, self.burst, self.declared, self.shards]

    @staticmethod
    def from_json(data: Any) -> RateWait:
        v = list(data) if isinstance(data, list) else []
        v += [None, 0, 0.0, "", 1][len(v):]
        return RateWait(None if v[0] is None else float(v[0]), int(v[1]), float(v[2]),
                        str(v[3]), int(v[4]))


@dataclass(frozen=True)
class TickSummary:
    """What the last tick saw of the slots: ``active`` tasks of ``max_running``; ``kinds``:
    each limited kind's (running jobs, limit); ``blocked``: the limited kinds whose oldest due
    bundle did not fit their room (its younger ones wait behind it); ``left_due``: due bundles
    it left PENDING, by priority; ``others_due``: those of them other than follow-ons no task
    has taken yet (with no slot free, of a look at the oldest few), which a batch's running
    tasks run before its follow-ons (dispatcher.store.follow_ons). ``fed_seconds``: what the
    follow-ons it cut gave each task, running or launched, in seconds of that task's time: a
    stream's ticks feed the running tasks so every minute, and a task that ran out of
    follow-ons waits for the next tick's rather than exit while they do (one started
    instead would spend its start idle). ``small_jobs_left``: its drain of small jobs stopped
    with every slot's share taken, not with the queue empty (a stream's first ticks, before
    any feeds the running tasks): those tasks wait for the next tick's too."""

    at: float
    active: int
    max_running: int
    kinds: dict[str, tuple[int, int]] = field(default_factory=dict)
    left_due: dict[str, int] = field(default_factory=dict)
    blocked: frozenset[str] = frozenset()
    others_due: dict[str, int] = field(default_factory=dict)
    fed_seconds: float = 0.0
    small_jobs_left: bool = False
    # Tenants' shares (dispatcher.domain.tenant_shares), of those in its view: each one's
    # tasks as it ended and its target; and how many tasks of a tenant should give up their
    # slot at their bundle's end (dispatcher.store.follow_ons).
    tenants: dict[str, TenantShare] = field(default_factory=dict)
    shed: dict[str, int] = field(default_factory=dict)
    # The highest priority of the work of tenants below their targets (None: none waits): a
    # task gives up its slot only for work of its own priority or higher.
    wanting: str | None = None
    # The buckets it held due bundles back for (at most MAX_RATE_WAITS), by bucket key.
    rate_limits: dict[str, RateWait] = field(default_factory=dict)

    def others_waiting(self, priority: str) -> bool:
        """Whether due work other than untaken follow-ons, of ``priority`` or higher, was
        left waiting."""
        rank = PRIORITY_RANK.get(priority, 1)
        return any(n for p, n in self.others_due.items() if PRIORITY_RANK.get(p, 1) <= rank)

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "active": self.active, "max_running": self.max_running,
                "kinds": {k: list(v) for k, v in self.kinds.items()},
                "left_due": dict(self.left_due), "blocked": sorted(self.blocked),
                "others_due": dict(self.others_due), "fed_seconds": self.fed_seconds,
                "small_jobs_left": self.small_jobs_left,
                **({"tenants": {t: v.to_json() for t, v in self.tenants.items()}}
                   if self.tenants else {}),
                **({"shed": dict(self.shed)} if self.shed else {}),
                **({"wanting": self.wanting} if self.wanting else {}),
                **({"rate_limits": {k: v.to_json() for k, v in self.rate_limits.items()}}
                   if self.rate_limits else {})}

    @staticmethod
    def from_json(data: Any) -> TickSummary | None:
        if not isinstance(data, dict):
            return None
        kinds = data.get("kinds") or {}
        return TickSummary(at=float(data.get("at", 0)), active=int(data.get("active", 0)),
                           max_running=int(data.get("max_running", 0)),
                           kinds={str(k): (int(v[0]), int(v[1])) for k, v in kinds.items()},
                           left_due={str(p): int(n)
                                     for p, n in (data.get("left_due") or {}).items()},
                           blocked=frozenset(str(k) for k in data.get("blocked") or ()),
                           others_due={str(p): int(n)
                                       for p, n in (data.get("others_due") or {}).items()},
                           fed_seconds=float(data.get("fed_seconds") or 0.0),
                           small_jobs_left=bool(data.get("small_jobs_left")),
                           tenants={str(t): TenantShare.from_json(v)
                                    for t, v in (data.get("tenants") or {}).items()},
                           shed={str(t): int(n) for t, n in (data.get("shed") or {}).items()},
                           wanting=str(data["wanting"]) if data.get("wanting") else None,
                           rate_limits={str(k): RateWait.from_json(v) for k, v in
                                        (data.get("rate_limits") or {}).items()})


@dataclass(frozen=True)
class BundleFacts:
    """What of a job's bundle the rule reads."""

    state: str
    next_attempt_at: float | None = None
    launch_failures: int = 0
    last_failure: str | None = None
    task_arn: str | None = None
    launch_id: str | None = None
    updated_at: float | None = None
    kind: str | None = None
    priority: str = "normal"
    slots: int = 0
    stopped_task: str | None = None  # the task whose stop was handled last (a rerun's cause)
    follow_on: bool = False  # a follow-on no task has run yet (waits apart: FOLLOW_ON)
    tenant: str | None = None  # whom its jobs are for (from its id)
    # The rate limits' buckets its launch takes tokens of, and how many of each.
    buckets: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Waiting:
    """What a job waits for, with the numbers behind it (None where they do not apply)."""

    reason: str
    until: float | None = None  # scheduled, *_backoff, rerun_pending: when it is due
    since: float | None = None  # launching, starting: since when
    running: int | None = None  # kind_limit: jobs of its kind; capacity, priority: tasks
    limit: int | None = None  # kind_limit: its kind's limit; capacity, priority: task maximum
    # priority: due bundles the last tick left waiting that go first (of a higher priority;
    # with a slot free, of its own)
    ahead: int | None = None
    kind: str | None = None
    # fair_share: its tenant; running: that tenant's tasks; limit: its cap, or its share of
    # the slots (target) while they are all taken
    tenant: str | None = None
    key: str | None = None  # rate_limit: the bucket (until: when its tokens come)
    task_arn: str | None = None
    launch_id: str | None = None
    last_error: str | None = None
    # A rerun (whatever it waits for): the run it waits to make, and why it reruns.
    attempt: int | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def waiting_for(state: str, *, not_before: float | None, runs: int, reason: str | None,
                bundle: BundleFacts | None, summary: TickSummary | None,
                now: float) -> Waiting | None:
    """What a job in ``state`` waits for at ``now``; None unless it is PENDING. ``runs``: the
    runs it has had (counted attempts and infrastructure ones): a rerun's Waiting carries the
    run it waits to make (``attempt``) and why it reruns (``detail``, its reason)."""
    if state != "PENDING":
        return None
    scheduled = not_before is not None and not_before > now
    if bundle is not None and not reason and bundle.stopped_task:
        reason = f"task {bundle.stopped_task} stopped"
    attempt, detail = (runs + 1, reason) if runs else (None, None)
    if bundle is None or bundle.state == "RECORDING":
        return Waiting(RECORDING)
    if bundle.state == "LAUNCHING":
        return Waiting(LAUNCHING, since=bundle.updated_at, launch_id=bundle.launch_id)
    if bundle.state in ("LAUNCHED", "RUNNING"):  # RUNNING: its task has not taken it yet
        return Waiting(STARTING, since=bundle.updated_at, task_arn=bundle.task_arn)
    due = bundle.next_attempt_at
    if due == DEPENDENTS_HELD_AT:  # held until its dependencies end (the bundle's hold says
        # so where the job's own list of them is not read: an index row of it)
        return Waiting(DEPENDENCIES)
    if due is not None and due >= DEPENDENTS_HELD_AT:  # held: a retry until an earlier run's
        # task stops
        return Waiting(RERUN_PENDING, attempt=runs + 1, detail=reason)
    if due is not None and due > now:
        if bundle.launch_failures and bundle.last_failure:
            kind = SPOT_BACKOFF if bundle.last_failure.startswith(NO_CAPACITY) \
                else LAUNCH_BACKOFF
            return Waiting(kind, until=due, last_error=bundle.last_failure)
        if scheduled:
            return Waiting(SCHEDULED, until=not_before)
        if runs:
            return Waiting(RERUN_PENDING, until=due, attempt=runs + 1, detail=reason)
        return Waiting(SCHEDULED, until=due)
    if scheduled:
        return Waiting(SCHEDULED, until=not_before)
    if summary is None:  # no tick has looked at the slots yet
        return Waiting(CAPACITY, attempt=attempt, detail=detail)
    if bundle.kind is not None and bundle.kind in summary.kinds:
        running, limit = summary.kinds[bundle.kind]
        if running + max(1, bundle.slots) > limit or bundle.kind in summary.blocked:
            return Waiting(KIND_LIMIT, kind=bundle.kind, running=running, limit=limit,
                           attempt=attempt, detail=detail)
    active, most = summary.active, summary.max_running
    name = bundle.tenant or tenants.NONE
    share = summary.tenants.get(name)
    if share is not None and share.max_running is not None and share.tasks >= share.max_running:
        return Waiting(FAIR_SHARE, tenant=name, running=share.tasks, limit=share.max_running,
                       detail=detail or "its tenant's cap", attempt=attempt)
    # Its bucket short as the last tick found it, until its tokens come (then a tick
    # launches it as any due work); or past the burst (never, until the limit changes).
    held = next(((k, n) for k, n in bundle.buckets if k in summary.rate_limits
                 and (n > summary.rate_limits[k].burst
                      or (summary.rate_limits[k].at or now) > now)), None)
    if held is not None:
        key, need = held
        wait = summary.rate_limits[key]
        if need > wait.burst:
            return Waiting(RATE_LIMIT, key=key, attempt=attempt, detail=(
                f"it takes {need} tokens at once, more than one take of the limit can have "
                f"({wait.burst:g}): raise its burst to {need * wait.shards} or more (longjobs "
                f"limits set {wait.declared} --burst {need * wait.shards}), or send it with "
                "fewer"))
        return Waiting(RATE_LIMIT, key=key, until=wait.at, detail=detail, attempt=attempt)
    if bundle.follow_on:  # taken in turn by running tasks; a free slot gets the oldest
        return Waiting(FOLLOW_ON, running=active, limit=most)
    if share is not None and active >= most and share.tasks >= share.target \
            and summary.wanting is not None \
            and PRIORITY_RANK.get(bundle.priority, 1) >= PRIORITY_RANK.get(summary.wanting, 1):
        # Every slot taken, its tenant at its share, and a tenant below its own waits with
        # work of this priority or higher: a slot that frees goes to that one first.
        return Waiting(FAIR_SHARE, tenant=name, running=share.tasks, limit=share.target,
                       detail=detail or "its tenant's share of the slots", attempt=attempt)
    rank = PRIORITY_RANK.get(bundle.priority, 1)
    higher = sum(n for p, n in summary.left_due.items() if PRIORITY_RANK.get(p, 1) < rank)
    if higher:  # bundles of a higher priority wait too: a slot that frees goes to them first
        return Waiting(PRIORITY, ahead=higher, running=active, limit=most, attempt=attempt,
                       detail=detail)
    if active >= most:
        return Waiting(CAPACITY, running=active, limit=most, attempt=attempt, detail=detail)
    # A slot is free: the next tick launches it, after the due bundles of its priority.
    ahead = sum(n for p, n in summary.left_due.items() if PRIORITY_RANK.get(p, 1) == rank)
    if runs and not ahead:
        return Waiting(RERUN_PENDING, attempt=attempt, detail=detail)
    return Waiting(PRIORITY, ahead=ahead, running=active, limit=most, attempt=attempt,
                   detail=detail)
