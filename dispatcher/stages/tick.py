"""The tick: lease, recover, reconcile, admit, bundle, record, launch, report.

One tick is one Lambda invocation (``dispatcher.handlers.dispatch``). It owns no state between
invocations: everything it needs to resume after a crash is in the table.

Inside Lambda the tick drains while work and time remain: its budget is the invocation's
remaining time less ``reserve_seconds`` (the template's Timeout sets how long that can be);
elsewhere it is ``tick_seconds``. Bundles are launched as soon as they are recorded, on a launch
thread of their own, while the drain goes on; the tick returns once every launch is done.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from dispatcher.domain import rate_limits
from dispatcher.domain.bundles import Bundle, of_small_jobs
from dispatcher.domain.tenants import NONE
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.admit import Admission
from dispatcher.stages.admitted import AdmissionStats
from dispatcher.stages.bundle import FOLLOW_ON_SHARES
from dispatcher.stages.due_work import DueWork, taking_tenants
from dispatcher.stages.fanout import ArrayStats, ArrayTally
from dispatcher.stages.handoff import (
    Handoffs,
    HandoffStats,
)
from dispatcher.stages.launch import Launches, LaunchStats, launch_slots
from dispatcher.stages.launch_queue import LaunchQueue
from dispatcher.stages.lookout import LOOK_SECONDS, Lookout, watch_urgent
from dispatcher.stages.policy import TickPolicy
from dispatcher.stages.reconcile import Reconciler, ReconcileStats
from dispatcher.stages.revision import Revisions
from dispatcher.stages.tick_tenants import TickTenants
from dispatcher.stages.tick_tokens import TickTokens
from dispatcher.store import SavedSummary, StageStore
from dispatcher.store.values import Lease

log = logging.getLogger(__name__)

# Outside Lambda: time kept back from the drain for recording and launching.
LAUNCH_RESERVE_SECONDS = 5.0
# The lease outlives the longest tick by this much.
LEASE_MARGIN_SECONDS = 60.0


@dataclass
class TickReport:
    """The one structured record a tick logs: what it saw and what it decided."""

    tick_id: str
    skipped: str | None = None
    task_definition: str | None = None
    max_running_tasks: int = 0
    active_bundles: int = 0
    capacity: int = 0
    due_bundles: int = 0
    recovered_recordings: int = 0
    new_bundles: int = 0
    capacity_left: int = 0
    intake: AdmissionStats = field(default_factory=AdmissionStats)  # the admit stage (Admission)
    launch: LaunchStats = field(default_factory=LaunchStats)
    reconcile: ReconcileStats = field(default_factory=ReconcileStats)
    handoff: HandoffStats = field(default_factory=HandoffStats)  # urgent jobs, no slot free
    arrays: ArrayStats = field(default_factory=ArrayStats)  # array jobs: open, decided
    tenanted: bool = False  # it saw a tenant's work (its lease tells the next tick)
    elapsed_ms: int = 0
    # What ran the tick: longjobs's version and the AWS libraries' (dispatcher.versions).
    versions: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["launch"]["failures"] = dict(self.launch.failures)
        out["reconcile"]["outcomes"] = [o.as_dict() for o in self.reconcile.outcomes]
        return out


class Tick:
    """One tick: lease, recover, reconcile, admit, launch. Each collaborator is passed in; the
    tick calls each stage and no stage calls back up (the drain yields what to launch)."""

    def __init__(self, store: StageStore, revisions: Revisions, admission: Admission,
                 launches: Launches, reconciler: Reconciler, policy: TickPolicy, *,
                 clock: Callable[[], float] = time.time,
                 handoffs: Handoffs | None = None, arrays: ArrayTally | None = None,
                 versions: Mapping[str, str] | None = None) -> None:
        self._store = store
        self._versions = dict(versions or {})
        self._arrays = arrays
        self._revisions = revisions
        self._admission = admission
        self._launches = launches
        self._reconciler = reconciler
        self._policy = policy
        self._clock = clock
        self._handoffs = handoffs
        self._work = DueWork(store, policy, clock)

    def budget(self, remaining_ms: Callable[[], int] | None) -> float:
        """Seconds this tick may drain for."""
        if remaining_ms is not None:
            return max(0.0, remaining_ms() / 1000 - self._policy.reserve_seconds)
        return max(0.0, self._policy.tick_seconds - LAUNCH_RESERVE_SECONDS)

    def tick(self, remaining_ms: Callable[[], int] | None = None) -> TickReport:
        started, begun = time.monotonic(), self._clock()
        budget = self.budget(remaining_ms)
        decision = TickReport(tick_id=uuid.uuid4().hex[:12],
                            max_running_tasks=self._policy.max_running_tasks,
                            versions=dict(self._versions))
        owner = f"tick-{decision.tick_id}"
        # The lease outlasts this tick however long it drains: a RECORDING bundle found by the
        # next lease holder is then surely a crashed tick's.
        lease = max(self._policy.lease_seconds,
                    budget + self._policy.reserve_seconds + LEASE_MARGIN_SECONDS)
        held = self._store.acquire_lease(owner, lease, one_at_a_time=self._policy.one_at_a_time)
        if held is None:
            decision.skipped = "another tick holds the lease"
            log.info("tick skipped", extra=decision.as_dict())
            return decision
        if held.taken_over:
            log.warning("lease taken over from a tick that did not give it back",
                        extra={"tick_id": decision.tick_id, "lease_number": held.number})
        # When the look at every held dependent was last claimed, as the lease kept it: the
        # sweep skips a claim the table would refuse, and leaves what it did for the next.
        decision.reconcile.sweep_at = held.swept_at
        clean = False
        summary: SavedSummary | None = None
        try:
            # Resolve once and pin: every launch of this tick, the relaunches of its
            # reconciliation too, uses the same revision (the deployed job code on the stack's
            # settings, see stages/revision.py), and the revision is recorded on the bundle,
            # which is how a deploy shows up per job.
            with self._revisions.pinned() as task_definition:
                decision.task_definition = task_definition
                summary = self._run(decision, started + budget, held, begun)
            # Every bundle it began recording is committed (a failure leaves one RECORDING).
            clean = decision.intake.record_failures == 0
        finally:
            try:  # the summary with the lease's release: one write
                self._store.release_lease(owner, swept_at=decision.reconcile.sweep_at,
                                          held=held, clean=clean, summary=summary,
                                          tenanted=decision.tenanted)
            except TableUnavailable as exc:  # only what `jobs show` explains is a tick older
                if summary is None:
                    raise
                log.error("saving the tick's summary failed", extra={"reason": exc.reason})
            decision.elapsed_ms = int((time.monotonic() - started) * 1000)
            log.info("tick", extra=decision.as_dict())
        return decision

    def _run(self, d: TickReport, drain_deadline: float, lease: Lease,
             begun: float) -> SavedSummary:
        """The tick's work; its summary, for the lease's release to write."""
        assert d.task_definition is not None
        self._launches.recover(d.launch, d.task_definition)
        if lease.recordings_left:  # else the tick before recorded all it began
            d.recovered_recordings = len(self._store.recover_recordings())
        active = self._store.active_bundles()
        self._reconciler.run(active, d.reconcile)
        self._reconciler.timeouts(active, d.reconcile)
        self._reconciler.held(d.reconcile)  # retries whose earlier run has ended: due now
        # Reruns started by reconciliation are active again; settled bundles are not.
        d.active_bundles = len(active) - d.reconcile.freed
        d.capacity = max(0, self._policy.max_running_tasks - d.active_bundles)
        freed = d.reconcile.freed_bundles  # they no longer hold their kind's slots either
        room = self._work.kind_room([b for b in active if b.bundle_id not in freed])
        if self._arrays is not None:  # the open arrays' children, offered to the drain
            self._arrays.offer(d.arrays)
        # Jobs of each limited kind running as the tick ends: as active, plus what it launches.
        kind_running = Counter({k: self._policy.kind_limits[k] - left
                                for k, left in room.items()})
        # Due work fills the free slots (stages/due_work.py): other due bundles first, a
        # batch's untaken follow-ons after them (its running tasks take the rest in turn),
        # now, not when the batch ends. A task between two of its batch's bundles holds its
        # slot: its take ends the one and launches the next in one transaction
        # (dispatcher.store.follow_ons).
        live = [b for b in active if b.bundle_id not in freed]
        # The tenants' shares (stages/tick_tenants.py): caps on every launch below, the free
        # slots to those furthest below their targets, sheds asked of those past theirs. A
        # tenant at its cap takes none of its kinds' room (DueWork.fit).
        tenants_now = TickTenants(self._store, self._policy.max_running_tasks,
                                  self._policy.tenant_half_life_seconds, self._clock, live)
        self._work.begin(taking_tenants(live, d.task_definition) if lease.tenanted else (),
                         held=tenants_now.at_cap)
        # Rate limits' tokens (stages/tick_tokens.py): due work whose tokens are not there
        # waits (the due read pages on past it, as past a capped tenant's), and what launches
        # takes them as it does. Running tasks leave no slot for such work (they cannot run
        # it, and the tick launches it only once its tokens come).
        tokens = TickTokens(self._store, self._clock)

        def keep(bundles: list[Bundle]) -> list[Bundle]:
            return tokens.admit(tenants_now.keep(bundles))

        def keep_others(bundles: list[Bundle]) -> list[Bundle]:
            return tenants_now.keep([b for b in bundles
                                     if not rate_limits.takes_tokens(b.bundle_id)])

        waiting, blocked = self._work.due(d.capacity, room, keep=keep)
        if lease.tenanted or tenants_now.shares is not None or any(b.tenant for b in waiting):
            # A tenant whose own tasks all ended (a deploy, a shed) has follow-ons no task
            # of its takes: read them even when other due work fills the slots, so that its
            # turn (below) may come first. (Due work of a tenant says so too: a tick that
            # died after its drain met the first tenant left no word of it on the lease.)
            waiting, more_blocked = self._work.with_untaken(d.capacity, waiting, room)
            blocked |= more_blocked
        waiting = tokens.admit(waiting)  # (the tenants' targets count no held bundle)
        # With no slot free, the looks below page past the running tenants' due work, and past
        # that of tenants given no slot of their own (a weight of 0, a cap reached): no task
        # leaves its slot for theirs, so the look stopping at it left a tenant behind it (its
        # reserve, its share) unseen for as long as that work waited.
        # (And past other tenants' due work while a tenant short of its reserve has none in
        # view: its reserve comes first.)
        passed, owed = tenants_now.looked_past(live) \
            if d.capacity <= 0 and lease.tenanted else (None, set())
        looked_at = self._work.others_due(room, keep_others, passed, owed=owed) \
            if d.capacity <= 0 else []
        others = [b for b in looked_at if not rate_limits.takes_tokens(b.bundle_id)]
        # Work that takes tokens leaves no running task's follow-on for it (above), but whose
        # tokens are there is its tenant's work all the same: its target counts it (a reserve
        # kept, sheds asked for it), and the tick launches it once a slot is free.
        granted = tokens.admit([b for b in looked_at if rate_limits.takes_tokens(b.bundle_id)])
        # With no slot free, a tenant with no task may have only follow-ons due: a look at
        # the untaken ones past the same tenants', for its target (and the sheds asked for
        # it), on a stack with tenants.
        unseen = self._work.others_due(room, None, passed, owed=owed, follow_ons=True) \
            if passed is not None else []
        tenants_now.saw([*waiting, *others, *granted, *unseen])
        if (shares := tenants_now.shares) is not None:
            if shares.shared:
                # Batches of the running tasks, and of the due work (a foothold's batch)
                shares.look(self._store, [*live, *waiting, *others], self._clock())
                self._work.untaken |= {b.bundle_id for b in shares.found}
                known = {b.bundle_id for b in waiting}
                if d.capacity > 0:  # their follow-ons, for their slots (a kind limited
                    # since they were recorded counts them too)
                    waiting, found_blocked = self._work.fit(sorted([*waiting, *(
                        b for b in shares.found if b.bundle_id not in known)],
                        key=self._work.order), room)
                    blocked |= found_blocked
            shares.plan([*waiting, *others, *granted, *unseen])
            # Each priority's within the caps: a capped tenant's bundle of a level whose slots
            # go to others must not hold its work of the levels below back (the share's order
            # counts against the caps what launches).
            waiting = shares.admit(waiting, by_level=True)
            # What a running task leaves its slot for: work the tick would launch there
            others = [b for b in others if shares.wants(b.tenant)]
        waiting = tokens.admit(waiting)  # in its order now: each slice of it can be granted
        others_due = Counter(str(b.priority) for b in others)
        # The running tasks, which take follow-ons as they end their bundles, take the queue's
        # backlog too, cut into follow-ons for them (after any other due work, which their
        # takes look at first): with some slots free, what those would not take at a
        # follow-on each (a stream's every tick); with none, all of it. Only tasks running
        # small jobs count: one running a job of hours takes nothing for hours, and with
        # none of those a backlog of long jobs stays in the queue (a receive only to find
        # that it cannot follow on would admit a job to wait).
        small = self._policy.small_job_seconds
        takers = sum(1 for b in active if b.bundle_id not in freed and of_small_jobs(b, small))
        # Whose tasks run (a task runs one tenant's jobs): another tenant's batch opens with a
        # foothold of due work, which one of these tasks leaves its slot for (stages/bundle.py).
        running = {b.tenant for b in live}
        visible = self._admission.backlog(below_high=d.capacity <= 0) \
            if d.capacity > 0 or takers else {}
        if (d.capacity > 0 and sum(visible.values()) >= FOLLOW_ON_SHARES * d.capacity) \
                or (takers and sum(visible.values()) > 0):
            # A backlog that may be cut into follow-ons (a few a slot at least): their
            # runners take them only on the revision the tick launches (its summary says so
            # at its end; a runner may look before).
            try:
                self._store.save_tick_revision(d.task_definition,
                                               self._revisions.pinned_version)
            except TableUnavailable as exc:  # its runners take none until its summary
                log.error("saving the tick's revision failed", extra={"reason": exc.reason})
        due, queue_slots = self._work.share(
            d.capacity, waiting, visible,
            order=None if tenants_now.shares is None else tenants_now.shares.order)
        due = tokens.take(due)
        running |= {b.tenant for b in due}  # launched now: their tasks take follow-ons too
        tenants_now.took(due)
        if tenants_now.shares is not None:
            # The rest as far as the caps go now that what launches counts (the due work was
            # capped a level at a time): what the caps hold is neither left due nor spare.
            going = {b.bundle_id for b in due}
            going |= {b.bundle_id for b in tenants_now.shares.within_caps(
                [b for b in waiting if b.bundle_id not in going])}
            waiting = [b for b in waiting if b.bundle_id in going]
        for b in due:
            if b.kind in room:
                room[b.kind] -= b.slots
        for kind in blocked:  # its oldest due bundle waits for room: younger ones wait too
            room[kind] = 0
        # The walk of a job: admit (receive, validate) -> bundle -> record, all in the drain,
        # which yields each bundle it recorded that can launch now; the tick hands it to the
        # launch thread at once, so launching goes on while the drain does.
        # While it drains, the high queue is looked at between its rounds (stages/lookout.py).
        lookout = None if self._handoffs is None else Lookout(
            self._admission, self._handoffs, [*active, *due], drain_deadline, d.intake,
            d.handoff, self._clock)
        launched: list[Bundle] = []  # by the drain
        deferred: list[Bundle] = []  # recorded by it to wait
        with LaunchQueue(self._launches, d.task_definition, d.launch) as launch:
            if due:
                launch(due)
            handed = {b.bundle_id for b in due}
            for ready in self._admission.drain(d.capacity - len(due), drain_deadline, d.intake,
                                               kind_room=room, shares=queue_slots,
                                               visible=visible, beat_seconds=LOOK_SECONDS,
                                               takers=takers, running_tenants=running,
                                               tenant_room=tenants_now.limits(),
                                               deferred=deferred):
                if ready:
                    launch(ready)
                    launched += ready
                    tenants_now.took(ready)
                    handed |= {b.bundle_id for b in ready}
                if lookout is not None:
                    lookout.after(ready)
                for b in ready:
                    if b.kind is not None and b.kind in kind_running:
                        kind_running[b.kind] += launch_slots(
                            b, self._policy.task_concurrency, self._policy.kind_limits)
            looked = lookout.waiting if lookout is not None else []
            # The drain's bundles that take tokens, due now: launched here once granted.
            at = self._clock()
            drained = [b for b in deferred if rate_limits.takes_tokens(b.bundle_id)
                       and b.next_attempt_at <= at]
            # And the due work held for its tokens as the tick began: a drain of many
            # seconds gives its buckets the time to fill, and a slot left free beside it
            # would idle until the next tick while its jobs are told nothing holds them.
            candidates = {b.bundle_id: b for b in [*waiting, *drained, *tokens.held_back()]
                          if b.bundle_id not in handed}
            at_end = tokens.admit(sorted([*looked, *candidates.values()],
                                         key=self._work.order))
            spare = self._work.spare(d.capacity - len(handed), at_end, room, handed,
                                     d.intake.follow_ons > 0, tenants_now.admit)
            spare = tokens.take(spare)
            if spare:
                launch(spare)
                due += spare
                tenants_now.took(spare)
            d.new_bundles = d.intake.bundles_recorded
        launching = {b.bundle_id for b in due}
        left_due = Counter(str(b.priority) for b in waiting if b.bundle_id not in launching)
        others_due += Counter(str(b.priority) for b in waiting if b.bundle_id not in launching
                              and b.bundle_id not in self._work.untaken)
        others_due += Counter(d.intake.footholds)  # recorded by this drain, due now
        d.due_bundles = len(due)
        self._reconciler.after_drain(d.reconcile)
        d.capacity_left = d.capacity - d.launch.bundles_launched
        if self._handoffs is not None and d.capacity_left <= 0:
            watch_urgent(self._store, self._admission, self._handoffs, self._clock,
                         (d.intake, d.handoff), active, drain_deadline, begun)
        for b in due:
            if b.kind is not None and b.kind in kind_running:
                kind_running[b.kind] += b.slots
        if self._arrays is not None:  # their parents' states, from what this tick recorded
            self._arrays.settle(d.arrays)
        # (With the work whose tokens came during the drain: its tenant's target and the
        # sheds asked for it count it, as the next tick will.)
        left = [b for b in [*waiting, *others, *granted, *unseen, *at_end]
                if b.bundle_id not in launching]
        if any(t != NONE for t in d.intake.tenants_followed) \
                or any(b.tenant for b in launched):
            tenants_now.make()  # its drain was the first to see tenants
        shares = tenants_now.shares
        d.tenanted = shares is not None
        if shares is not None:
            shares.more |= set(d.intake.tenants_followed)
        shed, wanting = ({}, None) if shares is None or not shares.shared else shares.sheds(
            left, launching | {b.bundle_id for b in launched}, d.intake.tenants_followed,
            free=d.capacity_left)
        return (TickSummary(
            at=self._clock(), active=d.active_bundles + d.launch.bundles_launched,
            max_running=self._policy.max_running_tasks,
            kinds={k: (n, self._policy.kind_limits[k]) for k, n in kind_running.items()},
            left_due=dict(left_due), blocked=frozenset(blocked), others_due=dict(others_due),
            fed_seconds=d.intake.follow_on_seconds / max(1, (takers + d.capacity)
                                                         * self._policy.task_concurrency)
            if takers else 0.0, small_jobs_left=d.intake.small_jobs_left,
            tenants={} if shares is None else shares.view(), shed=shed, wanting=wanting,
            rate_limits=tokens.waits()),
            self._revisions.current(), self._revisions.pinned_version)
