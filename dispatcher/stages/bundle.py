"""Packing jobs into bundles: one task per bundle, so small jobs share a task's start-up cost.

Bundles are sized by work: a bundle holds small jobs worth ``bundle_max_seconds`` of one task's
time at ``task_concurrency`` jobs in parallel (900 s at 20 in parallel of 2 s jobs is 9,000
jobs). With a backlog larger than the free task slots can take at once, the bundles are made
even (``target_jobs`` each, the backlog spread over the slots) so every task starts at once and
ends at about the same time; the last slot takes whatever is left, up to the work limit.

Only jobs of one shape share a bundle: the same priority, the same resources (a task has one
size), the same ``not_before`` if scheduled, and one kind if that kind has a limit
(``LONGJOBS_KIND_LIMITS``); that sizing rule is :mod:`dispatcher.domain.bundle_sizes`, which
an operator's retry packs its jobs by too. A bundle is *deferred* when it cannot launch in
this tick: it is scheduled for later, its kind is at its limit, or it holds jobs received
after every slot was taken (:meth:`Bundler.wait`). A deferred bundle is recorded (PENDING,
due at its time) but takes no task slot now; a later tick launches it when due and when its
kind has room.

A bundle is closed as soon as it is full, so the tick records and launches it while it keeps
draining the queue. So the bundles of a large backlog launch one after another, as fast as the
drain admits their jobs: at the reference batch's shape (200,000 jobs of 2 s, 60 tasks x 20)
the last of 60 equal bundles launched about a minute after the first, and ended a minute later.
Given the drain's clock and the backlog, each bundle's share is *tapered* instead
(:func:`tapered_share`): a bundle opened later gets fewer jobs, by the jobs its task would have
run while the drain admitted the bundles before it, so that all the tasks end together.

The taper cannot know when each task will start (Fargate takes 30-60 s, drawn anew for each),
so with ``follow_on_seconds`` set a drain whose share per slot is worth at least four bundles
of that many seconds of a task's time cuts its backlog into such bundles instead: one per free
slot, launched as they fill (all of them within seconds), and the rest *follow-ons* of the
drain's batch (one batch per shape), recorded PENDING and due, smaller as the backlog runs out,
which the runners take about in order as their bundles end (:mod:`dispatcher.store.follow_ons`).
A task that starts early runs more of them; the tasks end within seconds of each other.
Only small jobs of a shape that is neither scheduled nor of a limited kind follow on; the drain
admits no more than without them (the slots' even shares, up to the work limit each).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping

from dispatcher.domain import labels, rate_limits
from dispatcher.domain.bundle_sizes import BundleSizes, Shape
from dispatcher.domain.bundles import (
    Bundle,
    first_wave_id,
    follow_on_id,
    new_batch_id,
    new_bundle_id,
)
from dispatcher.domain.jobs import Job, new_id
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.policy import BundlePolicy
from dispatcher.stages.tenant_slots import TenantLimits, TenantRoom, past_share

# Rounds of a task's concurrency an even share must hold before bundles are tapered.
TAPER_ROUNDS = 4
# Seconds of a task's time the last follow-ons of a drain hold, at least (in whole rounds of
# its concurrency, one at least): about what the tasks' ends may differ by, against a take's
# calls (four) for each follow-on.
TAIL_SECONDS = 5.0
# Follow-ons a share per slot must be worth: fewer gain less from them (the start draws they
# even out) than the rounding of their last ones costs (a round of long jobs is long).
FOLLOW_ON_SHARES = 4


def tapered_share(remaining: int, slots: int, admit_rate: float, task_rate: float) -> int:
    """Jobs for the next of ``slots`` bundles that share ``remaining`` jobs, so that every
    task ends at the same time although each bundle launches after the drain admitted it.

    The drain admits ``admit_rate`` jobs/s; a task runs ``task_rate`` jobs/s. Bundle k+1
    closes ``n(k+1) / admit_rate`` seconds after bundle k, and to end together it runs that
    much less: n(k) - n(k+1) = task_rate x n(k+1) / admit_rate, so n(k+1) = rho x n(k) with
    rho = admit_rate / (admit_rate + task_rate), and the next bundle's share is the first
    term of that geometric series summing to ``remaining``. A drain much faster than a task
    (rho near 1) gives the even share, remaining / slots."""
    if slots <= 1 or remaining <= 0:
        return max(1, remaining)
    if admit_rate <= 0 or task_rate <= 0:
        return max(1, math.ceil(remaining / slots))
    x = task_rate / admit_rate  # 1 - rho = x / (1 + x); rho ** slots = (1 + x) ** -slots
    share = remaining * x / (1 + x) / -math.expm1(-slots * math.log1p(x))
    return max(1, round(share))


class Bundler:
    """Admits jobs while they fit into ``capacity`` bundles, closing each one when full.

    Jobs estimated at or under the small-job threshold fill the open bundle of their shape; any
    other job (including one with no estimate) gets a bundle of its own, closed at once.
    ``kind_room``: jobs each limited kind may still start (its limit less what runs);
    ``kind_limits``: the limits; ``at``: now, to tell scheduled jobs. With ``backlog`` (the
    jobs the even share ``target_jobs`` was taken from) and ``clock`` (the one ``at`` is on),
    each bundle's share is tapered by the drain's admission rate so far
    (:func:`tapered_share`).
    """

    def __init__(self, policy: BundlePolicy, capacity: int, target_jobs: int | None = None,
                 *, at: float = 0.0, kind_limits: Mapping[str, int] | None = None,
                 kind_room: Mapping[str, int] | None = None, waiting: int = 0,
                 backlog: int | None = None,
                 clock: Callable[[], float] | None = None, takers: int = 0,
                 running_tenants: Collection[str | None] | None = None,
                 tenant_room: TenantRoom = None,
                 rate_limits: Callable[[], Mapping[str, RateLimit]] | None = None) -> None:
        """``waiting``: jobs to admit although no slot can take them (they all :meth:`wait`):
        the urgent intake of a tick with every slot busy (dispatcher/stages/handoff.py).
        ``takers``: the running tasks that take follow-ons as they end their bundles. With no
        slot free (``capacity`` 0) the backlog is cut into follow-ons for them (none
        launched); with some, as soon as it is more than the free slots take at a follow-on
        each (one launched per free slot, the rest for every task). Either way the drain
        admits at most what as many slots as free and taking tasks together would, at their
        even shares. ``running_tenants``: the tenants of the tasks running (None: not told);
        a batch of another tenant, which none of them can take, opens with a foothold.
        ``tenant_room``: tasks each capped tenant may still start, or how to read them (called
        at the first job of a tenant, if any comes); a tenant with none left opens no slot (its
        bundles wait as due work, or follow on for its running tasks). ``rate_limits``: how
        to read the rate limits (at the first job that takes tokens, if any comes): a bundle
        of such jobs holds no more than its tokens' burst lets one launch take."""
        self._read_limits = rate_limits
        self._limits: Mapping[str, RateLimit] | None = None
        self._token_caps: dict[str, int] = {}  # a bundle's jobs at most, by its tokens
        self._policy = policy
        self._takers = max(0, takers)
        self._waiting = waiting
        self._waited = 0
        self.capacity = max(0, capacity)
        self._target = target_jobs
        self._at = at
        # The sizing rule admission and retries share (dispatcher.domain.bundle_sizes).
        self._rule = BundleSizes(policy.bundle_max_jobs, policy.bundle_max_seconds,
                                 policy.small_job_seconds, policy.task_concurrency,
                                 dict(kind_limits or {}))
        self.kind_room = dict(kind_room or {})
        self.tenant_room: TenantRoom = tenant_room if tenant_room is not None \
            else TenantLimits()
        self._opened_by: Counter[str | None] = Counter()  # first-wave slots by tenant
        self._tenants_seen: set[str | None] = set()
        # Each bundle's one kind so far ("": several), for take_closed.
        self._one_kind: dict[str, str] = {}
        self.opened = 0  # bundles that take a task slot now
        self.deferred: set[str] = set()  # bundle ids recorded now, launched later
        self._closed: list[Bundle] = []
        self._open: dict[Shape, Bundle] = {}
        self._open_bytes: dict[Shape, int] = {}
        self._seen = 0  # jobs admitted, the small ones, their estimated seconds (room())
        self._small_seen = 0
        self._seconds = 0.0
        self._backlog = backlog
        self._clock = clock
        self._opening: dict[str, tuple[int, int]] = {}  # -> (backlog left, slots) at opening
        # Follow-ons (decided at the first small job, see :meth:`_follow_on`): jobs per
        # bundle, 0 if none; each shape's batch and its next follow-on's number.
        self._follow: int | None = None
        self._batches: dict[Shape, str] = {}
        self._next_follow: dict[Shape, int] = {}
        self._sizes: dict[str, int] = {}  # each follow-on's jobs (see _follow_on_size)
        self._tail = self._policy.task_concurrency  # the last follow-ons' jobs, at least
        # Footholds: the first bundle of a batch cut for no running task of its tenant (a
        # task runs one tenant's jobs), recorded as due work rather than a follow-on: a
        # running task of another tenant leaves its slot for it at its next bundle's end
        # (dispatcher.store.follow_ons, "other due work"), so the tenant starts within that
        # and a tick instead of after the others' backlog; its task then takes the batch's
        # follow-ons. One a shape; their ids.
        self._running_tenants = None if running_tenants is None else set(running_tenants)
        self._footholds: set[Shape] = set()
        self.footholds: set[str] = set()

    def is_small(self, job: Job) -> bool:
        """Bundled with others: a small job that waits for no other (one that does is held in
        a bundle of its own, released when its dependencies are met)."""
        return self._rule.is_small(job)

    def shape(self, job: Job) -> Shape:
        return self._rule.shape(job, self._at)

    def slots(self, kind: str) -> int:
        """Most jobs of a limited kind one bundle runs at once. A bundle launched now counts
        what it can actually run at once against the limit, ``min(jobs, this, room)``: one
        slot more per job that joins it, while the kind has room; a deferred bundle counts
        nothing until it launches (the tick decides its slots then)."""
        return self._rule.slots(kind)

    def _follow_on(self) -> int:
        """Jobs per bundle when this drain's bundles follow on; 0 if they do not (or not
        decided yet: :meth:`_decide`)."""
        return self._follow or 0

    def _decide(self, job: Job, shape: Shape) -> None:
        """Whether this drain's bundles follow on, decided once, at its first job that could
        (small, neither scheduled nor of a limited kind): they do when the even share is
        worth ``FOLLOW_ON_SHARES`` follow-ons or more, each of whole rounds of a task's jobs
        worth ``follow_on_seconds`` at that job's estimate, or when running tasks take them
        and the free slots would not take the backlog at a follow-on each."""
        est = job.estimated_seconds
        if self._follow is not None or not self.is_small(job) or not est or est <= 0 \
                or shape[2] is not None or shape[3] is not None or shape[5] is not None:
            return
        follow_seconds = self._policy.follow_on_seconds
        per_round = self._policy.task_concurrency
        # No bundle holds more than this: bounds the count of an estimate near 0 (messages
        # carry 0.001 s at least; a Job made otherwise may not).
        cap = self._policy.bundle_max_jobs
        per = per_round * max(1, round(min(follow_seconds / est, cap)))
        self._tail = per_round * max(1, round(min(TAIL_SECONDS / est, cap)))
        # For running tasks that take them, as soon as the free slots would not take it at a
        # follow-on each (with no slot free, always: nothing of it launches now).
        self._follow = per if follow_seconds > 0 and self._target is not None \
            and self._backlog is not None \
            and ((self._takers and self._backlog > self.capacity * per)
                 or self._target >= FOLLOW_ON_SHARES * per) else 0
        if self._follow and self._takers and self._backlog:
            # Cut for running tasks, the share of each is worth FOLLOW_ON_SHARES follow-ons
            # too (whole rounds, TAIL_SECONDS' worth at least): a stream's minute, shared by
            # the tasks, is taken in several pieces as they free, not one each, which a task
            # freeing late would start a whole follow-on after the others.
            share = -(-self._backlog // (self.capacity + self._takers))
            rounds = share // FOLLOW_ON_SHARES // per_round
            self._follow = max(min(per, self._tail), min(per, per_round * max(1, rounds)))

    def _follow_on_size(self) -> int:
        """Jobs for the next follow-on: ``follow_on_seconds``' worth while much is left; as
        the drain's backlog runs out, what is left per slot (each task's share of what none
        has taken), down to ``TAIL_SECONDS`` of a task's time (a round at least), so the
        tasks' last follow-ons end within seconds of each other, not a whole follow-on."""
        per_round = self._policy.task_concurrency
        left = min(self._backlog or 0, self._admits()) - self._seen
        share = left // max(1, self.capacity + self._takers)
        return max(min(self._follow_on(), self._tail),
                   min(self._follow_on(), per_round * (share // per_round)))

    @property
    def follows_on(self) -> bool:
        """Follow-ons are made and the drain may still admit some."""
        return self._follow_on() > 0 and self._seen < self._admits()

    def _admits(self) -> int:
        """Jobs this drain admits at most when its bundles follow on: as without them, every
        slot's even share (up to the work limit at the mean estimate seen)."""
        sharers = self.capacity + self._takers
        even = self._target or 0
        if self._takers and self._backlog:  # the free slots' share is the running tasks' too
            even = min(even, -(-self._backlog // sharers))
        per = min(even, self._policy.bundle_max_jobs)
        if self._seconds > 0:
            per = min(per, int(self._rule.max_work_seconds * self._seen / self._seconds))
        return max(1, sharers) * max(1, per)

    def _limit(self, bundle: Bundle) -> int:
        """Jobs a bundle may hold: the even share, except in the last slot or when deferred;
        a follow-on's size for every bundle of a batch."""
        limit = self._policy.bundle_max_jobs
        if bundle.batch is not None:
            return min(limit, self._sizes.get(bundle.bundle_id, self._follow_on()))
        if bundle.uses is not None:  # its launch takes all its jobs' tokens
            return min(limit, self._token_caps.get(bundle.bundle_id, 1))
        if self._target is not None and self.opened < self.capacity \
                and bundle.bundle_id not in self.deferred:
            limit = min(limit, max(1, self._tapered(bundle.bundle_id) or self._target))
        return limit

    def _tapered(self, bundle_id: str) -> int | None:
        """A bundle's tapered share (see :func:`tapered_share`), from the backlog left and the
        slots free when it opened and the drain's admission rate so far (None until there is
        one). Taken again at each job it is offered: the rate a drain's first jobs show is
        a poor guess (ten arrive at once), so its first bundle's share follows the rate as
        it settles. Only for shares of several rounds of a task's jobs (``TAPER_ROUNDS``):
        a task of one or two rounds cannot end at a finer grain than a job, and a share cut
        below the even one there only launches more tasks for the same drain."""
        opened = self._opening.get(bundle_id)
        if opened is None or self._clock is None or self._target is None \
                or self._target < TAPER_ROUNDS * self._policy.task_concurrency:
            return None
        elapsed = self._clock() - self._at
        if elapsed <= 0 or self._seen == 0 or self._seconds <= 0:
            return None
        rounds = self._policy.task_concurrency
        task_rate = rounds * self._seen / self._seconds
        share = tapered_share(*opened, self._seen / elapsed, task_rate)
        # A task runs its jobs ``task_concurrency`` at a time: a share one job over a multiple
        # of that ends a whole job later (the nightly bench's last task held 101 jobs at 20 at
        # once: six rounds of 30 s where 100 are five). So the share is a whole number of
        # rounds, the nearest to the taper's.
        return rounds * max(1, round(share / rounds))

    def _fits(self, shape: Shape, job: Job) -> bool:
        b = self._open.get(shape)
        return (b is not None and self._has_room(b)
                and self._rule.fits(len(b.job_ids), b.estimated_seconds,
                                    self._open_bytes[shape], job, self._limit(b)))

    def _has_room(self, b: Bundle) -> bool:
        """A bundle launched now takes one more job of a limited kind while it runs fewer than
        it could at once and the kind has room for one more, or once it runs all it can (the
        job waits in the task for a running one to end); else the job opens a new bundle."""
        return b.kind is None or b.bundle_id in self.deferred \
            or b.slots >= self.slots(b.kind) or self.kind_room.get(b.kind, 0) > 0

    def room(self) -> int:
        """Jobs the task slots left can still take at the even share (deferred work aside):
        how many messages are worth receiving. Until the jobs seen are mostly small, a free
        slot counts for one job (a job that is not small takes a slot of its own), so a drain
        with few free slots does not receive jobs that could only wait."""
        if self.takes_waiting:
            return self._waiting - self._waited
        if self._follow_on():
            return max(0, self._admits() - self._seen)
        if self._takers and not self.capacity:  # follow-ons or nothing: the first small job
            return 1 if self._undecided_for_takers else 0  # decides (_decide)
        per = min(self._target or self._policy.bundle_max_jobs, self._policy.bundle_max_jobs)
        if self._seconds > 0:  # the work limit, at the mean estimate seen so far
            per = min(per, int(self._rule.max_work_seconds * self._seen / self._seconds))
        if 2 * self._small_seen <= self._seen:
            per = 1
        per = max(1, per)
        free = max(0, self.capacity - self.opened) * per
        return free + sum(max(0, min(per, self._limit(b)) - len(b.job_ids))
                          for b in self._open.values() if b.bundle_id not in self.deferred)

    @property
    def small_seen(self) -> bool:
        """Small jobs were admitted (those share bundles, and follow on)."""
        return self._small_seen > 0

    @property
    def batches(self) -> dict[str, int]:
        """Each batch this drain made, and how many follow-ons it has (0 for a shape whose
        first bundles took every one of its jobs: its runners need not look for any)."""
        return {batch: self._next_follow.get(shape, 0) for shape, batch in self._batches.items()}

    @property
    def open_bundles(self) -> list[Bundle]:
        return list(self._open.values())

    @property
    def full(self) -> bool:
        """No task slot is left: only deferred work could still be admitted."""
        return self.opened >= self.capacity and not self.takes_waiting \
            and not self.follows_on and not self._undecided_for_takers and not any(
                b.bundle_id not in self.deferred for b in self._open.values())

    @property
    def _undecided_for_takers(self) -> bool:
        """Cutting follow-ons for running tasks, with no job seen yet to decide whether the
        backlog follows on (one job is received to decide)."""
        return bool(self._takers) and not self.capacity and self._follow is None \
            and not self._seen

    @property
    def takes_waiting(self) -> bool:
        """Still admits jobs that wait (``waiting``), whether or not a slot is left."""
        return self._waited < self._waiting

    def offer(self, job: Job) -> bool:
        """Admit ``job`` into a bundle; False when no bundle can take it (capacity spent)."""
        return self._place(job, self.shape(job))

    def wait(self, job: Job) -> None:
        """Admit a job that no slot can take now into a deferred bundle due at once: it waits
        in the table (PENDING) and a later tick launches it, before newer messages, when a slot
        frees. Why not send its message back: each receive counts toward the DLQ's
        maxReceiveCount, so a valid job bounced by a few busy ticks would end as a dead letter.
        """
        priority, resources, when, kind, tenant, uses = self.shape(job)
        self._waited += 1
        placed = self._place(job, (priority, resources, self._at if when is None else when, kind,
                                   tenant, uses))
        assert placed  # a deferred shape never needs a slot

    def _place(self, job: Job, shape: Shape) -> bool:
        self._decide(job, shape)
        if self.is_small(job) and self._fits(shape, job):
            bundle = self._open[shape]
            self._add(bundle, job)
            self._open_bytes[shape] += job.item_bytes()
            if len(bundle.job_ids) >= self._limit(bundle):
                self.close(shape)
            return True
        # Deferred: scheduled, of a limited kind with no room, or taking rate limits' tokens
        # (they take no slot of the drain's: the tick launches them into the slots left at
        # its end once their tokens are granted, stages/tick_tokens.py).
        deferred = shape[2] is not None or shape[5] is not None or (
            shape[3] is not None and self.kind_room.get(shape[3], 0) < 1)
        # Follows on: a small job of a shape neither scheduled nor limited (nor taking rate
        # limits' tokens, which only the tick's launch takes: stages/tick_tokens.py), in a
        # drain cutting its backlog into follow-ons (its budget of jobs not spent).
        batch = self.is_small(job) and shape[2] is None and shape[3] is None \
            and shape[5] is None \
            and self._follow_on() > 0
        if job.tenant is not None and callable(self.tenant_room):
            self.tenant_room = self.tenant_room()  # read once, at the first tenant
        limits = self.tenant_room if isinstance(self.tenant_room, TenantLimits) \
            else TenantLimits()  # no tenant seen yet: the jobs of none have no cap
        room = limits.caps
        self._tenants_seen.add(job.tenant)
        # Its tenant may start no task (its cap), or, cutting follow-ons, has opened its
        # weight's share of the free slots among the tenants seen (the rest follow on for
        # its tasks; the slots others leave go to the untaken follow-ons at the drain's end).
        capped = room.get(job.tenant, 1) < 1 or (batch and past_share(
            self._opened_by, self._tenants_seen, self.capacity, job.tenant, limits))
        follow_on = batch and not deferred and (self.opened >= self.capacity or capped)
        if follow_on and self._seen >= self._admits():
            return False
        if not deferred and not follow_on and self.opened >= self.capacity:
            return False
        deferred = deferred or capped
        # (none for a tenant at its cap: the tick would not launch it, and a task would
        # leave its slot for nothing)
        foothold = follow_on and self._running_tenants is not None \
            and job.tenant not in self._running_tenants and shape not in self._footholds \
            and room.get(job.tenant, 1) >= 1
        if foothold:
            follow_on, deferred = False, True
            self._footholds.add(shape)
        if self.is_small(job):
            self.close(shape)  # a new open bundle of this shape replaces the full one
        # Its id (and its batch's) names its tenant (dispatcher.domain.tenants).
        bundle_id = new_bundle_id(job.tenant, shape[5] is not None, new_id(), bool(job.labels))
        if follow_on:
            batch_id = self._batches.setdefault(
                shape, new_batch_id(job.tenant, bool(job.labels), new_id()))
            n = self._next_follow.get(shape, 0)
            self._next_follow[shape] = n + 1
            bundle_id = follow_on_id(batch_id, n)
            deferred = True
            self._sizes[bundle_id] = self._follow_on_size()
        elif batch:  # its id names its batch too (the tick tells the batches running by it)
            batch_id = self._batches.setdefault(
                shape, new_batch_id(job.tenant, bool(job.labels), new_id()))
            bundle_id = first_wave_id(batch_id, self.opened)
            if foothold:
                self.footholds.add(bundle_id)
                self._sizes[bundle_id] = self._follow_on_size()
        bundle = Bundle(bundle_id=bundle_id, job_ids=[], priority=job.priority,
                        resources=job.resources, created_at=self._at,
                        next_attempt_at=shape[2] if shape[2] is not None else self._at,
                        labels=dict(job.labels or {}))
        if batch:
            bundle.batch = batch_id
        if shape[3] is not None:
            bundle.kind = shape[3]
        if shape[5] is not None:
            bundle.uses = {}
            self._token_caps[bundle_id] = self._token_cap(job)
        if deferred:
            self.deferred.add(bundle.bundle_id)
        else:
            # Jobs beyond the backlog counted at the start (sent meanwhile, or SQS's count
            # was low) fill bundles of the even share, as they did before tapering.
            if self.is_small(job) and self._target is not None and self._backlog is not None \
                    and self._backlog > self._seen:
                self._opening[bundle.bundle_id] = (self._backlog - self._seen,
                                                   self.capacity - self.opened)
            self.opened += 1
            self._opened_by[job.tenant] += 1
            if job.tenant in room:
                room[job.tenant] -= 1
            if self._running_tenants is not None:  # its task takes the tenant's follow-ons
                self._running_tenants.add(job.tenant)
        self._add(bundle, job)
        if self.is_small(job):
            self._open[shape], self._open_bytes[shape] = bundle, job.item_bytes()
            if len(bundle.job_ids) >= self._limit(bundle):
                self.close(shape)
        else:
            self._closed.append(bundle)
        return True

    def _token_cap(self, job: Job) -> int:
        """Jobs like ``job`` (of its ``uses``) one bundle holds
        (:func:`dispatcher.domain.rate_limits.jobs_per_bundle`); one alone if the limits
        could not be read."""
        if self._limits is None:
            try:
                self._limits = self._read_limits() if self._read_limits is not None else {}
            except TableUnavailable:
                return 1
        return rate_limits.jobs_per_bundle(self._policy.task_concurrency, self._limits,
                                           job.uses or {})

    def close(self, shape: Shape | None = None) -> None:
        """Close the open bundle of ``shape`` (every open bundle if None)."""
        for key in [shape] if shape is not None else list(self._open):
            bundle = self._open.pop(key, None)
            if bundle is not None:
                self._open_bytes.pop(key, None)
                self._closed.append(bundle)

    def close_bundle(self, bundle_id: str) -> None:
        for key, b in list(self._open.items()):
            if b.bundle_id == bundle_id:
                self.close(key)

    def take_closed(self) -> list[Bundle]:
        """The bundles closed since the last call, ready to record. A bundle whose jobs are
        all of one kind is recorded with that kind even if it has no limit now, so that a
        limit set before it launches (a scheduled or deferred bundle) applies to it
        (:func:`dispatcher.stages.launch.launch_slots`); one of several kinds cannot say."""
        out, self._closed = self._closed, []
        for bundle in out:
            self._sizes.pop(bundle.bundle_id, None)
            kind = self._one_kind.pop(bundle.bundle_id, None)
            if bundle.kind is None and kind:
                bundle.kind = kind
        return out

    def _add(self, bundle: Bundle, job: Job) -> None:
        self._seen += 1
        self._small_seen += self.is_small(job)
        self._seconds += job.estimated_seconds or 0
        bundle.job_ids.append(job.job_id)
        bundle.estimated_seconds += job.estimated_seconds or 0
        if bundle.uses is not None:
            bundle.uses = rate_limits.needs([bundle.uses, job.uses])
        bundle.labels = labels.shared([bundle.labels, job.labels])
        seen = self._one_kind.setdefault(bundle.bundle_id, job.kind)
        if seen != job.kind:
            self._one_kind[bundle.bundle_id] = ""  # several kinds
        job.bundle_id = bundle.bundle_id
        if bundle.kind is not None and bundle.bundle_id not in self.deferred \
                and bundle.slots < self.slots(bundle.kind) \
                and self.kind_room.get(bundle.kind, 0) > 0:
            bundle.slots += 1
            self.kind_room[bundle.kind] = self.kind_room.get(bundle.kind, 0) - 1
