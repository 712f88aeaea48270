"""The writes of one operator action on jobs, written once for both of its callers: a single
``jobs cancel|retry`` (:meth:`OperatorStore.cancel`, :meth:`OperatorStore.retry`) and a page
of a bulk action (:meth:`OperatorStore.cancel_page`, :meth:`OperatorStore.retry_page`), which
groups many of them into few transactions (:func:`pack`).

Each function here only decides and builds: the reads are the caller's, and so is the
transaction; the conditions on each op are the fences, whichever call carries them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dispatcher.domain import labels, lifecycle, rate_limits, sizes, tenants
from dispatcher.domain.bundle_sizes import BundleSizes
from dispatcher.domain.bundles import (
    ACTIVE_BUNDLE_STATES,
    Bundle,
    BundleState,
    jobs_timeout,
    lone_batch,
    new_bundle_id,
)
from dispatcher.domain.cancels import NotCancelled
from dispatcher.domain.errors import ConflictError, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState, new_id
from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    Absent,
    Action,
    And,
    Append,
    Check,
    Condition,
    Eq,
    In,
    Op,
    Put,
    Remove,
    Set,
    Update,
)
from dispatcher.store import bulk_marks
from dispatcher.store import codec as r
from dispatcher.store.base import job_state, pack_groups, status
from dispatcher.store.held import WAITING
from dispatcher.store.state_writes import UPDATES_BYTES, fit_pages, page_expiry


def check_mark(job: Job, by: str | None, only: JobState | None, *,
               resume: bool = False) -> None:
    """AlreadyActed if the bulk action ``by`` has acted on ``job`` (its mark); MarkNotKept if
    ``resume`` (a run of an action started before) cannot tell (:mod:`.bulk_marks`);
    ConflictError if the job is no longer in the state ``only`` it was selected in."""
    if by:
        bulk_marks.check(job, by, resume=resume)
    if only is not None and job.state != only:
        raise ConflictError(f"now {job.state}, no longer {only}", job_id=job.job_id)


def marked(job: Job, by: str | None, actions: list[Action], cond: Condition
           ) -> tuple[list[Action], Condition]:
    """The acting write's ``actions`` and ``cond`` with bulk action ``by``'s mark added (and
    its fence), in the same conditional write; unchanged for a single action (no ``by``)."""
    if not by:
        return actions, cond
    mark, fence = bulk_marks.mark(job, by)
    return [*actions, *mark], And(cond, fence)


def check_cancel(job: Job, by: str | None, only: JobState | None, *,
                 resume: bool = False) -> None:
    """Raises as :func:`check_mark` does, or if the job has finished: nothing to cancel."""
    check_mark(job, by, only, resume=resume)
    if job.state in TERMINAL_JOB_STATES:
        raise LongjobsError(f"job is already {job.state}; nothing to cancel", job_id=job.job_id)


def cancels_now(job: Job, bundle: Bundle | None) -> bool:
    """Whether a cancel of ``job`` (checked by :func:`check_cancel`), in ``bundle``, is done
    at once (True: it has not started) or requested from its task (False)."""
    return job.state == JobState.PENDING and (bundle is None
                                              or bundle.state == BundleState.PENDING)


def cancel_ops(jobs: list[Job], bundle: Bundle | None, others: list[Job], *, t: float,
               expires_at: int | None, reason: str | None = None,
               by: str | None = None) -> tuple[list[Op], list[list[Op]]]:
    """The ops cancelling ``jobs`` at once, all of one ``bundle`` (None: they have none), whose
    other jobs are ``others``: each job from PENDING, and the bundle fenced as PENDING at its
    attempt, closed DONE when no other job of it is left unfinished. The second value: the
    transactions giving the rest of a closed bundle's pages their expiry, made after these
    ops commit (:func:`dispatcher.store.state_writes.expire_pages_later`)."""
    expires: list[Action] = [] if expires_at is None else [Set("expires_at", expires_at)]
    ops: list[Op] = [cancel_op(job, t=t, expires_at=expires_at, reason=reason, by=by)
                     for job in jobs]
    if bundle is None:
        return ops, []
    cond = And(Eq("state", str(BundleState.PENDING)), Eq("attempt", bundle.attempt))
    if any(j.state not in TERMINAL_JOB_STATES for j in others):
        return [*ops, Check(r.bundle_key(bundle.bundle_id), cond)], []
    # The last of its jobs: close it.
    lifecycle.check_bundle(bundle.bundle_id, bundle.state, BundleState.DONE)
    ops.append(Update(r.bundle_key(bundle.bundle_id),
                      [*status(r.bundle_status(BundleState.DONE), t), *expires], cond))
    # DONE: its pages may expire with it (kept until now: see page_expiry).
    pages_now, pages_later = fit_pages(page_expiry(bundle.bundle_id, bundle.pages, expires_at),
                                       len(ops), [])
    return ops + pages_now, pages_later


# The reason of a job of an active bundle cancelled in the table (not by its task's runner):
# a later cancel of that bundle's jobs counts these among the jobs its runner may hold read.
BEFORE_ITS_TASK = "cancelled on request before its task started it"


def cancel_op(job: Job, *, t: float, expires_at: int | None, reason: str | None = None,
              by: str | None = None, in_bundle: str | None = None) -> Update:
    """The update cancelling ``job`` from PENDING (checked by :func:`check_cancel`), before it
    started; ``in_bundle``: only while it is still a job of that (active) bundle, whose task
    then skips it when it reads it (:func:`dispatcher.store.task_cancels.cancel_in_tasks`)."""
    lifecycle.check_job(job.job_id, job.state, JobState.CANCELLED)
    expires: list[Action] = [] if expires_at is None else [Set("expires_at", expires_at)]
    # A bulk cancel's entry in the history: a boundary, like a retry's (who acted, and
    # why), for the operator to read; the mark a resume reads is bulk_marks'.
    said = [Set("history", sizes.bound_history([*job.history, {
        "cancelled_at": t, "by": by, "reason": reason}]))] if by else []
    pending: Condition = Eq("state", str(JobState.PENDING))
    actions, cond = marked(job, by, [
        *job_state(job.job_id, JobState.CANCELLED, t),
        Set("reason", (BEFORE_ITS_TASK if in_bundle else "cancelled on request before it "
                       "started") + (f": {reason}" if reason else "")), *said, *expires],
        pending if in_bundle is None else And(pending, Eq("bundle_id", in_bundle)))
    return Update(r.job_key(job.job_id), actions, cond)


def request_op(bundle_id: str, requested: list[str], job_ids: list[str]
               ) -> tuple[Update | None, dict[str, LongjobsError]]:
    """The write asking the task of active bundle ``bundle_id`` (whose standing requests are
    ``requested``) to cancel ``job_ids``: each job once (a repeated ``jobs cancel`` finds its
    request standing), and at most MAX_CANCEL_REQUESTS per bundle, so the bundle's item keeps
    its size budget (dispatcher.domain.sizes): the jobs past it are refused (the second
    value). None when there is nothing to write. Two operators cancelling one job at the same
    instant may both append it: harmless, the runner reads a set."""
    new = [j for j in dict.fromkeys(job_ids) if j not in requested]
    room = max(0, sizes.MAX_CANCEL_REQUESTS - len(requested))
    refused: dict[str, LongjobsError] = {j: NotCancelled(
        f"bundle {bundle_id} already holds {len(requested) + room} cancel requests, the most "
        "its item keeps (DynamoDB's 400 KB item limit); this job was not cancelled", job_id=j)
        for j in new[room:]}
    if not new[:room]:
        return None, refused
    return Update(r.bundle_key(bundle_id), [Append("cancel_jobs", new[:room])],
                  In("state", [str(s) for s in ACTIVE_BUNDLE_STATES])), refused


def check_retry(job: Job, by: str | None, only: JobState | None, *,
                resume: bool = False, by_its_array: bool = False) -> None:
    """Raises as :func:`check_mark` does, or if the job cannot be retried: it has not ended
    FAILED or CANCELLED, or it is an array's child and not retried by its array's retry. A
    child retried alone would run again under a parent that has decided (or counted it
    already), so the parent would not say how its children ended; its array's retry
    retries every failed child and decides the parent again."""
    check_mark(job, by, only, resume=resume)
    if job.array_parent is not None and not by_its_array:
        raise LongjobsError(f"a child of the array job {job.array_parent}: retry the array "
                            f"(`longjobs jobs retry {job.array_parent}`), which retries its "
                            "FAILED and CANCELLED children and decides it again",
                            job_id=job.job_id)
    if job.state not in (JobState.FAILED, JobState.CANCELLED):
        raise LongjobsError(f"only FAILED or CANCELLED jobs can be retried, not {job.state}",
                            job_id=job.job_id)
    lifecycle.check_job(job.job_id, job.state, JobState.PENDING)


# Most jobs one retry bundle holds: it is written with its jobs in one transaction (the
# bundle's put, their updates and an array retry's cursor move: MAX_TRANSACTION_ITEMS actions).
RETRY_BUNDLE_JOBS = MAX_TRANSACTION_ITEMS - 2


def retry_ops(job: Job, bundle_id: str, *, t: float, from_scratch: bool = False,
              reason: str | None = None, by: str | None = None) -> list[Op]:
    """The ops retrying ``job`` (checked by :func:`check_retry`) into a new bundle of its own,
    ``bundle_id``: its put, and the job back to PENDING if it is still in its state."""
    return retry_bundle_ops([job], bundle_id, t=t, from_scratch=from_scratch, reason=reason,
                            by=by)


def retry_bundle_ops(jobs: list[Job], bundle_id: str, *, t: float, from_scratch: bool = False,
                     reason: str | None = None, by: str | None = None) -> list[Op]:
    """The ops retrying ``jobs`` (each checked by :func:`check_retry`; several only if they
    may share a bundle: :func:`retry_groups`) into one new bundle, ``bundle_id``: its put,
    then each job back to PENDING if it is still in its state, in the order of ``jobs``."""
    first = jobs[0]
    if any(tenants.of_bundle(bundle_id) != j.tenant for j in jobs):  # bundles never mix them
        raise LongjobsError(f"bundle {bundle_id} is not of this job's tenant {first.tenant}",
                            job_id=first.job_id)
    # A run of the job may still be alive in job.live_task (abandoned, or failed as
    # overdue while its task ran on): the new bundle (its own) is held until the tick's
    # reconciliation sees that task stopped, so two runs never overlap (lifecycle,
    # "Live runs"). The retry is recorded now; only its launch waits.
    due = lifecycle.HELD_AT if first.live_task \
        else max(t, *(j.not_before or 0.0 for j in jobs))
    kinds = {j.kind for j in jobs}
    # The jobs' priority, task size and schedule, as they were admitted with (one shape). A
    # job's own bundle keeps its kind and one slot, so that it counts its one run against the
    # kind's limit if the kind has one (the tick counts only limited kinds); a bundle of
    # several is a fresh one (never a follow-on), whose kind is theirs if they share one and
    # whose slots the tick decides when it launches it, as for an admitted bundle. It is of a
    # batch of none (bundles.lone_batch): its task, its jobs done, takes the due work the last
    # tick left waiting (the retry's other bundles among it; dispatcher.store.follow_ons), so
    # a retry of more bundles than free slots runs in the tasks those slots launch, as
    # admitted work does, not a task a bundle.
    shared = len(jobs) > 1
    bundle = Bundle(bundle_id=bundle_id, job_ids=[j.job_id for j in jobs],
                    estimated_seconds=sum(j.estimated_seconds or 0.0 for j in jobs),
                    next_attempt_at=due, created_at=t, priority=first.priority,
                    resources=first.resources,
                    kind=first.kind if len(kinds) == 1 else None, slots=int(not shared),
                    batch=lone_batch(bundle_id) if shared else None,
                    timeout_seconds=jobs_timeout(j.timeout_seconds for j in jobs),
                    uses=rate_limits.needs([j.uses for j in jobs]) or None,
                    labels=labels.shared(j.labels for j in jobs))
    return [Put(r.bundle_record(bundle), Absent()),
            *(_retry_op(job, bundle_id, t=t, from_scratch=from_scratch, reason=reason, by=by)
              for job in jobs)]


def _retry_op(job: Job, bundle_id: str, *, t: float, from_scratch: bool,
              reason: str | None, by: str | None) -> Update:
    """The update moving ``job`` back to PENDING, in ``bundle_id``, if still in its state."""
    waits = f"{WAITING}{job.live_task} is known stopped (a run of this job may still " \
        "be alive there)" if job.live_task else ""
    actions, cond = marked(job, by, [
        *job_state(job.job_id, JobState.PENDING, t),
        Set("attempts", 0), Set("infra_attempts", 0), Set("bundle_id", bundle_id),
        Set("reason", f"retried on request after {job.state}"
            + (" from scratch" if from_scratch else "")
            + (f": {reason}" if reason else "") + waits),
        # The retry's boundary in the attempt history: attempts count from 1 again.
        Set("history", sizes.bound_history([*job.history, {
            "retried_at": t, "after": str(job.state), "from_scratch": from_scratch,
            **({"by": by, "reason": reason} if by else {})}])),
        # A retry waits for no dependency: they decided (or the operator decided for
        # them) when the job ended; it runs now.
        Remove("expires_at"), Remove("depends_on"),
        *([Remove("checkpoint"), Remove("progress")] if from_scratch else [])],
        Eq("state", str(job.state)))
    return Update(r.job_key(job.job_id), actions, cond)


def retry_groups(jobs: list[Job], rule: BundleSizes, *, t: float
                 ) -> tuple[list[list[Job]], list[list[Job]]]:
    """``jobs`` (each checked by :func:`check_retry`) in the bundles their retry makes, packed
    by admission's sizing rule (:meth:`BundleSizes.pack`) as the jobs will run (waiting for
    no dependency), at most RETRY_BUNDLE_JOBS a bundle: the bundles closed, and the last of
    each shape, which more jobs of it could still join. A job whose run may still be alive
    (``live_task``) or that is not small has a bundle of its own, as before."""
    closed, open_ = rule.pack([replace(j, depends_on=None) for j in jobs], t, RETRY_BUNDLE_JOBS)
    by_id = {j.job_id: j for j in jobs}
    return ([[by_id[j.job_id] for j in g] for g in closed],
            [[by_id[j.job_id] for j in g] for g in open_])


def retry_unit(jobs: list[Job], *, t: float, from_scratch: bool = False,
               reason: str | None = None, by: str | None = None,
               bundle_id: str | None = None) -> Unit:
    """One retry bundle of ``jobs`` (a group of :func:`retry_groups`) as a unit: its put and
    their updates commit together (``bundle_id``: a new one unless given)."""
    bundle_id = bundle_id or new_bundle_id(jobs[0].tenant, bool(jobs[0].uses), new_id(),
                                           bool(jobs[0].labels))
    return Unit([j.job_id for j in jobs], retry_bundle_ops(
        jobs, bundle_id, t=t, from_scratch=from_scratch, reason=reason, by=by), [], bundle_id)


@dataclass
class Unit:
    """Ops that must commit together (one bundle's cancels, one job's retry), the jobs they
    act on, and what follows their commit (a closed bundle's remaining page expiries)."""

    job_ids: list[str]
    ops: list[Op]
    later: list[list[Op]]
    bundle_id: str = ""


def op_bytes(op: Op) -> int:
    """An upper estimate of an op's size in a transaction: a job's update is bounded by its
    history (MAX_HISTORY_BYTES) and reason; the rest are small items."""
    if isinstance(op, Update):
        return 512 + sum(sizes.json_bytes(a.value) for a in op.actions if isinstance(a, Set))
    if isinstance(op, Put):
        return 4096
    return 512


def pack(units: list[Unit], max_items: int = MAX_TRANSACTION_ITEMS) -> list[list[Unit]]:
    """Units grouped into transactions within TransactWriteItems' limits: at most 100 actions
    (MAX_TRANSACTION_ITEMS; ``max_items`` leaves room for the caller's own) and 4 MB (kept
    under UPDATES_BYTES, 3,500,000, as the runner's writes are), a unit never split.
    https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
    """
    return pack_groups(units, lambda u: len(u.ops), lambda u: sum(op_bytes(op) for op in u.ops),
                       max_items, UPDATES_BYTES)
