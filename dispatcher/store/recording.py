"""How the record stage's writes are made: bundles and their jobs in transactions, large
bundles in pages committed last, malformed messages kept as REJECTED records.

This is table policy only (transactions, conditions, which job items the table refuses); what
to record (a refused job's REJECTED record included) and when its messages may be deleted or
given back is the record stage's (:mod:`dispatcher.stages.recorder`), which deletes nothing
before :meth:`Recordings.record` returns.

A bundle that fits one transaction is written atomically with its jobs; a larger one is written
RECORDING in pages and committed to PENDING by its last transaction, so a recording cut short
never runs and :meth:`Recordings.recover_recordings` finishes it from the pages that exist.
"""

from __future__ import annotations

from dataclasses import replace

from dispatcher.domain import lifecycle, sizes
from dispatcher.domain.bundles import Bundle, BundleState, jobs_timeout
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import Job, JobState, Rejection
from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    Absent,
    Check,
    ConditionFailed,
    Eq,
    Exists,
    InvalidTransaction,
    Op,
    Or,
    Put,
    Set,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import Reads, pack_groups
from dispatcher.store.state_writes import (
    UPDATES_BYTES,
    bundle_actions,
    expire_pages_later,
    fit_pages,
    page_expiry,
)

# A recording transaction stays under TransactWriteItems' 4 MB (MAX_TRANSACTION_BYTES), with
# room for attribute overhead (item_bytes() is an estimate).
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_RECORD_BYTES = UPDATES_BYTES  # 3,500,000: the runner's results keep to the same
# A key no item ever has: a probe transaction checks it exists, so it never writes anything.
PROBE_KEY = "PROBE#never"
# A page of a large bundle: one transaction holds the page, its jobs and the bundle's own write.
PAGE_JOBS = MAX_TRANSACTION_ITEMS - 2


class Recordings(Reads):
    """Recording admitted bundles and rejected messages (part of :class:`StageStore`)."""

    def end_batch(self, batch: str, follow_ons: int) -> None:
        """``batch`` has ``follow_ons`` follow-ons, numbered from 0 (the cursor's item, which
        runners read: dispatcher.store.follow_ons); it expires with the retention."""
        self.table.write(Update(r.batch_key(batch), [Set("batch_last", follow_ons),
                                                     *self._expires(self.clock())]))

    def record(self, bundles: list[Bundle], jobs: list[Job]) -> set[str]:
        """Write bundles and their jobs; return the ids that already existed.

        A bundle that fits one transaction is written atomically with its jobs (several such
        bundles share a transaction). A larger one is written in pages (:meth:`_record_paged`):
        it is launchable only once its last transaction commits it.

        Duplicates are left out (their bundles shrink or vanish); nothing existing is touched.
        A job whose item the table refuses although the message passed validation (DynamoDB's
        ValidationException) hurts only itself: it leaves its bundle, its bundle-mates are
        written without it, and its ``state`` becomes REJECTED with the table's ``reason``:
        what to record of it is the caller's (:func:`dispatcher.stages.recorder.refused`),
        before it deletes the job's message.
        """
        by_id = {j.job_id: j for j in jobs}
        for bundle in bundles:  # kept on the bundle: the tick's look for overdue jobs reads it
            bundle.timeout_seconds = jobs_timeout(by_id[j].timeout_seconds
                                                  for j in bundle.job_ids if j in by_id)
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
            _mark_refused(refused, by_id)
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
                    _mark_refused(refused, by_id)
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
        key = r.recorded_status(Bundle(**{**vars(bundle), "state": target}))
        return Update(r.bundle_key(bundle.bundle_id), [
            *bundle_actions(target, t, due, self._expiry(t), key=key),
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



def _mark_refused(refused: dict[str, str], by_id: dict[str, Job]) -> None:
    """Jobs whose item the table refused: REJECTED, with the table's reason."""
    for job_id, why in refused.items():
        job = by_id[job_id]
        job.state, job.reason = JobState.REJECTED, f"the table refused the job's item: {why}"[:1000]


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
    return pack_groups(bundles, lambda b: 1 + len(b.job_ids),
                       lambda b: 1024 + sum(by_id[j].item_bytes() for j in b.job_ids),
                       MAX_TRANSACTION_ITEMS, MAX_RECORD_BYTES)
