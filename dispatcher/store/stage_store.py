"""The stages' role: lease, admission, launches, stopped tasks, overdue jobs, the deployment.

Every state change is a conditional write: the item must still be in the state the writer read
(plus the fence: attempt, task ARN, launch id), and :mod:`dispatcher.domain.lifecycle` must allow
the transition. A writer with a stale view loses the write instead of overwriting.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping

from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.costs import TaskCost
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState, Priority
from dispatcher.domain.launches import Launch, LaunchState
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.table import (
    Absent,
    Add,
    And,
    Check,
    Condition,
    ConditionFailed,
    Eq,
    Exists,
    Gt,
    InvalidTransaction,
    Lacks,
    Lt,
    Op,
    Or,
    Put,
    Record,
    Remove,
    Set,
    TableUnavailable,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store import index
from dispatcher.store.array_jobs import ArrayRecords
from dispatcher.store.base import job_state, status
from dispatcher.store.deployments import Deployments
from dispatcher.store.handing import Handing
from dispatcher.store.held import HeldRetries
from dispatcher.store.label_index import LabelIndex
from dispatcher.store.rate_buckets import RateBuckets
from dispatcher.store.recording import PROBE_KEY, Recordings
from dispatcher.store.runner import handed_as_read
from dispatcher.store.schedule_fires import ScheduleFires
from dispatcher.store.state_writes import (
    bundle_actions,
    expire_pages_later,
    fit_pages,
    job_updates,
    page_expiry,
    pointer_expiry,
    update_chunks,
)
from dispatcher.store.task_bills import TaskBills
from dispatcher.store.tenant_policies import TenantPolicies
from dispatcher.store.values import JobUpdate, LaunchOutcome, Lease
from dispatcher.store.waiters import Waiters

# A DONE launch (LAUNCH#): only a STARTING one is ever read again (a crashed tick's launch is
# retried from it, see orphaned_launches); a DONE one is kept this long to look at, then
# deleted. Its id is never reused: it names the bundles' next attempt, which only grows.
LAUNCH_TTL_SECONDS = 7 * 86400


# The tick's summary (TICK#summary) outlives the last tick by this much.
TICK_SUMMARY_TTL_SECONDS = 86400


log = logging.getLogger(__name__)

# A tick's summary as it saves it: the summary, the revision it launched, the deployment
# record's version that revision was decided on (StageStore.save_tick_summary).
SavedSummary = tuple[TickSummary, str | None, int | None]


class StageStore(Recordings, HeldRetries, Deployments, Handing, ArrayRecords, Waiters,
                 ScheduleFires, TaskBills, LabelIndex, TenantPolicies, RateBuckets):
    """What the tick and the task-event handler ask of the table (the dry run wraps this)."""

    # -- lease ----------------------------------------------------------------------------------
    def acquire_lease(self, owner: str, seconds: float, *,
                      one_at_a_time: bool = False) -> Lease | None:
        """Take the single dispatcher lease unless another live owner holds it (None then).

        ``one_at_a_time``: the platform never runs two of these ticks at once (the stack's
        tick function has a reserved concurrency of 1: "Sets the maximum number of
        simultaneous executions for a function ... prevents it from scaling beyond that
        level", https://docs.aws.amazon.com/lambda/latest/dg/API_PutFunctionConcurrency.html).
        A lease such a tick holds while another of them runs is then one whose tick has died
        (its Lambda killed, out of memory, timed out) without giving it back, and is taken
        over at once instead of after its term (up to 16 minutes of a 15-minute tick with
        nothing launched). A lease anything else holds (a tick run by hand, local mode) is
        respected to its term, as it always was.

        An update, not a put: the item keeps what the last holder left on it for the next
        (:class:`~dispatcher.store.values.Lease`), returned by this same call."""
        t = self.clock()
        free = Or(Absent(), Lt("lease_until", t), Eq("owner", owner))
        try:
            rec = self.table.write(Update(r.LEASE_KEY, [
                Set("owner", owner), Set("lease_until", t + seconds), Set("updated_at", t),
                Set("one_at_a_time", "true") if one_at_a_time else Remove("one_at_a_time"),
                Add("lease_count", 1)],
                Or(free, Eq("one_at_a_time", "true")) if one_at_a_time else free))
        except ConditionFailed:
            return None
        assert rec is not None  # an Update returns the item
        number = int(rec.lease_count or 0)
        return Lease(owner, rec.swept_at, number,
                     recordings_left=rec.clean_at is None or int(rec.clean_at) != number - 1,
                     taken_over=number > 1 and (rec.released_at is None
                                                or int(rec.released_at) != number - 1),
                     tenanted=rec.tenanted_at is not None)

    def release_lease(self, owner: str, *, swept_at: float | None = None,
                      held: Lease | None = None, clean: bool = False,
                      summary: SavedSummary | None = None, tenanted: bool = False) -> None:
        """Give the lease back early (only if we still own it), leaving on it when the look
        at every held dependent was last claimed, if this tick knows (``swept_at``), and,
        with ``held`` (the lease as this tick took it), that it was given back, so the next
        holder knows it took over from no dead tick, and, with ``clean`` too, that this tick
        left no bundle RECORDING, and with ``tenanted`` that it saw a tenant's work
        (:attr:`Lease.tenanted`). ``summary``: the tick's summary (:meth:`save_tick_summary`),
        written in the same transaction: one call a tick where two were, and a tick that lost
        its lease writes no summary over its successor's. The transaction is tried once: if it
        fails for another reason (the table throttled or failing), the two are written apart,
        as before, so that a failing table does not keep the lease from the next tick."""
        release = Update(r.LEASE_KEY, [
            Remove("owner"), Set("lease_until", 0),
            *([Set("released_at", held.number)] if held is not None else []),
            *([Set("swept_at", swept_at)] if swept_at is not None else []),
            *([Set("clean_at", held.number)] if held is not None and clean else []),
            *([Set("tenanted_at", held.number)] if held is not None and tenanted else [])],
            Eq("owner", owner))
        if summary is not None:
            try:
                self.table.transact([release, self._summary_put(*summary)])
                return
            except TransactionCancelled as exc:
                if 0 in exc.failed_conditions():
                    return  # a lost lease (and its tick's summary) are the next owner's
            except (TableUnavailable, InvalidTransaction):
                pass
        failed: TableUnavailable | None = None
        if summary is not None:
            try:
                self.save_tick_summary(*summary)
            except TableUnavailable as exc:  # the lease is given back all the same
                failed = exc
        with contextlib.suppress(ConditionFailed):  # a lost lease is the next owner's
            self.table.write(release)
        if failed is not None:
            raise failed

    # -- sharing task slots between priorities (dispatcher.domain.fairness) ---------------------
    def priority_credit(self) -> dict[str, float]:
        """Each priority's credit for task slots, as the last tick that shared them left it."""
        rec = self.table.get(r.FAIR_KEY)
        credit = rec.credit if rec is not None and isinstance(rec.credit, dict) else {}
        return {str(p): float(c) for p, c in credit.items()}

    def save_priority_credit(self, credit: Mapping[str, float]) -> None:
        """Keep the credit for the next tick (written by the lease holder only)."""
        self.table.write(Put(Record(r.FAIR_KEY, credit=dict(credit), updated_at=self.clock())))

    # -- why jobs wait (dispatcher.domain.waiting) ----------------------------------------------
    def save_tick_summary(self, summary: TickSummary, task_definition: str | None = None,
                          version: int | None = None) -> None:
        """The tick's view of the slots: one write a tick, whatever the number of jobs waiting
        (each job's ``waiting_for`` is derived from it and its bundle when read). It expires
        a day after the last tick: a stack left idle keeps nothing of it. ``task_definition``:
        the revision the tick launched with, and ``version`` the deployment record's it was
        decided on (see :meth:`save_tick_revision`)."""
        self.table.write(self._summary_put(summary, task_definition, version))

    def _summary_put(self, summary: TickSummary, task_definition: str | None = None,
                     version: int | None = None) -> Put:
        t = self.clock()
        return Put(Record(r.TICK_KEY, summary=summary.to_json(), updated_at=t,
                          expires_at=int(t + TICK_SUMMARY_TTL_SECONDS),
                          task_definition=task_definition, version=version))

    def save_tick_revision(self, task_definition: str, version: int | None) -> None:
        """The revision a tick launches and the deployment record's version it was decided on
        (0: no record; None: not decided on the record), written as the tick begins (its
        summary, at its end, says them again): a runner takes its batch's follow-ons only on
        that revision, and only while the record is at that version
        (dispatcher.store.follow_ons)."""
        t = self.clock()
        self.table.write(Update(r.TICK_KEY, [
            Set("task_definition", task_definition),
            Set("version", version) if version is not None else Remove("version"),
            Set("expires_at", int(t + TICK_SUMMARY_TTL_SECONDS))]))

    # -- admission ------------------------------------------------------------------------------
    def due_bundles(self, limit: int, at: float, full_kinds: Collection[str] = (),
                    priorities: Collection[Priority] | None = None, *,
                    follow_ons: bool = False, apart: Collection[str] = ()) -> list[Bundle]:
        """The first page of :meth:`due_page`."""
        return self.due_page(limit, at, full_kinds, priorities, follow_ons=follow_ons,
                             apart=apart)[0]

    def due_page(self, limit: int, at: float, full_kinds: Collection[str] = (),
                 priorities: Collection[Priority] | None = None, *, follow_ons: bool = False,
                 after: Record | None = None, apart: Collection[str] = ()
                 ) -> tuple[list[Bundle], Record | None]:
        """PENDING bundles whose backoff has passed, oldest due first, leaving out those of
        ``full_kinds`` (limited kinds with no room: a backlog of them, deferred in the table,
        would otherwise fill every read and hide the due bundles of other kinds), and keeping
        only those of ``priorities`` if given (so that older bundles of one priority cannot
        hide the due bundles of another). The follow-ons no task has run yet are apart
        (codec.FOLLOW_ONS_STATUS): read with ``follow_ons``, and only then. With the last row
        read, which ``after`` takes to read the next page (a capped tenant's backlog must not
        hide the others' work: dispatcher/stages/due_work.py). ``apart``: tenants whose
        bundles are left out (a filter on the rows' keys, which name their tenant)."""
        if limit <= 0:
            return [], None
        # kind <> k, as the port has no inequality: k's bundles are neither below nor above it;
        # a bundle without a kind (not of a limited kind) always passes.
        conds: list[Condition] = []
        if full_kinds:
            conds.append(Or(Lacks("kind"), And(*(Or(Lt("kind", k), Gt("kind", k))
                                                 for k in sorted(full_kinds)))))
        if priorities is not None:  # normal is the default: not stored on the item
            conds.append(Or(*(Lacks("priority") if p == Priority.NORMAL
                              else Eq("priority", str(p)) for p in priorities)))
        conds += [r.other_bundles(t) for t in sorted(apart)]
        where = And(*conds) if len(conds) > 1 else conds[0] if conds else None
        key = r.FOLLOW_ONS_STATUS if follow_ons else r.bundle_status(BundleState.PENDING)
        rows = self.table.query(key, at_most=r.iso(at), limit=limit, where=where, after=after)
        return [r.record_bundle(rec) for rec in rows], rows[-1] if rows else None

    def batch_cursors(self, batches: list[str]) -> dict[str, tuple[int, int | None]]:
        """Each batch's cursor (its next follow-on, and its last once the drain wrote it),
        for those that have one: one read of up to 100."""
        out = {}
        for rec in self.table.get_many([r.batch_key(b) for b in batches]):
            out[rec.pk.removeprefix("BATCH#")] = (
                int(rec.batch_next or 0), None if rec.batch_last is None else int(rec.batch_last))
        return out

    def bundles_of(self, bundle_ids: list[str]) -> list[Bundle]:
        """The bundles of these ids that exist: one read of up to 100."""
        return [r.record_bundle(rec)
                for rec in self.table.get_many([r.bundle_key(i) for i in bundle_ids])]

    def orphaned_launches(self, older_than: float) -> list[Launch]:
        """Launches recorded before RunTask and never finished (their tick crashed), read
        whole (their labels, which the index's rows do not hold, are in the request that
        recovery repeats byte for byte): a read of their items only when there are some."""
        rows = self.table.query(r.launch_status(LaunchState.STARTING),
                                at_most=r.iso(older_than))
        return [r.record_launch(rec) for rec in index.full(self.table, rows)]

    # -- recording: see dispatcher.store.recording

    # -- launching ------------------------------------------------------------------------------
    def begin_launch(self, launch: Launch, bundles: list[Bundle]) -> None:
        """Record the launch and move its bundles PENDING -> LAUNCHING (attempt + 1), atomically,
        each with the ``slots`` it launches with (decided by the caller; its runner keeps to it)."""
        t = self.clock()
        ops: list[Op] = [Put(r.launch_record(launch), Absent())]
        for b in bundles:
            lifecycle.check_bundle(b.bundle_id, b.state, BundleState.LAUNCHING)
            ops.append(Update(r.bundle_key(b.bundle_id), [
                *status(r.bundle_status(BundleState.LAUNCHING), t),
                Set("attempt", b.attempt + 1), Set("launch_id", launch.launch_id),
                Set("task_definition", launch.task_definition),
                Set("slots", b.slots) if b.slots else Remove("slots")],
                And(Eq("state", str(b.state)), Eq("attempt", b.attempt))))
        self._transact(ops, f"launch {launch.launch_id}: a bundle changed under us "
                       "(already launched by someone else?)")
        for b in bundles:
            b.state, b.attempt, b.launch_id = BundleState.LAUNCHING, b.attempt + 1, launch.launch_id
            b.task_definition = launch.task_definition

    def finish_launch(self, launch: Launch, outcome: LaunchOutcome,
                      retry_at: dict[str, float]) -> None:
        """Assign task ARNs (LAUNCHING -> LAUNCHED, plus TASK# pointers) and put failed bundles
        back to PENDING with their backoff; mark the launch DONE. One transaction."""
        t = self.clock()
        mine = And(Eq("state", str(BundleState.LAUNCHING)), Eq("launch_id", launch.launch_id))
        ops: list[Op] = [Update(r.launch_key(launch.launch_id), [
            *status(r.launch_status(LaunchState.DONE), t),
            Set("task_arns", [arn for _, arn in outcome.assigned]),
            Set("expires_at", int(t + LAUNCH_TTL_SECONDS))],
            Eq("state", str(LaunchState.STARTING)))]
        for bundle_id, arn in outcome.assigned:
            lifecycle.check_bundle(bundle_id, BundleState.LAUNCHING, BundleState.LAUNCHED)
            ops.append(Update(r.bundle_key(bundle_id), [
                *status(r.bundle_status(BundleState.LAUNCHED), t), Set("task_arn", arn)], mine))
            # No expiry: the pointer is needed while the bundle is on this task, however long
            # its jobs run; the write that moves it off the task sets one (pointer_expiry).
            ops.append(Put(Record(r.task_key(arn), bundle_id=bundle_id,
                                  launch_id=launch.launch_id, created_at=t)))
        for bundle_id, reason in outcome.failed:
            lifecycle.check_bundle(bundle_id, BundleState.LAUNCHING, BundleState.PENDING)
            due = retry_at[bundle_id]
            ops.append(Update(r.bundle_key(bundle_id), [
                *status(r.bundle_status(BundleState.PENDING), t, at=due),
                Set("next_attempt_at", due), Add("launch_failures", 1),
                Set("last_failure", reason[:1000]), Remove("launch_id")], mine))
        self._transact(ops, f"launch {launch.launch_id} was finished already")

    # -- stopped tasks and overdue jobs ---------------------------------------------------------
    def settle(self, bundle: Bundle, updates: list[JobUpdate], target: BundleState,
               retry_at: float | None = None, *, serial: bool = False) -> set[str]:
        """Requeue or close a stopped task's bundle, with its jobs, only if nobody moved it
        since it was read (the fence is the state, attempt and task ARN read). ``serial``:
        its next tasks run one job at a time (``slots`` 1).

        Up to 98 job updates (3.5 MB) share the bundle's transaction. A large bundle's updates
        take several, each checking the fence, the bundle's own update last: a crash in between
        leaves the bundle where it was, and the stop is handled again (the event is retried,
        reconciliation looks again) from the jobs as they are then. Each job update carries
        the stop's task ARN (``settled_by``), so the jobs already settled are charged nothing
        more (:func:`dispatcher.domain.stop_policy.decide`); none is lost or left without a
        bundle to run it.

        A job whose item cannot take its update (over DynamoDB's 400 KB: an item written before
        the size budgets, near the limit) ends FAILED alone with that reason, its checkpoint
        dropped to make room (:meth:`_overfull`); its bundle-mates are settled as decided.
        Returns the ids of the jobs failed so."""
        lifecycle.check_bundle(bundle.bundle_id, bundle.state, target)
        t = self.clock()
        conds: list[Condition] = [Eq("state", str(bundle.state)), Eq("attempt", bundle.attempt)]
        if bundle.task_arn:
            conds.append(Eq("task_arn", bundle.task_arn))
        if bundle.state == BundleState.RUNNING:  # no urgent job handed to it since it was read
            conds.append(handed_as_read(bundle))
        expires_at = self._expiry(t)
        key = r.bundle_key(bundle.bundle_id)
        actions = bundle_actions(target, t, retry_at, expires_at)
        if bundle.task_arn:  # a redelivered event for this stop is a duplicate (first_report)
            actions.append(Set("reported_stop", bundle.task_arn))
        if serial and target == BundleState.PENDING:
            actions.append(Set("slots", 1))
        chunks = update_chunks(updates)
        # The bundle leaves its task: the task's pointer may expire; a DONE bundle's pages too.
        leaving = pointer_expiry(bundle.task_arn, expires_at) \
            if bundle.state in (BundleState.LAUNCHED, BundleState.RUNNING) else []
        pages_now, pages_later = fit_pages(
            page_expiry(bundle.bundle_id, bundle.pages, expires_at)
            if target == BundleState.DONE else [], 1 + len(chunks[-1]) + len(leaving),
            chunks[-1])
        lost = (f"bundle {bundle.bundle_id} changed since the stop event was read; "
                "nothing more written")
        overfull: set[str] = set()
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            head: Op = Update(key, actions, And(*conds)) if last else Check(key, And(*conds))
            extra = leaving + pages_now if last else []
            try:
                self._transact([head, *job_updates(chunk, bundle.bundle_id, t, expires_at),
                                *extra], lost)
            except InvalidTransaction:
                refused = self._overfull(chunk, bundle.bundle_id, t, expires_at)
                if not refused:
                    raise  # not a job's item: fail loudly
                overfull |= refused
                chunk = [_shed(u) if u.job_id in refused else u for u in chunk]
                self._transact([head, *job_updates(chunk, bundle.bundle_id, t, expires_at),
                                *extra], lost)
        expire_pages_later(self.table, bundle.bundle_id, pages_later)
        if serial and target == BundleState.PENDING:
            bundle.slots = 1
        bundle.state = target
        return overfull

    def _overfull(self, chunk: list[JobUpdate], bundle_id: str, t: float,
                  expires_at: int | None) -> set[str]:
        """The jobs of ``chunk`` whose update the table refuses (the item would be too large),
        each probed in a transaction that cannot commit (see :meth:`_refused_jobs`)."""
        refused: set[str] = set()
        for op, u in zip(job_updates(chunk, bundle_id, t, expires_at), chunk, strict=True):
            try:
                self.table.transact([op, Check(PROBE_KEY, Exists())])
            except InvalidTransaction:
                refused.add(u.job_id)
            except TransactionCancelled:
                pass  # only the conditions failed: the update itself fits
        return refused

    def first_report(self, bundle_id: str, task_arn: str,
                     bill: TaskCost | None = None) -> tuple[bool, bool]:
        """Whether this is the first time a stop of ``task_arn`` is handled for this bundle
        (False for a duplicate: EventBridge and Lambda's async retries can deliver an event
        twice; the stop's job metrics are published once; a settle marks its stop as handled
        too), and whether ``bill``, the task's settlement, was written by this call: in the
        same transaction (once only, whichever delivery writes it: :meth:`settle_bill`), or,
        when that transaction fails for the bill's sake (a counter busy past its tries), the
        mark alone and the bill after it, as it may."""
        differs = Or(Lacks("reported_stop"), Lt("reported_stop", task_arn),
                     Gt("reported_stop", task_arn))  # <>: the port has no inequality
        mark = Update(r.bundle_key(bundle_id), [Set("reported_stop", task_arn)],
                      And(Exists(), differs))
        if bill is not None:
            try:
                if self.settle_bill(bill, [mark]):
                    return True, True
            except TransactionCancelled as exc:
                if 0 in exc.failed_conditions():  # reported before; its bill may not be
                    return False, self._settle_quietly(bill)
            except (TableUnavailable, InvalidTransaction):
                pass  # the bill's writes failed: the mark alone, then the bill
            else:  # its bill was settled before (by another delivery): the mark alone
                bill = None
        try:
            self.table.write(mark)
        except ConditionFailed:
            return False, False
        return True, bill is not None and self._settle_quietly(bill)

    def _settle_quietly(self, bill: TaskCost) -> bool:
        """Settle ``bill`` if it may be; a failure is logged, never the stop's."""
        try:
            return self.settle_bill(bill)
        except (TableUnavailable, TransactionCancelled, InvalidTransaction) as exc:
            log.warning("a task's bill was not settled", extra={
                "task_arn": bill.task_arn, "error": f"{type(exc).__name__}: {exc}"})
            return False

    def running_jobs(self, *, overdue_by: float | None = None) -> list[Job]:
        """The RUNNING jobs, whole. The index does not hold their history (when each run
        started), so their items are read too, 100 a call (:func:`index.full`). With
        ``overdue_by``, only those that may be past their timeout at that time: a job with a
        timeout created at least ``timeout_seconds`` before it (a run starts after its job was
        created), so a reader of timeouts reads whole only those it may fail."""
        rows = index.query(self.table, r.job_statuses(JobState.RUNNING))
        if overdue_by is not None:
            rows = [rec for rec in rows if rec.timeout_seconds and rec.created_at is not None
                    and rec.created_at + rec.timeout_seconds <= overdue_by]
        return [r.record_job(rec) for rec in index.full(self.table, rows)]

    def fail_overdue(self, job: Job, reason: str) -> None:
        """RUNNING -> FAILED for a job past its timeout whose runner did not stop it
        (conditional: still that run). Its run may go on in its task (``live_task``, the task
        that started it): a retry waits until that task is known stopped."""
        lifecycle.check_job(job.job_id, JobState.RUNNING, JobState.FAILED)
        t = self.clock()
        task = job.history[-1].get("task_arn") if job.history else None
        self._write(Update(r.job_key(job.job_id), [
            *job_state(job.job_id, JobState.FAILED, t), Set("reason", reason),
            Set("error", {"type": "Timeout", "message": reason}),
            # With its run still going on, its expiry waits for its task's stop (end_live_runs).
            *([Set("live_task", str(task))] if task else self._expires(t))],
            And(Eq("state", str(JobState.RUNNING)), Eq("attempts", job.attempts),
                Eq("bundle_id", job.bundle_id or ""))), "job moved on", job_id=job.job_id)


    def end_live_runs(self, task_arn: str, jobs: list[Job]) -> None:
        """``task_arn`` is known stopped: the runs of ``jobs`` left going on there
        (``live_task``) are over. Each such job forgets the task (a later retry has nothing to
        wait for; a retry held for it is released by the next tick's reconciliation) and, if
        it is finished, gets the expiry it was kept from. Conditional on the job as read, so
        a job retried meanwhile is left to the held retry's release."""
        t = self.clock()
        for job in jobs:
            if job.live_task != task_arn:
                continue
            finished = job.state in TERMINAL_JOB_STATES
            cond = And(Eq("live_task", task_arn), Eq("state", str(job.state))) if finished \
                else Eq("live_task", task_arn)
            with contextlib.suppress(ConflictError):
                self._write(Update(r.job_key(job.job_id), [
                    Remove("live_task"), *(self._expires(t) if finished else [])], cond),
                    "job moved on", job_id=job.job_id)

def _shed(u: JobUpdate) -> JobUpdate:
    """A job whose item cannot take its update: FAILED with the reason, its checkpoint dropped
    (the room the update needs; a ``jobs retry`` starts it from scratch), no error or history
    added."""
    why = ("the job's item would exceed DynamoDB's 400 KB item limit (https://docs.aws."
           "amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html); its "
           "checkpoint was dropped" + (f"; {u.reason}" if u.reason else ""))
    return JobUpdate(u.job_id, u.source, JobState.FAILED, attempts_delta=u.attempts_delta,
                     infra_delta=u.infra_delta, reason=why, settled_by=u.settled_by,
                     drop_checkpoint=True)
