"""Follow-ons: the bundles of a large drain that running tasks take, with no launch of their own.

A drain whose backlog is more than its free task slots take at ``LONGJOBS_FOLLOW_ON_SECONDS``
of a task's time each (:mod:`dispatcher.stages.bundle`) launches one bundle of that size per
free slot, as any drain, and records the rest as *follow-ons* of its batch: PENDING and due,
ids ``<batch>-<n>`` in order (:func:`dispatcher.domain.bundles.follow_on_id`). A runner whose
bundle of the batch ends DONE takes the next follow-on (:meth:`FollowOns.take_follow_on`)
instead of exiting: a task that started early runs more of the batch, so neither the spread of
Fargate's start times nor the pacing of the launches decides when the batch ends, and a task's
start-up is paid once for many bundles.

Untaken follow-ons wait apart (index key :data:`~dispatcher.store.codec.FOLLOW_ONS_STATUS`):
other due work goes first, as it would before the queue's backlog. The tick launches them into
the slots that other due work leaves free (a task exited, a deploy ended the takes), and reads
the other due work first, so a batch's thousands never hide it. A follow-on given back to
PENDING after a run (a retry's backoff, a rerun, a failed relaunch) is due work as any. While
the last tick left such other work waiting, of the batch's priority or higher
(``TickSummary.others_due``; with no slot free, the tick looks at the oldest few), a take first
reads the oldest due (one Query): a task that can run it (its resources and tenant, no limited
kind) takes it instead of its next follow-on, in the same transaction (it joins the batch, so
the task goes on with the batch after it); one that cannot ends and exits, leaving its slot to
the tick for that work. A task whose batch has no follow-on left takes the oldest untaken
follow-on of another batch it can run (its resources and tenant, no limited kind; higher
priority first) and goes on with that batch, rather than exit and leave those follow-ons to new
tasks' starts (a second drain made while the first batch's tasks still ran, a stream's every
tick); so does one whose batch has none ready yet (a drain still recording, or one whose tick
died before it wrote the batch's end), rather than wait.

A take is one transaction of five or six items (and the ended bundle's pages' expiry, where
they fit):

- the bundle the runner ended, RUNNING -> DONE on its fence (:meth:`RunnerStore.end_and_take
  <dispatcher.store.runner.RunnerStore.end_and_take>`): a task holds one active bundle from its
  launch to its exit, so the tick, which counts active bundles as running tasks, never sees a
  task between two bundles as a free slot, and a take never runs a task past
  ``LONGJOBS_MAX_RUNNING_TASKS``; the runner ends it alone (its pointer set to expire) when it
  takes none;
- the follow-on, PENDING -> LAUNCHED at its next attempt on the taker's task and revision, as a
  launch would have left it; the task claims it as it claims any launched bundle, so every
  write of its run carries that fence;
- the task's pointer (``TASK#<arn>``), moved to it on condition that it still names the bundle
  that ended: the task's stop event and
  reconciliation settle whatever bundle the task runs at its end, and the pointer adds up how
  the runner ended the jobs of the bundles before (:class:`JobOutcomes`), which the stop
  reports with the last bundle's (its metrics count every job the task ran, at no read);
- the batch's cursor (``BATCH#<batch>``), moved to the first follow-on still PENDING as read:
  a hint of where to look, not a lock (the follow-on's own condition, PENDING at its attempt,
  is what keeps it from two tasks; a taker that lost one to another goes for one of the
  first few, by its task, so that they seldom collide again);
- a check that the last tick launched on the taker's revision (``task_definition`` on
  ``TICK#summary``), and a check that the deployment record (``DEPLOY#current``) is at the
  version that tick decided on: a deploy ends the takes at once (a stack update that changes
  the revision, with the first tick after it), and the rest of the batch launches on the new
  revision.

Reads: the last tick's summary (its revision, and the kinds with a limit: a follow-on of such
a kind, limited since it was recorded, is left to the tick, which counts its slots) and the
cursor (one BatchGetItem), the oldest due other work while the summary says some waits (one
Query, see above), then the next :data:`LOOKAHEAD` follow-ons (one BatchGetItem). A
follow-on not recorded yet (the drain records them as it admits) is skipped if a later one is
ready, and then launched by the tick when a slot frees; when none is ready the runner is told
to look again shortly (:attr:`Take.later`), until the drain has written how many follow-ons
the batch has (``batch_last`` on the cursor's item: :meth:`StageStore.end_batch
<dispatcher.store.recording.Recordings.end_batch>`), after which a runner past the last one
exits at once.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dispatcher.domain import lifecycle, rate_limits, tenants
from dispatcher.domain.bundles import (
    Bundle,
    BundleState,
    follow_on_batch,
    follow_on_id,
    has_follow_ons,
    task_can_run,
)
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.table import (
    Absent,
    Add,
    And,
    Check,
    Condition,
    ConditionFailed,
    Eq,
    Lacks,
    Le,
    Lt,
    Op,
    Or,
    Record,
    Remove,
    Set,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import status
from dispatcher.store.tenant_policies import TenantPolicies
from dispatcher.store.values import JobOutcomes

# Follow-ons read at once past the cursor (one BatchGetItem holds up to 100 keys).
LOOKAHEAD = 10
# Takes tried again when another taker took the follow-on first.
TAKE_TRIES = 10
# Takers choose among this many of the first PENDING follow-ons (see take_follow_on).
SPREAD = 8
# Due bundles read at once, oldest first, when the last tick left other work waiting.
OTHERS_READ = 10
# A task leaves its slot for due work it cannot run at most this often per such bundle: a
# tick (a minute) and a task's start (up to a minute) after the last one did, it is running
# or the tick launched other work into that slot.
YIELD_SECONDS = 180.0
# A task with no follow-on to take may wait for the next tick's while the last tick fed each
# task at least this many seconds of its time (a stream, not a trickle: a trickle's tasks
# end, and the capacity follows it down), or left small jobs in the queue for want of slots.
STREAM_FED_SECONDS = 15.0


@dataclass(frozen=True)
class Take:
    """What a take found: ``bundle``, LAUNCHED on the taker's task (claim it next), or None;
    ``later``: none is ready yet and the batch may not be over (look again shortly);
    ``fed_at``: none anywhere, but the last tick, ended then (the table's clock), fed the
    running tasks as a stream's do (:data:`STREAM_FED_SECONDS`): the next tick's may come,
    and the runner may look again for a while (``LONGJOBS_STREAM_WAIT_SECONDS``) rather
    than exit and leave them to a new task's start."""

    bundle: Bundle | None
    later: bool = False
    fed_at: float | None = None


class FollowOns(TenantPolicies):
    """The runner's take of its batch's next follow-on."""

    def take_follow_on(self, done: Bundle, task_arn: str,
                       ended: JobOutcomes | None = None, ending: Sequence[Op] = (),
                       before: Callable[[], bool] | None = None) -> Take:
        """Take the next PENDING follow-on of ``done``'s batch onto ``task_arn``, whose run of
        ``done`` is over with ``ended`` (how its runner ended its jobs: added up on the
        pointer for the task's stop to report). Take(None) when there is none to take: not
        of a batch, the batch taken to its end, the pointer moved on, or the tick launching
        another revision.

        ``ending``: the writes that end ``done`` DONE (its move first), made in the take's
        own transaction. Until a take commits, the task's slot is held by ``done`` (RUNNING,
        so counted by the tick); from then on by the follow-on: the tick never sees a task
        between two bundles as a free slot, so takes never run a task past the limit. The
        caller makes them alone when no follow-on is taken. If the move's condition fails,
        :class:`EndRefused` is raised (the caller finds out why: its fence lost, or jobs
        handed to ``done`` meanwhile). ``before``: called once a take is about to be made,
        before its transaction (the runner writes its last results then: with no take, they
        go with its own ending write, in one transaction); if it says False, no take is
        made (Take(None)).

        ``done`` of no batch (a bundle launched alone: a drain too small to follow on, a
        retry, an urgent job) takes the oldest untaken follow-on of a batch, as a task whose
        batch is over does: a stream's every tick cuts its backlog into follow-ons for the
        tasks already running, whatever bundle each runs."""
        batch, revision = done.batch, done.task_definition
        if revision is None:
            return Take(None)
        ended = ended or JobOutcomes()
        if batch is None:
            tick = self.table.get(r.TICK_KEY)
            if tick is None or tick.task_definition != revision:
                return Take(None)
            summary = TickSummary.from_json(tick.summary)
            if summary is not None and not (summary.fed_seconds or summary.small_jobs_left
                                            or summary.left_due):
                return Take(None)  # the last tick cut none and left none: no Query
            if summary is not None and summary.others_waiting(str(done.priority)):
                return Take(None)  # other due work goes first: its slot is the tick's
            return self._take_other_batch(done, task_arn, tick, _limited(tick), ended, ending,
                                          before)
        for tries in range(TAKE_TRIES):
            # The last tick's word and the cursor, in one read.
            read = {rec.pk: rec for rec in self.table.get_many([r.TICK_KEY,
                                                                 r.batch_key(batch)])}
            tick, cursor = read.get(r.TICK_KEY), read.get(r.batch_key(batch))
            if tick is None or tick.task_definition != revision:
                return Take(None)  # a deploy (or no tick yet): the tick launches the rest
            summary = TickSummary.from_json(tick.summary)
            limited = _limited(tick)
            if summary is not None and summary.others_waiting(str(done.priority)):
                other = self._other_due(done, limited)
                if other is not None and not task_can_run(done, other):
                    if self._yield_to(other):
                        return Take(None)  # its slot is the tick's to launch that work in
                    other = None  # another task left its slot for it: this one goes on
                if other is not None:
                    try:
                        if self._take(other, done, task_arn, tick, batch, None, ended,
                                      ending, before):
                            return Take(other)
                    except _Refused:
                        return Take(None)
                    continue  # another taker or the tick came first: read again
            if not has_follow_ons(batch):
                # A batch of none: other due work was all it takes, or another batch's.
                return self._take_other_batch(done, task_arn, tick, limited, ended, ending,
                                              before)
            first = int(cursor.batch_next or 0) if cursor is not None else 0
            last = int(cursor.batch_last) if cursor is not None \
                and cursor.batch_last is not None else None
            end = first + LOOKAHEAD if last is None else min(first + LOOKAHEAD, last)
            if end <= first:  # every follow-on of the batch taken or launched
                return self._take_other_batch(done, task_arn, tick, limited, ended, ending,
                                              before)
            ids = [follow_on_id(batch, n) for n in range(first, end)]
            found = {rec.pk: rec for rec in self.table.get_many([r.bundle_key(i) for i in ids])}
            recs = [found.get(r.bundle_key(i)) for i in ids]
            pending = [n for n, rec in enumerate(recs)
                       if rec is not None and rec.state == str(BundleState.PENDING)]
            # The first PENDING (they shrink as the batch runs out: taken in order, the tasks
            # end together); after a take lost to another taker (a batch's tasks end their
            # bundles together), one of the first SPREAD by this task, so that they seldom
            # want the same one again.
            spread = min(SPREAD, len(pending)) if tries else 1
            pick = pending[zlib.crc32(task_arn.encode()) % spread] if pending else None
            if pick is None:
                # Those not PENDING were taken or launched; one missing or RECORDING is not
                # recorded yet, or never will be (its recording failed) once the batch's end
                # is known. The cursor moves past what is done; none done: look again later.
                seen = [n for n, rec in enumerate(recs) if rec is not None
                        and rec.state != str(BundleState.RECORDING)]
                upto = len(ids) if last is not None else seen[-1] + 1 if seen else 0
                if not upto:  # none ready yet: another batch's, if one is, else look again
                    elsewhere = self._take_other_batch(done, task_arn, tick, limited, ended,
                                                       ending, before)
                    return elsewhere if elsewhere.bundle is not None else Take(None, later=True)
                self.table.write(self._cursor(batch, first + upto))
                continue  # read again
            rec = recs[pick]
            assert rec is not None
            bundle = r.record_bundle(rec)
            if bundle.kind in limited:  # a limit set since it was recorded: the tick counts it
                return Take(None)
            if not tries and self._gives_up(done, summary):
                return Take(None)  # its tenant is asked to give up slots: this one does
            try:
                # The cursor: to the first still PENDING as read, this one taken; with none,
                # just past this one (those after it may not be recorded yet).
                to = first + next((n for n in pending if n != pick), pick + 1)
                if self._take(bundle, done, task_arn, tick, batch, to, ended, ending, before):
                    return Take(bundle)
            except _Refused:
                return Take(None)
        return Take(None, later=True)  # other takers kept coming first: look again shortly

    def _take_other_batch(self, done: Bundle, task_arn: str, tick: Record, limited: set[str],
                          ended: JobOutcomes, ending: Sequence[Op],
                          before: Callable[[], bool] | None) -> Take:
        """``done``'s batch has no follow-on left to take (or none ready yet, its drain's
        end not written: the drain still records them, or its tick died): the oldest untaken
        follow-on of another batch that this task can run (its resources and tenant, no limited
        kind), higher priority first, taken as its own batch's would be; the task goes on with
        that batch. Without it, the task would exit and that batch's follow-ons wait for the
        tick to launch them into the slots so freed: a Fargate start each, for work a running
        task could do now (a second drain while the first batch's tasks run; a stream's every
        tick). One Query, made only then. Take(None) if there is none (or another taker came
        first: the task ends, and the tick launches the rest).

        A tenant's task reads its own tenant's only (a filter on the bundles' keys, which
        name their tenant): the oldest follow-ons of all are other tenants' when its batch is
        younger than theirs (a later drain), and a task that saw only those would end,
        leaving its tenant's work to wait for the tick while the others' tasks run on. The
        filter reads past the others' rows in the same Query, which pages on by itself: its
        Limit counts the rows read, not those kept, so the table adapter asks for 10 a request
        and a take behind many of the others' follow-ons makes a request per 10 of them (a
        larger page would cost more read units in the usual case, its own ones first)."""
        rows = self.table.query(r.FOLLOW_ONS_STATUS, at_most=r.iso(self.clock()),
                                limit=OTHERS_READ, where=None if done.tenant is None
                                else r.tenant_bundles(done.tenant))
        others = [b for b in map(r.record_bundle, rows)
                  if follow_on_batch(b.bundle_id) != done.batch]
        fits = [b for b in others if b.kind not in limited and task_can_run(done, b)]
        other = min(fits, key=lambda b: (PRIORITY_ORDER.index(b.priority), b.next_attempt_at),
                    default=None)
        if other is not None and self._gives_up(done, TickSummary.from_json(tick.summary)):
            return Take(None)  # its tenant is asked to give up slots: this one does
        if other is not None:
            try:
                if self._take(other, done, task_arn, tick, follow_on_batch(other.bundle_id),
                              None, ended, ending, before):
                    return Take(other)
            except _Refused:
                return Take(None)
        # None left, or another taker came first: a stream's task looks again, unless the
        # last tick left other due work waiting for a slot (this one's, if it exits), or a
        # follow-on waits that this task cannot run but a task in its slot could (of other
        # resources, or of a limited kind with room, which the tick launches): a slot held
        # empty for the next tick's would keep it from that one. One task leaves its slot
        # for it (_yield_to); the others wait as before.
        summary = TickSummary.from_json(tick.summary)
        if summary is None or summary.others_due \
                or not (summary.fed_seconds >= STREAM_FED_SECONDS or summary.small_jobs_left):
            return Take(None)
        blocked = next((b for b in others if b not in fits and _has_room(summary, b.kind)),
                       None)
        if other is None and blocked is not None and self._yield_to(blocked):
            return Take(None)
        return Take(None, fed_at=summary.at)

    def _other_due(self, done: Bundle, limited: set[str]) -> Bundle | None:
        """The oldest due bundle, other than the untaken follow-ons, of ``done``'s priority or
        higher, of no limited kind (the tick counts those) and taking no rate limit's tokens
        (the tick takes them as it launches), if any: a batch's running
        tasks take such work before their follow-ons, as the tick launches it first (a
        follow-on given back to PENDING, a retry, a scheduled job whose time came, a released
        dependent, a launch that failed). One Query, made only while the last tick left such
        work waiting (``TickSummary.others_due``)."""
        rank = PRIORITY_ORDER.index(done.priority)
        rows = self.table.query(r.bundle_status(BundleState.PENDING),
                                at_most=r.iso(self.clock()), limit=OTHERS_READ)
        due = [b for b in map(r.record_bundle, rows)
               if PRIORITY_ORDER.index(b.priority) <= rank and b.kind not in limited
               and not rate_limits.takes_tokens(b.bundle_id)]
        return min(due, key=lambda b: (PRIORITY_ORDER.index(b.priority), b.next_attempt_at),
                   default=None)

    def _gives_up(self, done: Bundle, summary: TickSummary | None) -> bool:
        """Whether this task gives up its slot rather than take the next bundle it found, as
        the last tick asked that many of its tenant's tasks to (past its cap, or past its
        share while others wait below theirs: dispatcher/stages/tenant_slots.py): one
        conditional add, made only when asked."""
        name = done.tenant or tenants.NONE
        asked = summary.shed.get(name, 0) if summary is not None else 0
        if summary is None or asked <= 0:
            return False
        share = summary.tenants.get(name)
        over_cap = share is not None and share.max_running is not None \
            and share.tasks > share.max_running
        # Past its share, only for work of this task's priority or higher: the tick launches
        # by priority first, and would give the slot back to this tenant's higher work.
        if not over_cap and (summary.wanting is None or PRIORITY_ORDER.index(done.priority)
                             < PRIORITY_ORDER.index(Priority(summary.wanting))):
            return False
        return self.shed(name, summary.at, asked)

    def _yield_to(self, other: Bundle) -> bool:
        """Whether this task leaves its slot to the tick for ``other``, due work it cannot run:
        one task does (a mark on ``other``, once every :data:`YIELD_SECONDS` while it waits),
        the others go on with their batch."""
        t = self.clock()
        try:
            self.table.write(Update(r.bundle_key(other.bundle_id), [Set("yielded_at", t)], And(
                Eq("state", str(BundleState.PENDING)), Eq("attempt", other.attempt),
                Or(Lacks("yielded_at"), Lt("yielded_at", t - YIELD_SECONDS)))))
        except ConditionFailed:
            return False
        return True

    def _cursor(self, batch: str, to: int) -> Update:
        """The cursor to ``to``: the follow-ons below it were seen taken or launched (or not
        recorded yet while a later one was ready: the tick launches those). Not
        conditioned on where it was: takers never wait for each other on it (only the
        follow-on's own condition keeps it from two); one that read earlier may move it back
        a little, which costs a later taker a look at a few taken ones, never a follow-on."""
        return Update(r.batch_key(batch), [Set("batch_next", to), *self._expires(self.clock())])

    def _take(self, bundle: Bundle, done: Bundle, task_arn: str, tick: Record, batch: str,
              to: int | None, ended: JobOutcomes, ending: Sequence[Op],
              before: Callable[[], bool] | None = None) -> bool:
        """The take's transaction: True if it committed (``bundle`` is then as written);
        False if another taker or a launch came first (read again); _Refused if this task
        may take no more: its pointer moved on, the tick launches another revision, or
        ``before`` said no;
        EndRefused if ``ending``'s move of ``done`` was refused. ``to``: the cursor's move
        (a follow-on); None for other due work, which joins ``batch`` (its runner takes the
        batch's follow-ons next) and must be due still."""
        lifecycle.check_bundle(bundle.bundle_id, BundleState.PENDING, BundleState.LAUNCHED)
        if before is not None and not before():
            raise _Refused
        revision = str(tick.task_definition)
        t = self.clock()
        moving: Condition = And(Eq("state", str(BundleState.PENDING)),
                                Eq("attempt", bundle.attempt))
        if to is None:
            moving = And(moving, Le("next_attempt_at", t))
        ops: list[Op] = [
            Update(r.bundle_key(bundle.bundle_id), [
                *status(r.bundle_status(BundleState.LAUNCHED), t),
                Set("attempt", bundle.attempt + 1), Set("task_arn", task_arn),
                Set("task_definition", revision), Remove("launch_id"),
                # One job at a time after an ambiguous stop (a settle's ``serial``) stays so.
                Set("slots", 1) if bundle.slots == 1 else Remove("slots"),
                *([Set("batch", batch)] if to is None else [])],
                moving),
            Update(r.task_key(task_arn), [Set("bundle_id", bundle.bundle_id),
                                          Remove("expires_at"),
                                          Add("ran_succeeded", ended.succeeded),
                                          Add("ran_failed", ended.failed),
                                          # the runner's whole count so far, not an addition
                                          Set("ran_usage", ended.usage.as_dict())],
                   Eq("bundle_id", done.bundle_id)),
            *([self._cursor(batch, to)] if to is not None else []),
            Check(r.TICK_KEY, Eq("task_definition", revision)),
        ]
        checks = len(ops) - 1  # from the tick's check on: the checks that refuse the take
        # The deployment record as the tick found it: none (version 0), or at its version;
        # a tick whose revision is not decided on the record (the latest ACTIVE one) says
        # no version, and its next tick's revision is what a deploy changes.
        if tick.version is not None:
            ops.append(Check(r.DEPLOY_KEY, Absent() if not tick.version
                             else Eq("version", tick.version)))
        end = len(ops)  # the move of ``done``, if the caller ends it here
        ops += ending
        try:
            self._transact_retrying(ops)
        except TransactionCancelled as exc:
            failed = exc.failed_conditions()
            if ending and end in failed:
                raise EndRefused(done.bundle_id) from None
            if failed & {1, *range(checks, end)}:  # the pointer, the tick, the deployment
                raise _Refused from None
            return False
        bundle.state, bundle.attempt, bundle.task_arn = BundleState.LAUNCHED, \
            bundle.attempt + 1, task_arn
        bundle.task_definition, bundle.launch_id = revision, None
        bundle.slots = 1 if bundle.slots == 1 else 0
        bundle.updated_at, bundle.batch = t, batch
        return True


def _limited(tick: Record) -> set[str]:
    """The kinds with a limit, as the last tick's summary says: a follow-on of one of them is
    the tick's to launch, which counts its slots."""
    summary = TickSummary.from_json(tick.summary)
    return set(summary.kinds) if summary is not None else set()


def _has_room(summary: TickSummary | None, kind: str | None) -> bool:
    """Whether the last tick left ``kind`` room to start more jobs (of no limit: always)."""
    running, limit = (summary.kinds.get(kind) if summary is not None and kind is not None
                      else None) or (0, 1)
    return running < limit


class EndRefused(Exception):
    """The take's move of the ended bundle to DONE was refused (its fence or its handed
    jobs moved on): nothing of the take was written."""

    def __init__(self, bundle_id: str) -> None:
        self.bundle_id = bundle_id
        super().__init__(f"bundle {bundle_id} could not be ended DONE with the take")


class _Refused(Exception):
    """This task takes no more follow-ons (see :meth:`FollowOns._take`)."""
