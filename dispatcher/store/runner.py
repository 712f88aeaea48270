"""The job runner's role: a running bundle's writes, each fenced by the claim.

Every write a task makes carries its fence (bundle id, attempt, task ARN) as a condition, so a
task that lost its claim (a duplicate, or a stale task after a rerun) can never overwrite the
state of a newer attempt.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

from dispatcher.domain import lifecycle, sizes
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, HandedJobs
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.ports.table import (
    MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_ITEMS,
    Action,
    Add,
    And,
    Check,
    Condition,
    Eq,
    In,
    Lacks,
    Op,
    Remove,
    Set,
    Table,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import job_state, status
from dispatcher.store.follow_ons import EndRefused, FollowOns, Take
from dispatcher.store.values import Fence, JobOutcomes, JobUpdate

log = logging.getLogger(__name__)

# Transactions cancelled by a concurrent request on one of their items (TransactionConflict:
# e.g. an operator's cancel request landing on the bundle item) are retried this many times.
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html
CONFLICT_TRIES = 5
CONFLICT_BACKOFF_SECONDS = 0.05

# One transaction: the fence check or the bundle's update, plus the job updates, with room to
# spare: at most 100 actions per TransactWriteItems (see dispatcher.ports.table).
JOBS_PER_TRANSACTION = MAX_TRANSACTION_ITEMS - 2
# ... and under TransactWriteItems' 4 MB in all, with room for names and the other attributes:
# 98 results of up to 64 KB each would be 6 MB.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
UPDATES_BYTES = MAX_TRANSACTION_BYTES - 694_304  # 3,500,000
# BatchGetItem reads at most 100 items per call.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
JOB_PAGE = 100
# A page item at most (PAGE#<bundle>#<n>): a transaction's worth of job ids of up to 128
# characters each (dispatcher.domain.message), and its other attributes.
PAGE_ITEM_BYTES = JOBS_PER_TRANSACTION * 129 + 1024


def fenced(f: Fence, states: tuple[BundleState, ...] = (BundleState.RUNNING,)) -> Condition:
    return And(Eq("attempt", f.attempt), Eq("task_arn", f.task_arn),
               In("state", [str(s) for s in states]))


def job_actions(u: JobUpdate, t: float, expires_at: int | None = None) -> list[Action]:
    """The actions of one job update; a job reaching a terminal state gets ``expires_at``."""
    if u.via is not None:
        lifecycle.check_job(u.job_id, u.source, u.via)
        lifecycle.check_job(u.job_id, u.via, u.target)
    elif u.source != u.target:  # same state: bookkeeping only (budgets, history)
        lifecycle.check_job(u.job_id, u.source, u.target)
    # A same-state update is bookkeeping, not a state change: its sequence stays.
    steps = 2 if u.via is not None else 1 if u.source != u.target else 0
    actions: list[Action] = job_state(u.job_id, u.target, t, steps) if steps else [
        Set("state", str(u.target)), Set("status_key", r.job_status(u.target, u.job_id)),
        Set("updated_at", t)]
    if u.attempts_delta:
        actions.append(Add("attempts", u.attempts_delta))
    if u.infra_delta:
        actions.append(Add("infra_attempts", u.infra_delta))
    # What longjobs writes itself is clipped to its budget (dispatcher.domain.sizes), so no
    # update can overfill the job's item; the result was measured against its own by the runner.
    if u.history is not None:
        actions.append(Set("history", sizes.bound_history(u.history)))
    if u.result is not None:
        actions.append(Set("result", u.result))
    if u.error is not None:
        actions.append(Set("error", sizes.bound_error(u.error)))
    if u.settled_by is not None:
        actions.append(Set("settled_by", u.settled_by))
    if u.drop_checkpoint:
        actions.append(Remove("checkpoint"))
    if u.live_task is not None:
        actions.append(Set("live_task", u.live_task))
    if u.reason is not None:
        actions.append(Set("reason", sizes.clip_text(u.reason, sizes.MAX_REASON_BYTES)))
    elif u.target == JobState.SUCCEEDED:
        actions.append(Remove("reason"))  # an earlier attempt's reason no longer applies
    # A finished job whose run goes on in its task (``live_task``) is not finished with yet: it
    # gets its expiry when that task's stop is handled (StageStore.end_live_runs), so TTL
    # never deletes the record that keeps a retry or a resubmit from running beside it.
    if expires_at is not None and u.target in TERMINAL_JOB_STATES and u.live_task is None:
        actions.append(Set("expires_at", expires_at))
    return actions


def update_bytes(u: JobUpdate) -> int:
    """An upper estimate of what one job update writes (its JSON values, and 1 KB for the
    rest: keys, states, numbers, the reason)."""
    values = [v for v in (u.result, u.error, u.history) if v is not None]
    return 1024 + (len(json.dumps(values, default=str)) if values else 0) + \
        len((u.reason or "").encode())


def update_chunks(updates: list[JobUpdate]) -> list[list[JobUpdate]]:
    """Job updates cut into transactions' worth: at most JOBS_PER_TRANSACTION and
    UPDATES_BYTES each, in order; at least one (empty) chunk, for the bundle's own write."""
    chunks: list[list[JobUpdate]] = [[]]
    size = 0
    for u in updates:
        n = update_bytes(u)
        if chunks[-1] and (len(chunks[-1]) >= JOBS_PER_TRANSACTION or size + n > UPDATES_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(u)
        size += n
    return chunks


def job_updates(updates: list[JobUpdate], bundle_id: str, t: float,
                expires_at: int | None = None) -> list[Op]:
    """Each job changes only from the state it was read in, and only within its own bundle
    (a retried job moved to another bundle is not ours any more)."""
    return [Update(r.job_key(u.job_id), job_actions(u, t, expires_at),
                   And(Eq("state", str(u.source)), Eq("bundle_id", bundle_id)))
            for u in updates]


def bundle_actions(target: BundleState, t: float, retry_at: float | None,
                   expires_at: int | None = None, key: str | None = None) -> list[Action]:
    """A bundle's move to ``target`` (under the index key ``key``, by default its state's)."""
    at = retry_at if retry_at is not None else t
    actions = status(key or r.bundle_status(target), t, at=at)
    if target == BundleState.PENDING:
        actions += [Set("next_attempt_at", at), Remove("launch_id")]
    if target == BundleState.DONE and expires_at is not None:
        actions.append(Set("expires_at", expires_at))
    return actions


def pointer_expiry(task_arn: str | None, expires_at: int | None) -> list[Op]:
    """The update giving a task's pointer (``TASK#<arn>``) its expiry, made by the write that
    moves the bundle off that task (DONE, or PENDING to rerun elsewhere). Until then the
    pointer is needed: by the runner looking for its bundle, by the task's stop event, by
    reconciliation; however long the task's jobs run. It costs one small item in that write's
    transaction (which always has room for it), never a call of its own. Unconditional: a
    pointer is written with its bundle's LAUNCHED state, so it exists."""
    if task_arn is None or expires_at is None:
        return []
    return [Update(r.task_key(task_arn), [Set("expires_at", expires_at)])]


def page_expiry(bundle_id: str, pages: int, expires_at: int | None) -> list[Op]:
    """The updates giving a DONE bundle's pages its expiry. Pages are written without one:
    a bundle may wait for its ``not_before``, for capacity or for reruns for any time, and
    its jobs are read from its pages until it is DONE (and DONE is final)."""
    if expires_at is None:
        return []
    return [Update(r.page_key(bundle_id, n), [Set("expires_at", expires_at)])
            for n in range(pages)]


def fit_pages(page_ops: list[Op], items: int,
              chunk: list[JobUpdate]) -> tuple[list[Op], list[list[Op]]]:
    """``page_ops`` split into those that fit in the DONE transaction (which holds ``items``
    items, ``chunk``'s job updates among them) and transactions of their own, to be made
    after it commits (:func:`expire_pages_later`): a bundle whose last write has room pays no
    call for its pages, a large one about one call per 100 pages (9,800 jobs)."""
    by_bytes = (UPDATES_BYTES - sum(update_bytes(u) for u in chunk)) // PAGE_ITEM_BYTES
    room = max(0, min(MAX_TRANSACTION_ITEMS - items, by_bytes))
    rest = page_ops[room:]
    return page_ops[:room], [rest[i:i + MAX_TRANSACTION_ITEMS]
                             for i in range(0, len(rest), MAX_TRANSACTION_ITEMS)]


def expire_pages_later(table: Table, bundle_id: str, transactions: list[list[Op]]) -> None:
    """Give the rest of a DONE bundle's pages their expiry. The bundle is DONE already, so
    this can only come late, never early: if it fails (or the process dies first), those
    pages are kept, which costs storage and never a job; the failure is logged, not raised,
    as what it follows (a runner's last write, a stop's settle) has succeeded."""
    for ops in transactions:
        try:
            table.transact(ops)
        except Exception as exc:  # a cleanup: logged, and the pages are kept
            log.warning("the pages of a DONE bundle were not set to expire; they are kept",
                        extra={"bundle_id": bundle_id, "error": repr(exc)})
            return


def handed_as_read(bundle: Bundle) -> Condition:
    """No job was handed to ``bundle`` since it was read: a write that ends or settles it
    then covers every job it has (dispatcher/stages/handoff.py)."""
    return Eq("handed", len(bundle.handed_jobs)) if bundle.takes_handed else Lacks("handed")


@dataclass(frozen=True)
class Claim:
    """A claimed bundle, and the cancellations requested before its task claimed it."""

    bundle: Bundle
    cancel_requested: frozenset[str]


@dataclass(frozen=True)
class Beat:
    """What a heartbeat learns: the cancel requests, and every job handed to the bundle."""

    cancel_requested: frozenset[str]
    handed: tuple[str, ...] = ()


class RunnerStore(FollowOns):
    """A running bundle's writes, each fenced by the claim (the job runner)."""

    def claim(self, fence: Fence) -> Claim:
        """LAUNCHED -> RUNNING for exactly this task and attempt; ConflictError if lost.

        The update returns the bundle as written, with the cancel requests an operator made
        while it waited for its task, so a cancel before the job starts is not lost."""
        t = self.clock()
        # ``handed`` (ADD 0: set to 0 if missing, kept on a rerun) says this runner takes
        # urgent jobs handed to its bundle while it runs; a runner of an older release, which
        # would not, leaves it missing, and then nothing is handed to it.
        rec = self._write(Update(r.bundle_key(fence.bundle_id), [
            *bundle_actions(BundleState.RUNNING, t, None), Set("heartbeat_at", t),
            Add("handed", 0)],
            fenced(fence, (BundleState.LAUNCHED,))),
            f"task {fence.task_arn} lost the claim of bundle {fence.bundle_id} "
            f"attempt {fence.attempt}")
        assert rec is not None  # an Update returns the item
        bundle = r.record_bundle(rec)
        bundle.job_ids = self.job_ids_of(bundle)  # a paged bundle's ids are on its pages
        return Claim(bundle, frozenset(rec.cancel_jobs or ()))

    def heartbeat(self, fence: Fence, running: Collection[str] = ()) -> Beat:
        """Prove liveness and say which jobs run now (``running_jobs`` on the bundle, for
        operators); learn, from the item as written (no call more), the job ids whose
        cancellation was requested and the jobs handed to the bundle."""
        actions: list[Action] = [Set("heartbeat_at", self.clock())]
        actions.append(Set("running_jobs", sorted(running)) if running
                       else Remove("running_jobs"))
        rec = self._write(Update(r.bundle_key(fence.bundle_id), actions, fenced(fence)),
                          f"task {fence.task_arn} lost bundle {fence.bundle_id}")
        if rec is None:
            return Beat(frozenset())
        return Beat(frozenset(rec.cancel_jobs or ()), tuple(rec.handed_jobs or ()))

    def bundle_jobs(self, bundle: Bundle, page_size: int = JOB_PAGE) -> Iterator[list[Job]]:
        """The bundle's jobs, a page at a time, in bundle order: a runner holds one page of a
        9,000-job bundle, not all of it."""
        for start in range(0, len(bundle.job_ids), page_size):
            yield self.get_jobs(bundle.job_ids[start:start + page_size])

    def apply(self, fence: Fence, updates: list[JobUpdate],
              bundle_to: BundleState | None = None, retry_at: float | None = None,
              *, handed: int | None = None, slots: int | None = None) -> set[str]:
        """Job results, grouped: one transaction per 98 jobs or 3.5 MB of updates
        (:func:`update_chunks`), each checking the fence; the last one also moves the bundle
        to ``bundle_to``.

        A refused job (its item moved on: failed as overdue, cancelled, retried elsewhere)
        is left out and the rest written again; its id is returned. Only a lost fence raises
        ConflictError: then nothing of this task may be written any more.

        ``handed``: the jobs handed to the bundle that its runner has seen (None: its runner
        takes none). The bundle moves only if no other was handed since; if one was, the
        results are written without the move and HandedJobs raised: the runner runs them.

        ``slots``: the bundle's ``slots`` lowered to the jobs it has left (written with the
        first chunk, when the bundle does not move: see job_runner.writes)."""
        t = self.clock()
        chunks = update_chunks(updates)
        refused: set[str] = set()
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            if last and bundle_to is not None:
                lifecycle.check_bundle(fence.bundle_id, BundleState.RUNNING, bundle_to)
            try:
                refused |= self._apply_chunk(fence, chunk, bundle_to if last else None,
                                             retry_at, t, handed,
                                             slots=slots if n == 0 else None)
            except HandedJobs as more:  # the earlier chunks' refusals go with it
                more.refused |= refused
                raise
        return refused

    def _apply_chunk(self, fence: Fence, chunk: list[JobUpdate], bundle_to: BundleState | None,
                     retry_at: float | None, t: float, handed: int | None = None,
                     slots: int | None = None) -> set[str]:
        key = r.bundle_key(fence.bundle_id)
        expires_at = self._expiry(t)
        moving = fenced(fence)
        if bundle_to is not None and handed is not None:
            moving = And(moving, Eq("handed", handed))
        head: Op = Update(key, bundle_actions(bundle_to, t, retry_at, expires_at), moving) \
            if bundle_to is not None else Check(key, fenced(fence)) if slots is None \
            else Update(key, [Set("slots", slots)], fenced(fence))
        # Moving the bundle off this task (DONE, or PENDING): the task's pointer may expire;
        # a DONE bundle's pages too (Fence.pages: the runner read them at its claim).
        leaving = pointer_expiry(fence.task_arn, expires_at) if bundle_to is not None else []
        pages_now, pages_later = fit_pages(
            page_expiry(fence.bundle_id, fence.pages, expires_at)
            if bundle_to == BundleState.DONE else [], 1 + len(chunk) + len(leaving), chunk)
        refused: set[str] = set()
        conflicts = 0
        while chunk or bundle_to is not None:
            try:
                self.table.transact([head, *job_updates(chunk, fence.bundle_id, t, expires_at),
                                     *leaving, *pages_now])
                expire_pages_later(self.table, fence.bundle_id, pages_later)
                return refused
            except TransactionCancelled as exc:
                failed = exc.failed_conditions()
                if 0 in failed and bundle_to is not None and handed is not None:
                    more = self._handed_since(fence, handed)
                    if more is not None:  # still ours: the results alone, then run those
                        refused |= self._apply_chunk(fence, chunk, None, retry_at, t)
                        raise HandedJobs(f"bundle {fence.bundle_id} was handed jobs its "
                                         "runner has not run yet", more, refused) from None
                if 0 in failed:  # the fence: a newer attempt owns the bundle
                    raise ConflictError(f"task {fence.task_arn} lost bundle "
                                        f"{fence.bundle_id}; its results were not written") \
                        from None
                if failed:  # those jobs moved on: write the others (the list only shrinks)
                    refused |= {chunk[i - 1].job_id for i in failed}
                    chunk = [u for i, u in enumerate(chunk, start=1) if i not in failed]
                    continue
                conflicts += 1
                if conflicts == CONFLICT_TRIES or not any(
                        reason == "TransactionConflict" for reason in exc.reasons):
                    raise
                time.sleep(CONFLICT_BACKOFF_SECONDS * 2 ** (conflicts - 1))
        return refused

    def end_and_take(self, fence: Fence, done: Bundle, ended: JobOutcomes,
                     handed: int | None = None,
                     before: Callable[[], bool] | None = None) -> Take:
        """End ``done`` DONE and take its batch's next follow-on onto this task in one
        transaction (:meth:`take_follow_on`, ``ending``); ``before`` writes ``done``'s last
        results (:meth:`apply` without a move) just before that transaction, and says whether
        the take may go on. Take(None) when
        none is taken, and ``done`` is then still RUNNING, for the runner to end alone
        (``apply`` with DONE, its last results with it).
        ``handed`` as for :meth:`apply`: jobs handed to ``done`` since raise HandedJobs (and
        nothing is written); a lost fence raises ConflictError."""
        lifecycle.check_bundle(fence.bundle_id, BundleState.RUNNING, BundleState.DONE)
        t = self.clock()
        expires_at = self._expiry(t)
        moving = fenced(fence)
        if handed is not None:
            moving = And(moving, Eq("handed", handed))
        head = Update(r.bundle_key(fence.bundle_id),
                      bundle_actions(BundleState.DONE, t, None, expires_at), moving)
        # The take's own items come first (at most six): the pages that fit after them.
        pages_now, pages_later = fit_pages(page_expiry(fence.bundle_id, fence.pages, expires_at),
                                           7, [])
        try:
            take = self.take_follow_on(done, fence.task_arn, ended, [head, *pages_now],
                                       before)
        except EndRefused:
            more = self._handed_since(fence, handed) if handed is not None else None
            if more is not None:
                raise HandedJobs(f"bundle {fence.bundle_id} was handed jobs its runner has "
                                 "not run yet", more) from None
            raise ConflictError(f"task {fence.task_arn} lost bundle {fence.bundle_id}; it "
                                "was not ended") from None
        if take.bundle is not None:
            expire_pages_later(self.table, fence.bundle_id, pages_later)
        return take

    def _handed_since(self, fence: Fence, seen: int) -> list[str] | None:
        """Every job handed to the bundle, if the fence still holds and more than ``seen``
        were handed (why a move of the bundle was refused); None if the fence is lost."""
        rec = self.table.get(r.bundle_key(fence.bundle_id))
        if rec is None or rec.state != str(BundleState.RUNNING) or rec.task_arn != \
                fence.task_arn or int(rec.attempt or 0) != fence.attempt:
            return None
        handed = list(rec.handed_jobs or ())
        return handed if len(handed) > seen else None

    def save_checkpoint(self, fence: Fence, job_id: str, checkpoint: dict[str, Any]) -> None:
        """Persist a running job's progress, fenced like every other write of its task.
        TooLarge for a checkpoint beyond its budget (nothing is written)."""
        sizes.check_checkpoint(checkpoint, job_id)
        try:
            self.table.transact([
                Check(r.bundle_key(fence.bundle_id), fenced(fence)),
                Update(r.job_key(job_id), [Set("checkpoint", checkpoint),
                                           Set("updated_at", self.clock())],
                       And(Eq("state", str(JobState.RUNNING)),
                           Eq("bundle_id", fence.bundle_id)))])
        except TransactionCancelled as exc:
            failed = exc.failed_conditions()
            if 0 in failed:
                raise ConflictError(f"task {fence.task_arn} lost bundle {fence.bundle_id}; "
                                    "checkpoint not written", job_id=job_id) from None
            if failed:
                raise ConflictError("the job is no longer running here (cancelled, failed "
                                    "or retried meanwhile); checkpoint not written",
                                    job_id=job_id) from None
            raise
