"""The operators' role: cancel, retry, and the reads behind ``jobs list/show/stats``.

A pending job whose bundle has not been launched is cancelled at once; one that sits in an
active bundle gets a cancel *request* on its bundle, which the task's runner reads at its next
heartbeat and honours cooperatively (only the runner writes the jobs of a running bundle).
The reads return table records (:class:`dispatcher.ports.table.Record`): the operator views in
:mod:`dispatcher.ops.queries` show attributes the domain objects do not carry.
"""

from __future__ import annotations

from collections.abc import Iterator

from dispatcher.domain import lifecycle, sizes
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.errors import AlreadyActed, ConflictError, JobNotFound, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState, new_id
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.table import (
    Absent,
    And,
    Append,
    Check,
    Condition,
    Eq,
    Ge,
    Gt,
    Has,
    In,
    Op,
    Put,
    Record,
    Remove,
    Set,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store import index
from dispatcher.store.base import job_state, status
from dispatcher.store.deployments import Deployments
from dispatcher.store.held import WAITING
from dispatcher.store.runner import expire_pages_later, fit_pages, page_expiry

TRIES = 3
# A finished state's list of one kind without a window reads at most this many index rows of
# each of its partitions (nine), newest first: see OperatorStore.list_jobs.
FILTERED_READ = 1000


def _check_mark(job: Job, by: str | None, only: JobState | None) -> None:
    """AlreadyActed if the bulk action ``by`` has acted on ``job`` (its history's mark);
    ConflictError if the job is no longer in the state ``only`` it was selected in."""
    if by and any(isinstance(h, dict) and h.get("by") == by for h in job.history):
        raise AlreadyActed(f"already acted on by {by}", job_id=job.job_id)
    if only is not None and job.state != only:
        raise ConflictError(f"now {job.state}, no longer {only}", job_id=job.job_id)


def _where(kind: str | None, scheduled_after: float | None) -> Condition | None:
    """The index filter of the job queries: of this kind; scheduled after (not_before)."""
    where: list[Condition] = []
    if kind:
        where.append(Eq("kind", kind))
    if scheduled_after is not None:
        where.append(Gt("not_before", scheduled_after))
    return And(*where) if len(where) > 1 else (where[0] if where else None)


class OperatorStore(Deployments):
    """Operator actions and queries (and ``longjobs deploy``'s deployment record)."""

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
               only: JobState | None = None) -> Job:
        """Cancel now if not started, else request it from the job's running task.

        ``reason``: the operator's words, kept in the job's reason. ``by``: the bulk action
        doing this (``dispatcher.ops.bulk``); a job cancelled at once keeps it in its history,
        and a job that already has it raises AlreadyActed (a resumed run acts once). A cancel
        *request* leaves the job to its task's runner (it alone writes the job then): it is
        done once anyway, as a repeated request finds itself standing. ``only``: act only on
        a job still in this state (a bulk action's filter), else ConflictError."""
        for _ in range(TRIES):
            job = self._job(job_id)
            _check_mark(job, by, only)
            if job.state in TERMINAL_JOB_STATES:
                raise LongjobsError(f"job is already {job.state}; nothing to cancel",
                                    job_id=job_id)
            bundle = self.get_bundle(job.bundle_id) if job.bundle_id else None
            try:
                if job.state == JobState.PENDING and (bundle is None
                                                      or bundle.state == BundleState.PENDING):
                    self._cancel_now(job, bundle, reason=reason, by=by)
                else:
                    self._request_cancel(job, bundle)
                return self._job(job_id)
            except ConflictError:
                continue  # the job or its bundle moved on: look again
        raise ConflictError("job kept changing while cancelling; try again", job_id=job_id)

    def _cancel_now(self, job: Job, bundle: Bundle | None, *, reason: str | None = None,
                    by: str | None = None) -> None:
        lifecycle.check_job(job.job_id, job.state, JobState.CANCELLED)
        t = self.clock()
        # A bulk cancel's mark: a boundary entry, like a retry's (who acted, and why).
        mark = [Set("history", sizes.bound_history([*job.history, {
            "cancelled_at": t, "by": by, "reason": reason}]))] if by else []
        others = [] if bundle is None else [
            j for j in self.get_jobs(bundle.job_ids)
            if j.job_id != job.job_id and j.bundle_id == bundle.bundle_id]
        ops: list[Op] = [Update(r.job_key(job.job_id), [
            *job_state(job.job_id, JobState.CANCELLED, t),
            Set("reason", "cancelled on request before it started"
                + (f": {reason}" if reason else "")), *mark, *self._expires(t)],
            Eq("state", str(JobState.PENDING)))]
        pages_later: list[list[Op]] = []
        if bundle is not None:
            cond = And(Eq("state", str(BundleState.PENDING)), Eq("attempt", bundle.attempt))
            if all(j.state in TERMINAL_JOB_STATES for j in others):  # the last one: close it
                lifecycle.check_bundle(bundle.bundle_id, bundle.state, BundleState.DONE)
                ops.append(Update(r.bundle_key(bundle.bundle_id),
                                  [*status(r.bundle_status(BundleState.DONE), t),
                                   *self._expires(t)], cond))
                # DONE: its pages may expire with it (kept until now: see page_expiry).
                pages_now, pages_later = fit_pages(
                    page_expiry(bundle.bundle_id, bundle.pages, self._expiry(t)), len(ops), [])
                ops += pages_now
            else:
                ops.append(Check(r.bundle_key(bundle.bundle_id), cond))
        self._transact(ops, "changed while cancelling", job_id=job.job_id)
        if bundle is not None:
            expire_pages_later(self.table, bundle.bundle_id, pages_later)

    def _request_cancel(self, job: Job, bundle: Bundle | None) -> None:
        """A cancel request on the job's active bundle: each job once (a repeated ``jobs
        cancel`` finds its request standing), and at most MAX_CANCEL_REQUESTS per bundle, so
        the bundle's item keeps its size budget (dispatcher.domain.sizes). Two operators
        cancelling one job at the same instant may both append it: harmless, the runner reads
        a set."""
        if bundle is None:
            raise LongjobsError("job has no bundle to stop", job_id=job.job_id)
        rec = self.table.get(r.bundle_key(bundle.bundle_id))
        requested = (rec.cancel_jobs if rec else None) or []
        if job.job_id in requested:
            return
        if len(requested) >= sizes.MAX_CANCEL_REQUESTS:
            raise LongjobsError(f"bundle {bundle.bundle_id} already holds {len(requested)} "
                                "cancel requests, the most its item keeps (DynamoDB's "
                                "400 KB item limit); this job was not cancelled",
                                job_id=job.job_id)
        self._write(Update(r.bundle_key(bundle.bundle_id), [Append("cancel_jobs", [job.job_id])],
                           In("state", [str(s) for s in ACTIVE_BUNDLE_STATES])),
                    "bundle changed", job_id=job.job_id)

    def retry(self, job_id: str, *, from_scratch: bool = False, reason: str | None = None,
              by: str | None = None, only: JobState | None = None) -> Job:
        """FAILED or CANCELLED -> PENDING with a fresh budget, in a new bundle (held while a
        run of the job may still be alive: ``Job.live_task``).

        The rerun resumes from the job's last checkpoint (the handler sees it as
        ``ctx.last_checkpoint``), as a rerun after a crash does; ``from_scratch`` drops it.
        ``reason`` and ``by`` (a bulk action) as for :meth:`cancel`: kept in the job's reason
        and in its history's retry boundary; a job already marked by ``by`` raises
        AlreadyActed; ``only`` as for :meth:`cancel`."""
        job = self._job(job_id)
        _check_mark(job, by, only)
        if job.state not in (JobState.FAILED, JobState.CANCELLED):
            raise LongjobsError(f"only FAILED or CANCELLED jobs can be retried, not {job.state}",
                                job_id=job_id)
        lifecycle.check_job(job_id, job.state, JobState.PENDING)
        t = self.clock()
        # A run of the job may still be alive in job.live_task (abandoned, or failed as
        # overdue while its task ran on): the new bundle is held until the tick's
        # reconciliation sees that task stopped, so two runs never overlap (lifecycle,
        # "Live runs"). The retry is recorded now; only its launch waits.
        due = lifecycle.HELD_AT if job.live_task else max(t, job.not_before or 0.0)
        # The job's own bundle of one: its priority, task size and schedule, as it was
        # admitted with; its kind, so that it counts its one slot against the kind's limit
        # if the kind has one (the tick counts only limited kinds).
        bundle = Bundle(bundle_id=new_id(), job_ids=[job_id],
                        estimated_seconds=job.estimated_seconds or 0.0,
                        next_attempt_at=due, created_at=t,
                        priority=job.priority, resources=job.resources, kind=job.kind,
                        slots=1)
        waits = f"{WAITING}{job.live_task} is known stopped (a run of this job may still " \
            "be alive there)" if job.live_task else ""
        self._transact([
            Put(r.bundle_record(bundle), Absent()),
            Update(r.job_key(job_id), [
                *job_state(job_id, JobState.PENDING, t),
                Set("attempts", 0), Set("infra_attempts", 0), Set("bundle_id", bundle.bundle_id),
                Set("reason", f"retried on request after {job.state}"
                    + (" from scratch" if from_scratch else "")
                    + (f": {reason}" if reason else "") + waits),
                # The retry's boundary in the attempt history: attempts count from 1 again.
                Set("history", sizes.bound_history([*job.history, {
                    "retried_at": t, "after": str(job.state), "from_scratch": from_scratch,
                    **({"by": by, "reason": reason} if by else {})}])),
                Remove("expires_at"), *([Remove("checkpoint")] if from_scratch else [])],
                Eq("state", str(job.state)))],
            "job changed while retrying; try again", job_id=job_id)
        return self._job(job_id)

    # -- queries --------------------------------------------------------------------------------
    def list_jobs(self, state: JobState, *, since: float | None = None,
                  kind: str | None = None, limit: int | None = 50,
                  scheduled_after: float | None = None) -> list[Record]:
        """Jobs (or REJECTED records) in ``state``, newest first by creation time; with
        ``scheduled_after``, only those whose ``not_before`` is later (SCHEDULED ones).

        A finished state's list of one ``kind`` with no ``since`` looks among the newest
        :data:`FILTERED_READ` of each index partition: the filter would otherwise read the
        state's whole history to find a kind that is rare (or gone). An active state's is
        bounded by the active work; a ``since`` bounds it by the window asked for."""
        if kind and since is None and scheduled_after is None and limit is not None \
                and state in TERMINAL_JOB_STATES:
            return index.newest_matching(self.table, r.job_statuses(state),
                                         lambda rec: rec.kind == kind, limit=limit,
                                         read_at_most=FILTERED_READ)
        return index.query(self.table, r.job_statuses(state),
                           at_least=r.iso(since) if since is not None else None,
                           where=_where(kind, scheduled_after), limit=limit, newest_first=True)

    def detail(self, job_id: str) -> tuple[Record, Record | None] | None:
        """A job's record (or its REJECTED record) and its bundle's record."""
        rec = self.table.get(r.job_key(job_id)) or self.table.get(r.rejection_key(job_id))
        if rec is None:
            return None
        bundle = self.table.get(r.bundle_key(rec.bundle_id)) if rec.bundle_id else None
        return rec, bundle

    def tick_summary(self) -> TickSummary | None:
        """The last tick's view of the slots (what a job's ``waiting_for`` is derived from)."""
        rec = self.table.get(r.TICK_KEY)
        return TickSummary.from_json(rec.summary) if rec is not None else None

    def bundle_records(self, bundle_ids: list[str]) -> list[Record]:
        """The bundles' records, one read per 100 (those that exist)."""
        return self.table.get_many([r.bundle_key(b) for b in dict.fromkeys(bundle_ids)])

    def count_jobs(self, state: JobState, *, since: float | None = None,
                   kind: str | None = None, scheduled_after: float | None = None) -> int:
        """Jobs (or REJECTED records) in ``state``; with ``since``, those created since; with
        ``kind`` and ``scheduled_after``, as :meth:`list_jobs` filters."""
        return index.count(self.table, r.job_statuses(state),
                           at_least=r.iso(since) if since is not None else None,
                           where=_where(kind, scheduled_after))

    def job_pages(self, state: JobState, *, since: float | None = None,
                  kind: str | None = None, scheduled_after: float | None = None,
                  page: int = index.PAGE) -> Iterator[list[Record]]:
        """Every job in ``state`` (filtered as :meth:`count_jobs`), page by page, never more
        than ``page`` index rows held (:func:`dispatcher.store.index.pages`)."""
        return index.pages(self.table, r.job_statuses(state),
                           at_least=r.iso(since) if since is not None else None,
                           where=_where(kind, scheduled_after), page=page)

    def job_records(self, job_ids: list[str]) -> list[Record]:
        return self.table.get_many([r.job_key(j) for j in job_ids])

    def launch_failed_since(self, cutoff: float) -> list[Bundle]:
        """PENDING bundles that RunTask refused, changed since ``cutoff``."""
        return [r.record_bundle(rec) for rec in self.table.query(
            r.bundle_status(BundleState.PENDING), where=And(
                Ge("updated_at", cutoff), Gt("launch_failures", 0), Has("last_failure")))]

    def relaunched_since(self, cutoff: float) -> list[Bundle]:
        """Bundles launched more than once whose state changed since ``cutoff``."""
        return [r.record_bundle(rec) for state in BundleState for rec in self.table.query(
            r.bundle_status(state), at_least=r.iso(cutoff), where=Gt("attempt", 1))]
