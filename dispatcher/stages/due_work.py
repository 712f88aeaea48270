"""Due work: which due bundles a tick launches into its free slots, and in what order.

The tick (dispatcher/stages/tick.py) reads the due PENDING bundles, fits them to the limited
kinds' room, shares the free slots between priorities (with the queues' backlogs), and at the
drain's end gives the slots its shares left unused to the due work held back. The follow-ons
no task has taken yet wait apart (dispatcher.store.follow_ons): they are read only for the
slots that other due work leaves free, and come after it within a priority.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.fairness import allocate
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.launch import launch_slots
from dispatcher.stages.policy import TickPolicy
from dispatcher.store import StageStore

log = logging.getLogger(__name__)

# Due bundles read beyond the free slots. Those of a kind with no room left are left out of the
# read; a kind whose oldest due bundle does not fit its room is left out of a next read, so a
# backlog of one kind never hides the due bundles of the others (see DueWork.due).
DUE_LOOKAHEAD = 200
# Pages of due bundles read past those of tenants at their caps (DueWork.due).
TENANT_PAGES = 4
# With no slot free, the oldest due bundles looked at for the summary (DueWork.others_due),
# and the pages read past them while they hold none but the running tenants' work.
OTHERS_PEEK = 10
TENANT_PEEK = 100



# Tenants the untaken follow-ons' read passes over at most: each is a clause of the Query's
# filter (four operators, about 35 bytes), which DynamoDB bounds at 4 KB and 300 operators
# ("Expression parameters": https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/
# Constraints.html#limits-expression-parameters); the limited kinds with no room left out of
# the same read take about four each, and are counted against FILTER_OPERATORS first (40
# tenants' clauses measured 1,347 bytes rendered by the table adapter).
APART_MOST = 40
FILTER_OPERATORS = 240


def taking_tenants(live: Iterable[Bundle], revision: str | None) -> tuple[str, ...]:
    """The tenants whose tasks take their own untaken follow-ons as their bundles end: those
    with a bundle running on ``revision`` (the one the tick launches: a task of another takes
    nothing), the most tasks first, :data:`APART_MOST` at most."""
    counts = Counter(b.tenant for b in live if b.tenant and b.task_definition == revision)
    return tuple(str(t) for t, _ in counts.most_common(APART_MOST))


def _held_by_none(bundle: Bundle) -> bool:
    return False


class DueWork:
    """The tick's choice of due work; :attr:`untaken` is the current tick's read of the
    untaken follow-ons (:meth:`begin` empties it as a tick begins)."""

    def __init__(self, store: StageStore, policy: TickPolicy,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._policy = policy
        self._clock = clock
        # This tick's read of the due follow-ons no task has taken yet (see due): their ids,
        # whether it was made, and whether it returned as many as it asked for.
        self.untaken: set[str] = set()
        self.follow_read = self.follow_read_full = False
        self._left_out: set[str] = set()  # the kinds the due read left out (no room)
        # Tenants whose running tasks take their own follow-ons (dispatcher.store.follow_ons),
        # set by the tick: the untaken follow-ons are read past theirs first (see _follow_ons).
        self.apart: tuple[str, ...] = ()
        self._held: Callable[[Bundle], bool] = _held_by_none

    def begin(self, apart: tuple[str, ...] = (),
              held: Callable[[Bundle], bool] | None = None) -> None:
        """A new tick: nothing of the follow-ons read yet; ``apart``: see :attr:`apart`;
        ``held``: whether a bundle's tenant is at its cap (see :meth:`fit`)."""
        self.untaken = set()
        self.follow_read = self.follow_read_full = False
        self._left_out = set()
        self.apart = apart
        self._held = held or _held_by_none

    def _follow_ons(self, limit: int, left_out: set[str]) -> list[Bundle]:
        """The oldest ``limit`` due follow-ons no task has taken, those of the tenants
        :attr:`apart` read past first: a tenant none of whose tasks runs has follow-ons only
        the tick launches, and a later drain's of its would otherwise wait behind every older
        one of the others' (whose own tasks take them). Then, if that read was not full, the
        oldest of all, so a free slot never idles beside them. One read, or two."""
        now = self._clock()
        # Those of the most tasks first, as many as the filter has room for beside the kinds.
        apart = self.apart[:max(0, (FILTER_OPERATORS - 4 * len(left_out)) // 4)]
        first = self._store.due_bundles(limit, now, left_out, follow_ons=True,
                                        apart=apart) if apart else []
        if len(first) >= limit:
            return first
        known = {b.bundle_id for b in first}
        return first + [b for b in self._store.due_bundles(limit, now, left_out,
                                                           follow_ons=True)
                        if b.bundle_id not in known]

    def kind_room(self, active: list[Bundle]) -> dict[str, int]:
        """Jobs each limited kind may still start: its limit less the slots of its active
        bundles (each counts the jobs it can run at once)."""
        room = dict(self._policy.kind_limits)
        for b in active:
            if b.kind in room:
                room[b.kind] -= b.slots
        return room

    def due(self, capacity: int, room: Mapping[str, int],
            keep: Callable[[list[Bundle]], list[Bundle]] | None = None
            ) -> tuple[list[Bundle], set[str]]:
        """Due PENDING bundles that may launch now as far as their kinds' room goes, higher
        priority first, then oldest due, each with its ``slots`` for this launch
        (:func:`launch_slots`); and the kinds blocked: whose first due bundle in that order does
        not fit the room left. A blocked kind's later bundles wait behind it, so narrow bundles
        never pass a wide one forever: it launches once enough of its kind's running jobs end.

        The read returns the oldest due bundles; a blocked kind is left out of a next read (as
        a kind with no room is from the first), so a backlog of it cannot hide the others; and
        when a full read holds no bundle of some priority, a next read looks at those
        priorities only, so older bundles of one priority cannot hide another's from
        :meth:`_share`. At most one read more per limited kind, and one for the priorities.
        ``keep``: the bundles of those that their tenants' caps let start; while a full read
        holds fewer than ``capacity`` of those (a capped tenant's backlog), the next page is
        read, :data:`TENANT_PAGES` at most."""
        if capacity <= 0:
            return [], set()
        left_out = {kind for kind, left in room.items() if left <= 0}
        limit = capacity + DUE_LOOKAHEAD
        pool: dict[str, Bundle] = {}
        only: list[Priority] | None = None
        after, pages = None, 0
        while True:
            found, last = self._store.due_page(limit, self._clock(), left_out, only,
                                               after=after)
            pool.update((b.bundle_id, b) for b in found if b.bundle_id not in pool)
            fits, blocked = self.fit(sorted(pool.values(), key=self.order), room)
            if len(found) < limit:
                break
            if keep is not None and len(keep(fits)) < capacity and pages < TENANT_PAGES:
                after, pages = last, pages + 1  # past a capped tenant's backlog
                continue
            after = None
            if len(fits) < capacity and not blocked <= left_out:
                left_out |= blocked
                continue
            seen = {b.priority for b in pool.values()}
            if only is not None or seen.issuperset(PRIORITY_ORDER):
                break
            only = [p for p in PRIORITY_ORDER if p not in seen]
        if len(fits) >= capacity:
            self._left_out = left_out | blocked
            return fits, blocked
        # Slots that no other due work fills: the follow-ons no task has taken yet (their
        # batches' tasks take the rest), oldest first, after the other due work of their
        # priority.
        follow = self._untaken(capacity - len(fits), left_out | blocked)
        return self.fit(sorted([*pool.values(), *follow], key=self.order), room)

    def _untaken(self, slots: int, left_out: set[str]) -> list[Bundle]:
        """The due follow-ons no task has taken yet, for ``slots`` (and a look ahead). Read
        from the index, which does not hold a bundle's batch: they are told apart by the read
        they came from (:attr:`untaken`)."""
        limit = slots + DUE_LOOKAHEAD
        follow = self._follow_ons(limit, left_out)
        self.follow_read, self.follow_read_full = True, len(follow) >= limit
        self.untaken = {b.bundle_id for b in follow}
        return follow

    def with_untaken(self, capacity: int, waiting: list[Bundle], room: Mapping[str, int]
                     ) -> tuple[list[Bundle], set[str]]:
        """``waiting`` (what :meth:`due` returned, which filled the slots) with the untaken
        follow-ons read too, in the tick's order, fitted to ``room``: with tenants to share
        the slots among, a tenant whose own tasks all ended (a deploy, a shed, a crash) has
        follow-ons that no task of its takes, and its turn may come before the other work
        (dispatcher.stages.tenant_slots orders them). One read more, made only then. The
        kinds blocked anew (a follow-on fitted before a wide bundle) come back too."""
        if self.follow_read or capacity <= 0:
            return waiting, set()
        follow = self._untaken(capacity, self._left_out)
        known = {b.bundle_id for b in waiting}
        return self.fit(sorted([*waiting, *(b for b in follow if b.bundle_id not in known)],
                               key=self.order), room)

    def order(self, b: Bundle) -> tuple[int, bool, float]:
        """The tick's order of due bundles: higher priority first; within a priority, the
        follow-ons no task has taken yet after the rest (as the queue's backlog is: their
        batches' tasks take them meanwhile), then oldest due first."""
        return PRIORITY_ORDER.index(b.priority), b.bundle_id in self.untaken, \
            b.next_attempt_at

    def spare(self, spare: int, held_back: list[Bundle], room: dict[str, int],
               handed: set[str], recorded_follow_ons: bool,
               admit: Callable[[list[Bundle]], list[Bundle]] | None = None) -> list[Bundle]:
        """The slots the drain left free (a queue had fewer jobs than its share, or its jobs
        shared a bundle) go to due work after all: the due bundles the shares held back, in
        order, then the untaken follow-ons (those this drain recorded too). ``room`` is what
        the kinds have left; the bundles' slots are taken from it. ``admit``: the tenants'
        caps and order (dispatcher.stages.tenant_slots), applied to what fits."""
        if spare <= 0:
            return []
        out = self.fit(held_back, room)[0]
        out = (out if admit is None else admit(out))[:spare]
        # Those :meth:`due` read are among ``held_back`` already; read again only if it did
        # not read them, its read was full, or this drain recorded more.
        if len(out) < spare and (recorded_follow_ons or not self.follow_read
                                 or self.follow_read_full):
            taken = handed | {b.bundle_id for b in out}
            follow = [b for b in self._follow_ons(spare - len(out) + len(taken),
                                                  {k for k, n in room.items() if n <= 0})
                      if b.bundle_id not in taken]
            left = dict(room)
            for b in out:
                if b.kind in left:
                    left[b.kind] -= b.slots
            out += self.fit(follow, left)[0]
            out = (out if admit is None else admit(out))[:spare]
        for b in out:
            if b.kind in room:
                room[b.kind] -= b.slots
        return out

    def others_due(self, room: Mapping[str, int],
                   keep: Callable[[list[Bundle]], list[Bundle]] | None = None,
                   seek: Collection[str | None] | None = None, *,
                   owed: Collection[str | None] = (),
                   follow_ons: bool = False) -> list[Bundle]:
        """With no slot free: the due bundles other than untaken follow-ons (a look at the
        oldest few), for the summary: the batches' tasks read it and leave their follow-ons
        for that work first (dispatcher.store.follow_ons). ``keep``: as for :meth:`due`, a
        capped tenant's backlog is paged past. ``seek`` (on a stack with tenants): the
        tenants whose tasks run; while the look holds none of another tenant's, it pages on
        (:data:`TENANT_PAGES` of :data:`TENANT_PEEK`), so a tenant with no task whose due work
        is younger than theirs is seen, and given its share and reserve. ``owed``: the
        tenants short of their reserves; it pages on (as far) until it holds the work of each,
        so another tenant's older work does not hide a reserve's. ``follow_ons``: the
        untaken follow-ons instead (a tenant with no task may have nothing else due; a
        running tenant's count towards its reserve, so none is read past)."""
        left_out = {kind for kind, left in room.items() if left <= 0}
        out: list[Bundle] = []
        after = None
        pages = TENANT_PAGES if keep is not None or seek is not None else 0
        for page in range(1 + pages):
            found, after = self._store.due_page(
                OTHERS_PEEK if not page else TENANT_PEEK, self._clock(), left_out, after=after,
                follow_ons=follow_ons)
            out += found
            if len(found) < (OTHERS_PEEK if not page else TENANT_PEEK):
                break
            kept = keep is None or bool(keep(out))
            sought = seek is None or any(b.tenant not in seek for b in out)
            if kept and sought and set(owed) <= {b.tenant for b in out}:
                break
        return out

    def fit(self, order: list[Bundle], room: Mapping[str, int]) -> tuple[list[Bundle], set[str]]:
        """``order``'s bundles that their kinds' room lets start, in order, and the kinds
        blocked (see :meth:`due`). A bundle whose tenant is at its cap launches nowhere this
        tick (the caps only tighten as it launches): it takes none of its kind's room and
        blocks no kind, or a capped tenant's backlog of a kind would hold every other
        tenant's work of it, and the drain's, behind work that cannot start, for as long as
        the cap stands (and its own jobs be told they wait for the kind's room)."""
        left = dict(room)
        fits: list[Bundle] = []
        blocked: set[str] = set()
        for b in order:
            b.slots = launch_slots(b, self._policy.task_concurrency, self._policy.kind_limits)
            if b.kind in left:
                if b.kind in blocked:
                    continue
                if left[b.kind] < b.slots:
                    if not self._held(b):
                        blocked.add(b.kind)
                    continue
                if not self._held(b):
                    left[b.kind] -= b.slots
            fits.append(b)
        return fits, blocked

    def share(self, capacity: int, waiting: list[Bundle], visible: Mapping[Priority, int],
              order: Callable[[list[Bundle], Mapping[Priority, int]], list[Bundle]]
              | None = None) -> tuple[list[Bundle], dict[Priority, int]]:
        """Share the free slots between priorities: the due bundles to launch now (within a
        priority, those waiting in the table go first, oldest due first) and the slots each
        priority's queue may take. When levels compete for more than the slots, the shares
        follow :func:`dispatcher.domain.fairness.allocate`, its credit carried in the table
        from tick to tick, so every level with work gets a slot within a bounded number of
        ticks (:func:`~dispatcher.domain.fairness.patience`), even at one free slot a tick.
        ``order``: how to order ``waiting`` once each level's slots are known (the tenants'
        turns, dispatcher.stages.tenant_slots)."""
        due = Counter(b.priority for b in waiting)
        demand = {p: due[p] + visible.get(p, 0) for p in PRIORITY_ORDER}
        if sum(demand.values()) > capacity and sum(1 for n in demand.values() if n) > 1:
            slots, credit = allocate(capacity, demand, self._policy.priority_weights,
                                     self._store.priority_credit())
            try:
                self._store.save_priority_credit(credit)
            except TableUnavailable as exc:
                # This tick's shares stand; only the credit it carries over is lost, which the
                # next ticks' sharing makes up for: no reason to fail the tick.
                log.error("saving the priorities' credit failed",
                          extra={"reason": exc.reason})
        else:  # no competition: each level gets what it has work for
            slots, left = {}, capacity
            for p in PRIORITY_ORDER:
                slots[p] = min(demand[p], left)
                left -= slots[p]
        if order is not None:
            waiting = order(waiting, slots)
        taken = dict.fromkeys(PRIORITY_ORDER, 0)
        launch: list[Bundle] = []
        for b in waiting:
            if taken[b.priority] < slots[b.priority]:
                taken[b.priority] += 1
                launch.append(b)
        return launch, {p: slots[p] - taken[p] for p in PRIORITY_ORDER}
