"""The job runner's role: a running bundle's writes, each fenced by the claim.

Every write a task makes carries its fence (bundle id, attempt, task ARN) as a condition, so a
task that lost its claim (a duplicate, or a stale task after a rerun) can never overwrite the
state of a newer attempt.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dispatcher.domain import lifecycle, sizes
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError, HandedJobs
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import (
    Action,
    Add,
    And,
    Check,
    Condition,
    Eq,
    In,
    Lacks,
    Op,
    Record,
    Remove,
    Set,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import TableRetry
from dispatcher.store.follow_ons import EndRefused, FollowOns, Take
from dispatcher.store.rate_buckets import RateBuckets
from dispatcher.store.state_writes import (
    bundle_actions,
    expire_pages_later,
    fit_pages,
    job_updates,
    page_expiry,
    pointer_expiry,
    update_chunks,
)
from dispatcher.store.values import Fence, JobOutcomes, JobUpdate

log = logging.getLogger(__name__)

# BatchGetItem reads at most 100 items per call.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
JOB_PAGE = 100
# A runner's claim, its reads of its bundle's jobs and its results writes, refused by the table
# for a moment, are tried again for up to half a minute (waits of up to 1, 2, 4, 8 and 15 s):
# the runner has no hold to keep, and giving up costs its task and a rerun of its bundle. Its
# heartbeat starts after the claim and the read of its jobs, so the two together stay well
# inside the silence after which a task counts as stuck (4 heartbeats: 120 s). A claim's try
# after one that may have committed finds its own write (Store._claim's ``mine``); a results
# write keeps its token once a try may have committed (Store._transact_retrying).
RUNNER_PATIENCE = TableRetry(attempts=6, first_wait=1.0, max_wait=15.0)


def fenced(f: Fence, states: tuple[BundleState, ...] = (BundleState.RUNNING,)) -> Condition:
    return And(Eq("attempt", f.attempt), Eq("task_arn", f.task_arn),
               In("state", [str(s) for s in states]))


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


class RunnerStore(FollowOns, RateBuckets):
    """A running bundle's writes, each fenced by the claim (the job runner)."""

    def claim(self, fence: Fence) -> Claim:
        """LAUNCHED -> RUNNING for exactly this task and attempt; ConflictError if lost.

        The update returns the bundle as written, with the cancel requests an operator made
        while it waited for its task, so a cancel before the job starts is not lost."""
        return self._claim(fence.bundle_id, fenced(fence, (BundleState.LAUNCHED,)),
                           f"task {fence.task_arn} lost the claim of bundle "
                           f"{fence.bundle_id} attempt {fence.attempt}",
                           lambda rec: rec.state == str(BundleState.RUNNING)
                           and rec.task_arn == fence.task_arn
                           and int(rec.attempt or 0) == fence.attempt)

    def claim_assigned(self, task_arn: str) -> Claim | None:
        """The bundle this task's pointer names, claimed as :meth:`claim` does without reading
        it first: on the condition that it is LAUNCHED on this task, which names this launch
        (a task's ARN is its own; a relaunch is another task), so it stands for the attempt.
        None if it is not so (yet): the caller reads it and waits, as
        :func:`job_runner.next_bundle.assigned` does. One read and one write."""
        pointer = self._patiently(RUNNER_PATIENCE, self.table.get, r.task_key(task_arn))
        if pointer is None or not pointer.bundle_id:
            return None
        try:
            return self._claim(pointer.bundle_id, And(Eq("task_arn", task_arn),
                                                      Eq("state", str(BundleState.LAUNCHED))),
                               f"bundle {pointer.bundle_id} is not LAUNCHED on {task_arn}",
                               lambda rec: rec.state == str(BundleState.RUNNING)
                               and rec.task_arn == task_arn)
        except ConflictError:
            return None

    def _claim(self, bundle_id: str, cond: Condition, lost: str,
               mine: Callable[[Record], bool]) -> Claim:
        """``mine``: whether the bundle as read is this task's, RUNNING. A write the table
        applied may still fail (a 5xx, a lost connection, an answer that never came), and the
        write sent again (by :data:`RUNNER_PATIENCE`, or by the SDK's own retries, which this
        cannot see) then finds its condition refused by that first write: the claim's token,
        written with it, tells its own write from another claim's (a second claim of the
        same bundle, even by the same task, has another token and is refused)."""
        token = secrets.token_hex(8)

        def once() -> Record | None:
            t = self.clock()  # each try's own: a claim tried for a while is alive now
            # ``handed`` (ADD 0: set to 0 if missing, kept on a rerun) says this runner takes
            # urgent jobs handed to its bundle while it runs; a runner of an older release,
            # which would not, leaves it missing, and then nothing is handed to it.
            # A relaunch's task: the reports its bundle holds are the lost task's.
            return self._write(Update(r.bundle_key(bundle_id), [
                *bundle_actions(BundleState.RUNNING, t, None), Set("heartbeat_at", t),
                Set("claim_token", token), Add("handed", 0), Remove("progress")], cond), lost)

        try:
            rec = self._patiently(RUNNER_PATIENCE, once)
        except ConflictError:
            rec = self._patiently(RUNNER_PATIENCE, self.table.get, r.bundle_key(bundle_id))
            if rec is None or rec.claim_token != token or not mine(rec):
                raise
        assert rec is not None  # an Update returns the item
        bundle = r.record_bundle(rec)
        # a paged bundle's ids are on its pages
        bundle.job_ids = self._patiently(RUNNER_PATIENCE, self.job_ids_of, bundle)
        return Claim(bundle, frozenset(rec.cancel_jobs or ()))

    def heartbeat(self, fence: Fence, running: Collection[str] = (),
                  progress: Mapping[str, dict[str, Any]] | None = None) -> Beat:
        """Prove liveness and say which jobs run now (``running_jobs`` on the bundle, for
        operators) and how far those that report progress got (``progress``, by job id);
        learn, from the item as written (no call more), the job ids whose cancellation was
        requested and the jobs handed to the bundle."""
        actions: list[Action] = [Set("heartbeat_at", self.clock())]
        actions.append(Set("running_jobs", sorted(running)) if running
                       else Remove("running_jobs"))
        actions.append(Set("progress", dict(progress)) if progress else Remove("progress"))
        rec = self._write(Update(r.bundle_key(fence.bundle_id), actions, fenced(fence)),
                          f"task {fence.task_arn} lost bundle {fence.bundle_id}")
        if rec is None:
            return Beat(frozenset())
        return Beat(frozenset(rec.cancel_jobs or ()), tuple(rec.handed_jobs or ()))

    def jobs_patiently(self, job_ids: list[str]) -> list[Job]:
        """:meth:`get_jobs`, tried again as the runner's claim is (:data:`RUNNER_PATIENCE`):
        the runner's later reads of its jobs (handed ones, ones set aside)."""
        return self._patiently(RUNNER_PATIENCE, self.get_jobs, job_ids)

    def bundle_jobs(self, bundle: Bundle, page_size: int = JOB_PAGE) -> Iterator[list[Job]]:
        """The bundle's jobs, a page at a time, in bundle order: a runner holds one page of a
        9,000-job bundle, not all of it."""
        for start in range(0, len(bundle.job_ids), page_size):
            yield self.jobs_patiently(bundle.job_ids[start:start + page_size])

    def apply(self, fence: Fence, updates: list[JobUpdate],
              bundle_to: BundleState | None = None, retry_at: float | None = None,
              *, handed: int | None = None, slots: int | None = None,
              ended: JobOutcomes | None = None) -> set[str]:
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
        first chunk, when the bundle does not move: see job_runner.writes).

        ``ended``: with a move to DONE, how the runner ended the bundle's jobs, given only
        when it abandoned none and the table refused none of its results before; written on
        the task's pointer with the move (TaskPointer.ended) unless this write refuses one."""
        t = self.clock()
        chunks = update_chunks(updates)
        refused: set[str] = set()
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            if last and bundle_to is not None:
                lifecycle.check_bundle(fence.bundle_id, BundleState.RUNNING, bundle_to)
            try:
                vouched = ended if last and bundle_to == BundleState.DONE and not refused \
                    else None
                refused |= self._apply_chunk(fence, chunk, bundle_to if last else None,
                                             retry_at, t, handed,
                                             slots=slots if n == 0 else None, ended=vouched)
            except HandedJobs as more:  # the earlier chunks' refusals go with it
                more.refused |= refused
                raise
        return refused

    def _apply_chunk(self, fence: Fence, chunk: list[JobUpdate], bundle_to: BundleState | None,
                     retry_at: float | None, t: float, handed: int | None = None,
                     slots: int | None = None, ended: JobOutcomes | None = None) -> set[str]:
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
        counted = (fence.bundle_id, ended) if ended is not None else None
        leaving = pointer_expiry(fence.task_arn, expires_at, counted) \
            if bundle_to is not None else []
        pages_now, pages_later = fit_pages(
            page_expiry(fence.bundle_id, fence.pages, expires_at)
            if bundle_to == BundleState.DONE else [], 1 + len(chunk) + len(leaving), chunk)
        refused: set[str] = set()
        while chunk or bundle_to is not None:
            try:
                # Cancelled for a moment (throttled, TransactionConflict: an operator's cancel
                # request landing on the bundle item) it is tried again for up to half a minute
                # (RUNNER_PATIENCE: a runner has no hold to keep); a runner that gave up on
                # its results would cost its whole bundle a rerun.
                # https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html
                self._transact_retrying([head, *job_updates(chunk, fence.bundle_id, t,
                                                            expires_at), *leaving, *pages_now],
                                        RUNNER_PATIENCE)
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
                    if counted is not None:  # a refused job may name this task as its run's
                        leaving = pointer_expiry(fence.task_arn, expires_at)
                        counted = None
                    continue
                raise  # cancelled for no job's condition: transient past its retries, or not
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

    def save_checkpoint(self, fence: Fence, job_id: str, checkpoint: dict[str, Any],
                        progress: dict[str, Any] | None = None) -> None:
        """Persist a running job's progress, fenced like every other write of its task, with
        its latest progress report if it made one (a rerun resumes both). TooLarge for a
        checkpoint beyond its budget (nothing is written)."""
        sizes.check_checkpoint(checkpoint, job_id)
        reported = [Set("progress", progress)] if progress else []
        try:
            self._transact_retrying([
                Check(r.bundle_key(fence.bundle_id), fenced(fence)),
                Update(r.job_key(job_id), [Set("checkpoint", checkpoint), *reported,
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
