"""The dispatcher's role: lease, admission, launches, stopped tasks, overdue jobs.

Every state change is a conditional write: the item must still be in the state the writer read
(plus the fence: attempt, task ARN, launch id), and :mod:`dispatcher.domain.lifecycle` must allow
the transition. A writer with a stale view loses the write instead of overwriting.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Mapping
from dataclasses import replace

from dispatcher.domain import lifecycle, sizes
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import Job, JobState, Priority, Rejection
from dispatcher.domain.launches import Launch, LaunchState
from dispatcher.ports.store import records as r
from dispatcher.ports.store.base import status
from dispatcher.ports.store.held import HeldRetries
from dispatcher.ports.store.runner import (
    UPDATES_BYTES,
    bundle_actions,
    expire_pages_later,
    fit_pages,
    job_updates,
    page_expiry,
    pointer_expiry,
    update_chunks,
)
from dispatcher.ports.store.values import JobUpdate, LaunchOutcome
from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    Absent,
    Add,
    And,
    Check,
    Condition,
    ConditionFailed,
    Delete,
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
    TransactionCancelled,
    Update,
)

# A recording transaction stays under TransactWriteItems' 4 MB (MAX_TRANSACTION_BYTES), with
# room for attribute overhead (item_bytes() is an estimate).
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_RECORD_BYTES = UPDATES_BYTES  # 3,500,000: the runner's results keep to the same
# A key no item ever has: a probe transaction checks it exists, so it never writes anything.
PROBE_KEY = "PROBE#never"
# A DONE launch (LAUNCH#): only a STARTING one is ever read again (a crashed tick's launch is
# retried from it, see orphaned_launches); a DONE one is kept this long to look at, then
# deleted. Its id is never reused: it names the bundles' next attempt, which only grows.
LAUNCH_TTL_SECONDS = 7 * 86400
# A page of a large bundle: one transaction holds the page, its jobs and the bundle's own write.
PAGE_JOBS = MAX_TRANSACTION_ITEMS - 2


class DispatchStore(HeldRetries):
    """What the tick and the task-event handler ask of the table (the dry run wraps this)."""

    # -- lease ----------------------------------------------------------------------------------
    def acquire_lease(self, owner: str, seconds: float) -> bool:
        """Take the single dispatcher lease unless another live owner holds it."""
        t = self.clock()
        rec = Record(r.LEASE_KEY, owner=owner, lease_until=t + seconds, updated_at=t)
        free = Or(Absent(), Lt("lease_until", t), Eq("owner", owner))
        try:
            self.table.write(Put(rec, free))
        except ConditionFailed:
            return False
        return True

    def release_lease(self, owner: str) -> None:
        """Give the lease back early (only if we still own it)."""
        with contextlib.suppress(ConditionFailed):  # a lost lease is the next owner's
            self.table.write(Delete(r.LEASE_KEY, Eq("owner", owner)))

    # -- sharing task slots between priorities (dispatcher.domain.fairness) ---------------------
    def priority_credit(self) -> dict[str, float]:
        """Each priority's credit for task slots, as the last tick that shared them left it."""
        rec = self.table.get(r.FAIR_KEY)
        credit = rec.credit if rec is not None and isinstance(rec.credit, dict) else {}
        return {str(p): float(c) for p, c in credit.items()}

    def save_priority_credit(self, credit: Mapping[str, float]) -> None:
        """Keep the credit for the next tick (written by the lease holder only)."""
        self.table.write(Put(Record(r.FAIR_KEY, credit=dict(credit), updated_at=self.clock())))

    # -- admission ------------------------------------------------------------------------------
    def due_bundles(self, limit: int, at: float, full_kinds: Collection[str] = (),
                    priorities: Collection[Priority] | None = None) -> list[Bundle]:
        """PENDING bundles whose backoff has passed, oldest due first, leaving out those of
        ``full_kinds`` (limited kinds with no room: a backlog of them, deferred in the table,
        would otherwise fill every read and hide the due bundles of other kinds), and keeping
        only those of ``priorities`` if given (so that older bundles of one priority cannot
        hide the due bundles of another)."""
        if limit <= 0:
            return []
        # kind <> k, as the port has no inequality: k's bundles are neither below nor above it;
        # a bundle without a kind (not of a limited kind) always passes.
        conds: list[Condition] = []
        if full_kinds:
            conds.append(Or(Lacks("kind"), And(*(Or(Lt("kind", k), Gt("kind", k))
                                                 for k in sorted(full_kinds)))))
        if priorities is not None:  # normal is the default: not stored on the item
            conds.append(Or(*(Lacks("priority") if p == Priority.NORMAL
                              else Eq("priority", str(p)) for p in priorities)))
        where = And(*conds) if len(conds) > 1 else conds[0] if conds else None
        rows = self.table.query(r.bundle_status(BundleState.PENDING), at_most=r.iso(at),
                                limit=limit, where=where)
        return [r.record_bundle(rec) for rec in rows]

    def orphaned_launches(self, older_than: float) -> list[Launch]:
        """Launches recorded before RunTask and never finished (their tick crashed)."""
        rows = self.table.query(r.launch_status(LaunchState.STARTING),
                                at_most=r.iso(older_than))
        return [r.record_launch(rec) for rec in rows]

    def record(self, bundles: list[Bundle], jobs: list[Job]) -> set[str]:
        """Write bundles and their jobs; return the ids that already existed.

        A bundle that fits one transaction is written atomically with its jobs (several such
        bundles share a transaction). A larger one is written in pages (:meth:`_record_paged`):
        it is launchable only once its last transaction commits it.

        Duplicates are left out (their bundles shrink or vanish); nothing existing is touched.
        A job whose item the table refuses although the message passed validation (DynamoDB's
        ValidationException) hurts only itself: it leaves its bundle, its bundle-mates are
        written without it, and it is recorded REJECTED with the table's reason; its ``state``
        becomes REJECTED and its ``reason`` says why, so the caller can count it.
        """
        by_id = {j.job_id: j for j in jobs}
        duplicates: set[str] = set()
        one = [b for b in bundles if _fits_one(b, by_id)]
        for bundle in bundles:
            if not _fits_one(bundle, by_id):
                self._record_paged(bundle, by_id, duplicates)
        for group in _pack(one, by_id):
            try:
                self._record_group(group, by_id, duplicates)
            except InvalidTransaction:
                if len(group) == 1:
                    raise
                for bundle in group:  # find the bundle: one transaction each
                    self._record_group([bundle], by_id, duplicates)
        return duplicates

    def _record_group(self, group: list[Bundle], by_id: dict[str, Job],
                      duplicates: set[str]) -> None:
        try:
            self._record_tx(group, by_id, duplicates)
        except InvalidTransaction:
            if len(group) != 1:
                raise
            refused = self._refused_jobs(group[0], by_id, duplicates)
            if not refused:
                raise  # not a job's item (a bug, or the bundle item itself): fail loudly
            self._reject_refused(refused, by_id)
            bundle = group[0]
            bundle.job_ids = [j for j in bundle.job_ids if j not in refused]
            bundle.estimated_seconds = sum(by_id[j].estimated_seconds or 0
                                           for j in bundle.job_ids)
            if bundle.job_ids:
                self._record_tx(group, by_id, duplicates)

    def _refused_jobs(self, bundle: Bundle, by_id: dict[str, Job],
                      duplicates: set[str]) -> dict[str, str]:
        """The jobs of ``bundle`` whose item the table refuses, with its reason. Each is probed
        in a transaction that cannot commit (it also checks that PROBE_KEY exists): the table
        refuses an invalid item before it evaluates any condition."""
        refused: dict[str, str] = {}
        for job_id in bundle.job_ids:
            if job_id in duplicates:
                continue
            try:
                self.table.transact([Put(r.job_record(by_id[job_id]), Absent()),
                                     Check(PROBE_KEY, Exists())])
            except InvalidTransaction as exc:
                refused[job_id] = str(exc)
            except TransactionCancelled:
                pass  # only the conditions failed: the item itself is fine
        return refused

    def _reject_refused(self, refused: dict[str, str], by_id: dict[str, Job]) -> None:
        """Record refused jobs as REJECTED. Their message body is not at hand: the record keeps
        the job's fields without the payload (whose size is given)."""
        rejections = []
        for job_id, why in refused.items():
            job = by_id[job_id]
            reason = f"the table refused the job's item: {why}"[:1000]
            job.state, job.reason = JobState.REJECTED, reason
            body = json.dumps({
                "job_id": job.job_id, "kind": job.kind,
                "estimated_seconds": job.estimated_seconds,
                "timeout_seconds": job.timeout_seconds, "max_attempts": job.max_attempts,
                "payload_bytes": job.payload_bytes}, separators=(",", ":"))
            rejections.append(Rejection(key=job_id, message_id=job.message_id or job_id,
                                        reason=reason, body=body, job_id=job_id,
                                        created_at=job.created_at))
        self.reject(rejections)

    def _record_tx(self, group: list[Bundle], by_id: dict[str, Job],
                   duplicates: set[str]) -> None:
        while group:
            puts: list[tuple[str, str]] = []  # (type, id) in transaction order
            ops: list[Op] = []
            for bundle in group:
                ops.append(Put(r.bundle_record(bundle), Absent()))
                puts.append(("bundle", bundle.bundle_id))
                for job_id in bundle.job_ids:
                    ops.append(Put(r.job_record(by_id[job_id]), Absent()))
                    puts.append(("job", job_id))
            try:
                self._transact_retrying(ops)
                return
            except TransactionCancelled as exc:
                taken = exc.failed_conditions()
                if not taken:
                    raise
            # Some items exist already: duplicate jobs (or, after a lost response, our own
            # bundle and jobs). Leave them out and write the rest.
            for index in taken:
                kind, ident = puts[index]
                if kind == "job":
                    duplicates.add(ident)
                else:
                    duplicates.update(next(b.job_ids for b in group if b.bundle_id == ident))
            for bundle in group:
                bundle.job_ids = [j for j in bundle.job_ids if j not in duplicates]
            dropped = {b.bundle_id for b in group if not b.job_ids}
            dropped |= {ident for i, (kind, ident) in enumerate(puts)
                        if kind == "bundle" and i in taken}
            group = [b for b in group if b.bundle_id not in dropped]
            for bundle in group:
                bundle.estimated_seconds = sum(by_id[j].estimated_seconds or 0
                                               for j in bundle.job_ids)

    def _record_paged(self, bundle: Bundle, by_id: dict[str, Job],
                      duplicates: set[str]) -> None:
        """Record a large bundle in as many transactions as it needs, the commit last.

        Transaction 0 puts the bundle as RECORDING (never launched: it is not PENDING), page 0
        and its jobs; each next one a page and its jobs; the last also commits the bundle to
        PENDING (or DONE when every job was a duplicate). Each page and its jobs commit
        together, so after a crash part-way the pages that exist name exactly the jobs that
        were recorded: :meth:`recover_recordings` commits the bundle with them, and the
        messages of the rest (never deleted: the caller deletes only after this returns) are
        delivered again and recorded anew. Nothing is lost and no job is in two bundles.
        """
        t = self.clock()
        chunks = _chunks(bundle.job_ids, by_id)
        bundle.pages, bundle.state = len(chunks), BundleState.RECORDING
        kept: list[str] = []
        for n, chunk in enumerate(chunks):
            first, last = n == 0, n == len(chunks) - 1
            while True:
                est = sum(by_id[j].estimated_seconds or 0 for j in chunk)
                ops: list[Op] = []
                if first:
                    head = Bundle(**{**vars(bundle), "job_ids": []})
                    if last:  # one page after all (a few very large jobs): commit at once
                        head.state = BundleState.PENDING if chunk else BundleState.DONE
                    rec = r.bundle_record(head)
                    if head.state == BundleState.DONE:
                        rec.expires_at = self._expiry(t)
                    ops.append(Put(rec, Absent()))
                # No expiry: a page lives as long as its bundle is unfinished (page_expiry).
                ops.append(Put(r.page_record(bundle.bundle_id, n, chunk, est, t, None),
                               Absent()))
                ops += [Put(r.job_record(by_id[j]), Absent()) for j in chunk]
                if last and not first:
                    total = sum(by_id[j].estimated_seconds or 0 for j in kept + chunk)
                    ops.append(self._commit(bundle, bool(kept or chunk), total, t))
                try:
                    self._transact_retrying(ops)
                    break
                except InvalidTransaction:
                    # A job item the table refuses hurts only itself (see record()).
                    refused = self._refused_jobs(Bundle(bundle.bundle_id, chunk), by_id,
                                                 duplicates)
                    if not refused:
                        raise
                    self._reject_refused(refused, by_id)
                    taken = set(refused)
                except TransactionCancelled as exc:
                    failed = exc.failed_conditions()
                    jobs_from = 2 if first else 1
                    taken = {chunk[i - jobs_from] for i in failed
                             if jobs_from <= i < jobs_from + len(chunk)}
                    if not taken:
                        raise  # the bundle or page exists, or the commit lost: not ours to fix
                    duplicates |= taken
                chunk = [j for j in chunk if j not in taken]
            kept += chunk
        bundle.job_ids = kept
        bundle.estimated_seconds = sum(by_id[j].estimated_seconds or 0 for j in kept)
        bundle.state = BundleState.PENDING if kept else BundleState.DONE
        if not kept:  # committed DONE (every job a duplicate)
            self._close_pages(bundle.bundle_id, len(chunks), t)

    def _close_pages(self, bundle_id: str, pages: int, t: float) -> None:
        """A bundle committed DONE by its recording: its pages may expire with it."""
        expire_pages_later(self.table, bundle_id, fit_pages(
            page_expiry(bundle_id, pages, self._expiry(t)), MAX_TRANSACTION_ITEMS, [])[1])

    def _commit(self, bundle: Bundle, has_jobs: bool, estimated_seconds: float,
                t: float, pages: int | None = None) -> Update:
        """RECORDING -> PENDING, due when the bundle was to be due (a scheduled bundle keeps
        its ``not_before``; others are due now), or DONE when the bundle kept no job.
        ``pages``: how many of its pages were written, when fewer than planned."""
        target = BundleState.PENDING if has_jobs else BundleState.DONE
        lifecycle.check_bundle(bundle.bundle_id, BundleState.RECORDING, target)
        due = max(t, bundle.next_attempt_at or 0.0)
        return Update(r.bundle_key(bundle.bundle_id), [
            *bundle_actions(target, t, due, self._expiry(t)),
            Set("estimated_seconds", estimated_seconds),
            *([] if pages is None else [Set("pages", pages)])],
            Eq("state", str(BundleState.RECORDING)))

    def recover_recordings(self) -> list[Bundle]:
        """Commit the bundles a crashed tick left RECORDING, with the pages it wrote.

        Called by the tick holding the lease, so no other recording is in progress."""
        t = self.clock()
        done = []
        for rec in self.table.query(r.bundle_status(BundleState.RECORDING)):
            bundle = r.record_bundle(rec)
            keys = [r.page_key(bundle.bundle_id, n) for n in range(bundle.pages)]
            pages = self.table.get_many(keys)
            bundle.job_ids = [j for k in keys for p in pages if p.pk == k
                              for j in p.job_ids or ()]
            est = sum(p.estimated_seconds or 0 for p in pages)
            # Pages are written in order, each after the one before it: those that exist are
            # the first len(pages). The bundle keeps that count, so its DONE write gives an
            # expiry to exactly its pages (it would otherwise create the missing ones).
            bundle.pages = len(pages)
            try:
                self._transact([self._commit(bundle, bool(bundle.job_ids), est, t,
                                             pages=len(pages))],
                               f"bundle {bundle.bundle_id} was committed meanwhile")
            except ConflictError:
                continue
            bundle.state = BundleState.PENDING if bundle.job_ids else BundleState.DONE
            if not bundle.job_ids:
                self._close_pages(bundle.bundle_id, len(pages), t)
            bundle.estimated_seconds = est
            done.append(bundle)
        return done

    def reject(self, rejections: list[Rejection]) -> None:
        """Keep malformed messages as REJECTED records; idempotent for a redelivered message.

        The reason and the body are clipped to their budgets (dispatcher.domain.sizes), so a
        record always fits its item: a rejection never fails its receive batch."""
        for rej in rejections:
            rej = replace(rej, reason=sizes.clip_text(rej.reason, sizes.MAX_REASON_BYTES),
                          body=sizes.clip_text(rej.body, sizes.REJECTED_BODY_BYTES))
            same = Or(Absent(), Eq("message_id", rej.message_id))
            expires_at = self._expiry(rej.created_at)
            try:
                self.table.write(Put(r.rejection_record(rej, r.rejection_key(rej.key),
                                                        expires_at), same))
            except ConditionFailed:
                # Another message was rejected under this job id: keep both.
                self.table.write(Put(r.rejection_record(
                    rej, r.rejection_key(rej.key, rej.message_id), expires_at)))

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
        more (``Reruns.decide``); none is lost or left without a bundle to run it.

        A job whose item cannot take its update (over DynamoDB's 400 KB: an item written before
        the size budgets, near the limit) ends FAILED alone with that reason, its checkpoint
        dropped to make room (:meth:`_overfull`); its bundle-mates are settled as decided.
        Returns the ids of the jobs failed so."""
        lifecycle.check_bundle(bundle.bundle_id, bundle.state, target)
        t = self.clock()
        conds: list[Condition] = [Eq("state", str(bundle.state)), Eq("attempt", bundle.attempt)]
        if bundle.task_arn:
            conds.append(Eq("task_arn", bundle.task_arn))
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

    def first_report(self, bundle: Bundle, task_arn: str) -> bool:
        """True the first time a stop of ``task_arn`` is handled for this bundle, False for a
        duplicate (EventBridge and Lambda's async retries can deliver an event twice): the
        stop's job metrics are published once. A settle marks its stop as handled too."""
        differs = Or(Lacks("reported_stop"), Lt("reported_stop", task_arn),
                     Gt("reported_stop", task_arn))  # <>: the port has no inequality
        try:
            self.table.write(Update(r.bundle_key(bundle.bundle_id),
                                    [Set("reported_stop", task_arn)], And(Exists(), differs)))
        except ConditionFailed:
            return False
        return True

    def running_jobs(self) -> list[Job]:
        return [r.record_job(rec) for rec in self.table.query(r.job_status(JobState.RUNNING))]

    def fail_overdue(self, job: Job, reason: str) -> None:
        """RUNNING -> FAILED for a job past its timeout whose runner did not stop it
        (conditional: still that run). Its run may go on in its task (``live_task``, the task
        that started it): a retry waits until that task is known stopped."""
        lifecycle.check_job(job.job_id, JobState.RUNNING, JobState.FAILED)
        t = self.clock()
        task = job.history[-1].get("task_arn") if job.history else None
        self._write(Update(r.job_key(job.job_id), [
            Set("state", str(JobState.FAILED)), Set("status_key", r.job_status(JobState.FAILED)),
            Set("updated_at", t), Set("reason", reason),
            Set("error", {"type": "Timeout", "message": reason}),
            *([Set("live_task", str(task))] if task else []), *self._expires(t)],
            And(Eq("state", str(JobState.RUNNING)), Eq("attempts", job.attempts),
                Eq("bundle_id", job.bundle_id or ""))), "job moved on", job_id=job.job_id)


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


def _fits_one(bundle: Bundle, by_id: dict[str, Job]) -> bool:
    """A bundle and its jobs fit one transaction."""
    return 1 + len(bundle.job_ids) <= MAX_TRANSACTION_ITEMS and \
        1024 + sum(by_id[j].item_bytes() for j in bundle.job_ids) <= MAX_RECORD_BYTES


def _chunks(job_ids: list[str], by_id: dict[str, Job]) -> list[list[str]]:
    """A large bundle's job ids cut into pages that each fit one transaction."""
    chunks: list[list[str]] = [[]]
    size = 0
    for job_id in job_ids:
        item = by_id[job_id].item_bytes()
        if len(chunks[-1]) >= PAGE_JOBS or size + item > MAX_RECORD_BYTES - 64_000:
            chunks.append([])
            size = 0
        chunks[-1].append(job_id)
        size += item
    return chunks


def _pack(bundles: list[Bundle], by_id: dict[str, Job]) -> list[list[Bundle]]:
    """Group bundles into transactions: a bundle and all its jobs always share one."""
    groups: list[list[Bundle]] = []
    items = size = 0
    for bundle in bundles:
        b_items = 1 + len(bundle.job_ids)
        b_size = 1024 + sum(by_id[j].item_bytes() for j in bundle.job_ids)
        if not groups or items + b_items > MAX_TRANSACTION_ITEMS or \
                size + b_size > MAX_RECORD_BYTES:
            groups.append([])
            items = size = 0
        groups[-1].append(bundle)
        items += b_items
        size += b_size
    return groups
