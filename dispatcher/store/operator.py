"""The operators' role: cancel and retry (one job, or a page of a bulk action); the reads
behind ``jobs list/show/stats`` are :mod:`dispatcher.store.job_lists`'s.

A pending job whose bundle has not been launched is cancelled at once; one that sits in an
active bundle gets a cancel *request* on its bundle, which the task's runner reads at its next
heartbeat and honours cooperatively (only the runner writes the jobs of a running bundle).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dispatcher.domain.bundles import Bundle, new_bundle_id
from dispatcher.domain.errors import AlreadyActed, ConflictError, JobNotFound, LongjobsError
from dispatcher.domain.jobs import Job, JobState, new_id
from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    TableUnavailable,
    TransactionCancelled,
)
from dispatcher.store import array_ops, job_ops, task_cancels
from dispatcher.store import codec as r
from dispatcher.store.audit_trail import AuditTrail
from dispatcher.store.deployments import Deployments
from dispatcher.store.job_lists import JobLists
from dispatcher.store.label_index import LabelIndex
from dispatcher.store.rate_buckets import RateBuckets
from dispatcher.store.schedule_fires import ScheduleFires
from dispatcher.store.state_writes import expire_pages_later
from dispatcher.store.task_bills import TaskBills
from dispatcher.store.tenant_policies import TenantPolicies
from dispatcher.store.values import PageOutcome

TRIES = 3


class OperatorStore(JobLists, Deployments, ScheduleFires, TaskBills, LabelIndex,
                    TenantPolicies, RateBuckets, AuditTrail):
    """Operator actions and queries (:class:`JobLists`), ``longjobs deploy``'s
    deployment record, and the console's audit records (:class:`AuditTrail`)."""

    # -- actions --------------------------------------------------------------------------------
    def _job(self, job_id: str) -> Job:
        job = self.get_job(job_id)
        if job is None:
            rejected = self.get_rejection(job_id)
            if rejected is not None:  # `jobs show` displays it: say what it is
                raise LongjobsError(f"was REJECTED, never admitted ({rejected.reason}); fix "
                                    "the message and submit it again", job_id=job_id)
            raise JobNotFound("no such job", job_id=job_id)
        return job

    def cancel(self, job_id: str, *, reason: str | None = None, by: str | None = None,
               only: JobState | None = None, resume: bool = False) -> Job:
        """Cancel now if not started, else request it from the job's running task.

        ``reason``: the operator's words, kept in the job's reason. ``by``: the bulk action
        doing this (``dispatcher.ops.bulk``); a job cancelled at once keeps its id among its
        marks (:mod:`dispatcher.store.bulk_marks`), and a job that already has it raises
        AlreadyActed (a resumed run acts once); ``resume``: ``by`` is a resumed action, which
        refuses a job it cannot tell it acted on (MarkNotKept). A cancel *request* leaves the
        job to its task's runner (it alone writes the job then): it is done once anyway, as a
        repeated request finds itself standing. ``only``: act only on a job still in this
        state (a bulk action's filter), else ConflictError."""
        for _ in range(TRIES):
            job = self._job(job_id)
            if job.array_size is not None:  # its children are what runs
                job_ops.check_mark(job, by, only, resume=resume)
                return array_ops.cancel_array(self, job, reason, by=by, resume=resume)
            job_ops.check_cancel(job, by, only, resume=resume)
            bundle = self.get_bundle(job.bundle_id) if job.bundle_id else None
            try:
                if job_ops.cancels_now(job, bundle):
                    self._cancel_now(job, bundle, reason=reason, by=by)
                else:
                    self._request_cancel(job, bundle)
                return self._job(job_id)
            except ConflictError:
                continue  # the job or its bundle moved on: look again
        raise ConflictError("job kept changing while cancelling; try again", job_id=job_id)

    def _cancel_now(self, job: Job, bundle: Bundle | None, *, reason: str | None = None,
                    by: str | None = None) -> None:
        t = self.clock()
        others = [] if bundle is None else [
            j for j in self.get_jobs(bundle.job_ids)
            if j.job_id != job.job_id and j.bundle_id == bundle.bundle_id]
        ops, pages_later = job_ops.cancel_ops([job], bundle, others, t=t,
                                              expires_at=self._expiry(t), reason=reason, by=by)
        self._transact(ops, "changed while cancelling", job_id=job.job_id)
        if bundle is not None:
            expire_pages_later(self.table, bundle.bundle_id, pages_later)

    def _request_cancel(self, job: Job, bundle: Bundle | None) -> None:
        """A cancel request on the job's active bundle (:func:`job_ops.request_op`)."""
        if bundle is None:
            raise LongjobsError("job has no bundle to stop", job_id=job.job_id)
        rec = self.table.get(r.bundle_key(bundle.bundle_id))
        op, refused = job_ops.request_op(bundle.bundle_id, (rec.cancel_jobs if rec else None)
                                         or [], [job.job_id])
        if job.job_id in refused:
            raise refused[job.job_id]
        if op is not None:
            self._write(op, "bundle changed", job_id=job.job_id)

    def retry(self, job_id: str, *, from_scratch: bool = False, reason: str | None = None,
              by: str | None = None, only: JobState | None = None,
              resume: bool = False) -> Job:
        """FAILED or CANCELLED -> PENDING with a fresh budget, in a new bundle (held while a
        run of the job may still be alive: ``Job.live_task``).

        The rerun resumes from the job's last checkpoint (the handler sees it as
        ``ctx.last_checkpoint``), as a rerun after a crash does; ``from_scratch`` drops it.
        ``reason`` and ``by`` (a bulk action) as for :meth:`cancel`: kept in the job's reason
        and in its history's retry boundary, ``by`` among its marks too; a job already marked
        by ``by`` raises AlreadyActed; ``only`` and ``resume`` as for :meth:`cancel`. An
        array's child is retried only by its array's retry
        (:mod:`dispatcher.store.array_retry`)."""
        job = self._job(job_id)
        if job.array_size is not None:  # its failed children are retried
            job_ops.check_mark(job, by, only, resume=resume)
            retried = array_ops.retry_array(self, job, from_scratch=from_scratch,
                                            reason=reason, by=by)
            self.retried_fires([job_id])
            return retried
        job_ops.check_retry(job, by, only, resume=resume)
        self._transact(job_ops.retry_ops(job, new_bundle_id(job.tenant, bool(job.uses),
                                                            new_id(), bool(job.labels)),
                                         t=self.clock(),
                                         from_scratch=from_scratch, reason=reason, by=by),
                       "job changed while retrying; try again", job_id=job_id)
        self.retried_fires([job_id])
        return self._job(job_id)

    # -- a page of a bulk action: few calls for many jobs ------------------------------------
    def cancel_page(self, job_ids: list[str], *, reason: str | None = None,
                    by: str | None = None, only: JobState | None = None,
                    resume: bool = False) -> list[PageOutcome]:
        """:meth:`cancel` of each of ``job_ids`` (a page of a bulk action, ``by``), in few
        calls: the jobs, their bundles and the bundles' other jobs read at once (BatchGetItem,
        100 keys a call), the cancels grouped into transactions (:func:`job_ops.pack`) with
        the same ops and conditions as one job's, each bundle's jobs in one of them (the
        last closes it), a cancel request one write per bundle. A job whose write is refused
        (it or its bundle moved on meanwhile) is left out, its neighbours written without it,
        and it is done on its own by :meth:`cancel`, which looks again: skipped or reported
        as it would be alone, never clobbered."""
        t = self.clock()
        # BatchGetItem reads at most 100 items and 16 MB a call: get_many (pynamodb's
        # batch_get) asks 100 keys at a time, and asks again for the keys a call leaves
        # unread past 16 MB (UnprocessedKeys).
        # https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
        jobs = {j.job_id: j for j in self.get_jobs(job_ids)}
        recs = {rec.pk: rec for rec in self.table.get_many(
            [r.bundle_key(j.bundle_id) for j in jobs.values() if j.bundle_id])}
        bundles = {b.bundle_id: b for b in map(r.record_bundle, recs.values())}
        out: dict[str, PageOutcome] = {}
        now: dict[str, list[Job]] = {}  # by bundle ("#" and its id: a job without one)
        asks: dict[str, list[str]] = {}
        alone: list[str] = [j for j in job_ids if j not in jobs]  # cancel() says why
        for job in jobs.values():
            if job.array_size is not None:  # an array's cancel acts on its children
                alone.append(job.job_id)
                continue
            bundle = bundles.get(job.bundle_id or "")
            try:
                job_ops.check_cancel(job, by, only, resume=resume)
                if job_ops.cancels_now(job, bundle):
                    now.setdefault(bundle.bundle_id if bundle else "#" + job.job_id,
                                   []).append(job)
                elif bundle is None:
                    alone.append(job.job_id)
                else:
                    asks.setdefault(bundle.bundle_id, []).append(job.job_id)
            except AlreadyActed:
                out[job.job_id] = PageOutcome(job.job_id, "skipped")
            except LongjobsError as exc:
                out[job.job_id] = PageOutcome(job.job_id, "error", exc)
        for bundle in bundles.values():
            if bundle.bundle_id in now:  # its pages read only if it has them
                bundle.job_ids = self.job_ids_of(bundle)
        mates = {j.job_id: j for j in self.get_jobs(
            [m for key in now if key in bundles for m in bundles[key].job_ids
             if m not in jobs])}
        # A bundle with more of its jobs in the page than one transaction holds is cancelled
        # in parts, one round each: a part may close it only when the parts before it have
        # committed (they count as cancelled then), so only its last part closes it.
        parts = {key: [group[i:i + MAX_TRANSACTION_ITEMS - 1]
                       for i in range(0, len(group), MAX_TRANSACTION_ITEMS - 1)]
                 for key, group in now.items()}

        def unit(bundle: Bundle | None, part: list[Job], done: set[str]) -> job_ops.Unit:
            ids = {j.job_id for j in part}
            others = [] if bundle is None else [
                replace(j, state=JobState.CANCELLED) if j.job_id in done else j
                for m in bundle.job_ids if m not in ids
                for j in [jobs.get(m) or mates.get(m)] if j and j.bundle_id == bundle.bundle_id]
            ops, later = job_ops.cancel_ops(part, bundle, others, t=t,
                                            expires_at=self._expiry(t), reason=reason, by=by)
            return job_ops.Unit(list(ids), ops, later, bundle.bundle_id if bundle else "")

        done: set[str] = set()
        for n in range(max(map(len, parts.values()), default=0)):
            acted, refused = self._commit_units([unit(bundles.get(key), part[n], done)
                                                 for key, part in parts.items() if n < len(part)])
            done |= acted
            alone += refused
        out.update({j: PageOutcome(j, "acted") for j in done})
        # More jobs of one active bundle than its item keeps requests for: see task_cancels.
        asked, moved = task_cancels.cancel_in_tasks(self, asks, jobs, recs, bundles,
                                                    reason=reason, by=by)
        out.update(asked)
        alone += moved
        for job_id in alone:
            out[job_id] = self._alone(job_id, lambda j: self.cancel(
                j, reason=reason, by=by, only=only, resume=resume), cancel=True)
        return [out[j] for j in dict.fromkeys(job_ids)]

    def retry_page(self, job_ids: list[str], *, from_scratch: bool = False,
                   reason: str | None = None, by: str | None = None,
                   only: JobState | None = None, resume: bool = False
                   ) -> list[PageOutcome]:
        """:meth:`retry` of each of ``job_ids`` in few calls, as :meth:`cancel_page`: the
        jobs read at once and retried into bundles packed as admission packs its jobs
        (:func:`job_ops.retry_groups`: small jobs of one shape share one, each bundle written
        with its jobs in one transaction), not a bundle and a task each; a job refused is
        left out of its bundle (its bundle-mates written without it) and done on its own; an
        array job is done on its own (its retry acts on its children)."""
        t = self.clock()
        jobs = {j.job_id: j for j in self.get_jobs(job_ids)}
        out: dict[str, PageOutcome] = {}
        checked: list[Job] = []
        arrays_alone: list[str] = []
        for job in jobs.values():
            if job.array_size is not None:
                arrays_alone.append(job.job_id)
                continue
            try:
                job_ops.check_retry(job, by, only, resume=resume)
                checked.append(job)
            except AlreadyActed:
                out[job.job_id] = PageOutcome(job.job_id, "skipped")
            except LongjobsError as exc:
                out[job.job_id] = PageOutcome(job.job_id, "error", exc)

        def unit(group: list[Job], bundle_id: str | None = None) -> job_ops.Unit:
            return job_ops.retry_unit(group, t=t, from_scratch=from_scratch, reason=reason,
                                      by=by, bundle_id=bundle_id)

        def without(u: job_ops.Unit, failed: set[int]) -> tuple[list[str], job_ops.Unit | None]:
            """A bundle refused for some of its jobs (the bundle's put is op 0, each job's
            update the op after): those jobs, and the bundle remade of the others."""
            if 0 in failed:
                return u.job_ids, None
            refused = [u.job_ids[i - 1] for i in sorted(failed)]
            rest = [jobs[j] for j in u.job_ids if j not in refused]
            return refused, unit(rest, u.bundle_id) if rest else None

        closed, open_ = job_ops.retry_groups(checked, self.bundle_sizes, t=t)
        done, refused = self._commit_units([unit(g) for g in [*closed, *open_]], without)
        self.retried_fires(sorted(done))
        out.update({j: PageOutcome(j, "acted") for j in done})
        for job_id in [*refused, *arrays_alone, *(j for j in job_ids if j not in jobs)]:
            out[job_id] = self._alone(job_id, lambda j: self.retry(
                j, from_scratch=from_scratch, reason=reason, by=by, only=only, resume=resume))
        return [out[j] for j in dict.fromkeys(job_ids)]

    def _commit_units(self, units: list[job_ops.Unit],
                      without: Callable[[job_ops.Unit, set[int]],
                                        tuple[list[str], job_ops.Unit | None]] | None = None
                      ) -> tuple[set[str], list[str]]:
        """Write the units in as few transactions as fit; return the jobs written and those
        refused. A transaction refused for some units' conditions (their job or bundle moved
        on) is made again without them, so one job that moved on never holds back its
        neighbours; one refused otherwise (a conflict that persisted) refuses all its units.
        Either way the refused are not written here: the caller does each on its own.
        ``without``: how a unit refused for some of its ops (their indexes in it) is remade
        without the jobs they refuse (those jobs, and the unit left, if any); by default the
        whole unit is refused."""
        done: set[str] = set()
        refused: list[str] = []
        for group in job_ops.pack(units):
            while group:
                try:
                    self._transact_retrying([op for u in group for op in u.ops])
                except TransactionCancelled as exc:
                    failed, at, keep = exc.failed_conditions(), 0, []
                    for u in group:
                        mine = {i - at for i in failed if at <= i < at + len(u.ops)}
                        at += len(u.ops)
                        if failed and not mine:
                            keep.append(u)
                        elif failed and without is not None:
                            lost, rest = without(u, mine)
                            refused.extend(lost)
                            keep += [rest] if rest is not None else []
                        else:
                            refused.extend(u.job_ids)
                    group = keep
                    continue
                for u in group:
                    done.update(u.job_ids)
                    expire_pages_later(self.table, u.bundle_id, u.later)
                break
        return done, refused

    @staticmethod
    def _alone(job_id: str, act: Callable[[str], Job], *, cancel: bool = False) -> PageOutcome:
        """One job of a page done on its own (``act``: :meth:`cancel` or :meth:`retry`): a
        ``cancel`` that leaves the job not CANCELLED was a request to its task."""
        try:
            job = act(job_id)
        except AlreadyActed:
            return PageOutcome(job_id, "skipped")
        except TableUnavailable:
            raise  # not this job's doing: stop; the same bulk id resumes
        except LongjobsError as exc:
            return PageOutcome(job_id, "error", exc)
        requested = cancel and job.state != JobState.CANCELLED
        return PageOutcome(job_id, "requested" if requested else "acted")
