"""An operator's cancel and retry of an array job act on its children (the operator side of
:mod:`dispatcher.store.array_jobs`).

- Cancel: every recorded child still unfinished is cancelled, 100 at a time
  (:meth:`OperatorStore.cancel_page`), then the parent goes CANCELLED, after which no tick
  offers another child of it (a tick raises the parent's ``array_offered`` past a child before
  it offers it, only while the parent is undecided: :mod:`dispatcher.stages.fanout`). The
  parent is read again after that write: the children below its ``array_offered`` and past
  its recorded count (recorded by a tick that died before counting them, or by one still
  recording) are cancelled if they exist, and recorded CANCELLED if not, so a tick still
  holding them finds them taken; the count is then raised over them. So nothing of the array
  starts after the cancel returns. A cancel cut short anywhere is finished by running it
  again. A retry of the children still in progress is ended first, so none is retried behind
  the cancel.
- Retry: the parent goes back to RUNNING (PENDING if no child was recorded yet) with its
  tally read again from child 0 and its marker put back, so the ticks settle it again and
  record the children a cancel or an early failure left unrecorded; in the same write a
  retry of its FAILED and CANCELLED children begins, carried page by page
  (:mod:`dispatcher.store.array_retry`) by this process, or by the next tick if it is cut
  short.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from dispatcher.domain import arrays, cancels
from dispatcher.domain.arrays import Tally
from dispatcher.domain.bundle_sizes import BundleSizes
from dispatcher.domain.cancels import NotCancelled
from dispatcher.domain.errors import AlreadyActed, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.ports.table import (
    Absent,
    Action,
    Eq,
    Op,
    Put,
    Record,
    Remove,
    Set,
    Table,
    TableUnavailable,
    TransactionCancelled,
    Update,
)
from dispatcher.store import array_jobs, array_retry, bulk_marks, job_ops
from dispatcher.store import codec as r
from dispatcher.store.array_retry import CHILD_PAGE, ArrayRetry
from dispatcher.store.base import job_state
from dispatcher.store.values import PageOutcome


class JobActions(Protocol):
    """What these actions use of :class:`dispatcher.store.OperatorStore` (which calls them)."""

    table: Table
    clock: Callable[[], float]
    bundle_sizes: BundleSizes

    def _transact(self, ops: list[Op], lost: str, job_id: str | None = None) -> None: ...
    def _transact_retrying(self, ops: list[Op]) -> None: ...
    def _expires(self, t: float) -> list[Action]: ...
    def _expiry(self, t: float) -> int | None: ...
    def _job(self, job_id: str) -> Job: ...
    def get_jobs(self, job_ids: list[str]) -> list[Job]: ...
    def cancel_page(self, job_ids: list[str], *, reason: str | None = None,
                    by: str | None = None, only: JobState | None = None) -> list[PageOutcome]: ...

def cancel_array(store: JobActions, parent: Job, reason: str | None,
                 by: str | None = None, resume: bool = False) -> Job:
    """A retry of its children in progress ended first, then its recorded children, then
    the parent (with ``by``'s mark: the bulk action cancelling it), then the children a tick
    recorded meanwhile or may still record (:func:`_cancel_rest`). A cancel cut short before
    the parent's write leaves the parent undecided (its retry, if one was in progress, ended:
    the ticks count the children it had not reached as they are), so running the cancel again
    (or resuming the bulk action, whose selection still holds it) finishes it; one cut short
    after it is finished by a cancel of the CANCELLED parent, which cancels the children still
    unfinished rather than say there is nothing to cancel. ``resume``: a resumed run of bulk
    action ``by``, which leaves an array it acted on and that was retried since as it is
    (:func:`_retried_since`)."""
    left: dict[str, str] = {}  # the children it could not cancel, and why
    if parent.state in TERMINAL_JOB_STATES:
        if parent.state == JobState.CANCELLED and _cancel_rest(store, parent, 0, left, by):
            if left:
                raise cancels.incomplete(parent.job_id, left)
            return store._job(parent.job_id)
        raise LongjobsError(f"array job is already {parent.state}; nothing to cancel",
                            job_id=parent.job_id)
    done = _recorded(store, parent.job_id)
    if by and resume and _retried_since(store, parent, done, by):
        raise AlreadyActed(f"already acted on by {by} (its children), and retried since",
                           job_id=parent.job_id)
    array_retry.stop(store.table, parent.job_id)  # no child is retried after this
    for start in range(0, done, CHILD_PAGE):
        _cancel_children(store, parent, list(range(start, min(done, start + CHILD_PAGE))),
                         left, by=by)
    t = store.clock()
    actions, cond = job_ops.marked(parent, by, [
        *job_state(parent.job_id, JobState.CANCELLED, t),
        Set("reason", f"cancelled by an operator{': ' + reason if reason else ''}"),
        *store._expires(t)], Eq("state", str(parent.state)))
    store._transact([Update(r.job_key(parent.job_id), actions, cond)],
                    "the array job changed while cancelling; try again", job_id=parent.job_id)
    _cancel_rest(store, parent, done, left, by)
    if left:  # the parent is cancelled; these children are not, and the operator is told
        raise cancels.incomplete(parent.job_id, left)
    return store._job(parent.job_id)


def _none_stopping(store: JobActions, parent: Job, recorded: int) -> None:
    """A cancelled array's children its cancel asked their tasks to stop, and that have not
    yet: a retry now would pass them by (not ended) and their runners would then cancel them,
    the array failing after a retry meant to run it all. Refused, saying how many and what to
    do (a page of reads per 100 children, only for a cancelled array)."""
    stopping = [j.job_id for page in _pages(store, parent, recorded) for j in page
                if j.state not in TERMINAL_JOB_STATES]
    if stopping:
        raise LongjobsError(
            f"{len(stopping)} of its children are still stopping after its cancel (e.g. "
            f"{', '.join(stopping[:3])}): their tasks end them at their next heartbeat; retry "
            f"it once they have (`longjobs jobs show {parent.job_id}` counts them)",
            job_id=parent.job_id)


def _retried_since(store: JobActions, parent: Job, recorded: int, by: str) -> bool:
    """Whether bulk action ``by`` cancelled children of ``parent`` (its mark on them: a run cut
    short before the parent's own write) that are no longer CANCELLED: an operator retried
    the array since. A resumed run then leaves the whole array as it is, as it leaves any job
    it acted on (once per job across its runs), rather than cancel the retry's children."""
    return any(bulk_marks.acted(j, by) and j.state != JobState.CANCELLED
               for page in _pages(store, parent, recorded) for j in page)


def _pages(store: JobActions, parent: Job, recorded: int) -> Iterator[list[Job]]:
    """The recorded children of ``parent``, a page (one BatchGetItem) at a time, read as they
    are asked for."""
    for start in range(0, recorded, CHILD_PAGE):
        yield store.get_jobs([arrays.child_id(parent.job_id, i)
                              for i in range(start, min(recorded, start + CHILD_PAGE))])


def _cancel_rest(store: JobActions, parent: Job, done: int, left: dict[str, str],
                 by: str | None = None) -> int:
    """After the parent's CANCELLED write, from which on no tick offers a child at or past
    its ``array_offered`` (read here, after it): every child from index ``done`` up to that
    mark cancelled, or recorded CANCELLED if no tick recorded it, and the recorded count raised
    over them (see the module). Returns how many it cancelled or recorded cancelled."""
    rec = store.table.get(r.job_key(parent.job_id))
    offered = int(rec.array_offered or 0) if rec is not None else 0
    recorded = int(rec.array_next or 0) if rec is not None else 0
    acted = 0
    for first, end, record in ((done, recorded, False), (max(done, recorded), offered, True)):
        for start in range(first, end, CHILD_PAGE):
            page = list(range(start, min(end, start + CHILD_PAGE)))
            acted += _cancel_children(store, parent, page, left, record=record, by=by)
    if offered > recorded:  # every child below the mark exists now: count them
        array_jobs.count_recorded(store.table, parent.job_id, offered)
    return acted


def _cancel_children(store: JobActions, parent: Job, indexes: list[int],
                     left: dict[str, str], record: bool = False, by: str | None = None) -> int:
    """Cancel the children of ``parent`` at ``indexes`` that are recorded and unfinished;
    returns how many it cancelled (or asked of their tasks), or recorded cancelled. A child
    that could not be cancelled (:class:`NotCancelled`: its task runs it and cannot be asked to
    stop it) goes into ``left`` with the reason; one that ended meanwhile is done with.
    ``record``: the children past the recorded count (offered, maybe recorded) not found are
    recorded CANCELLED, on the condition that they do not exist yet (one that a tick recorded
    meanwhile is read again, and cancelled as a recorded child)."""
    reason = f"its array {parent.job_id} was cancelled"
    acted = 0
    while indexes:
        ids = {i: arrays.child_id(parent.job_id, i) for i in indexes}
        found = {j.job_id: j for j in store.get_jobs(list(ids.values()))}
        unfinished = [i for i, j in found.items() if j.state not in TERMINAL_JOB_STATES]
        # With the bulk action's mark (``by``): a resumed run skips a child it acted on, as it
        # skips any job, even one retried since (its run acts on each job once).
        for out in store.cancel_page(unfinished, reason=reason, by=by) if unfinished else []:
            if isinstance(out.error, NotCancelled):
                left[out.job_id] = out.error.reason
        acted += len(unfinished)
        # Below the recorded count, a child not found was recorded and has expired since.
        indexes = [i for i, ident in ids.items() if ident not in found] if record else []
        t = store.clock()
        puts: list[Op] = []
        for i in indexes:
            child = arrays.child_of(parent, i, t)
            child.state, child.reason = JobState.CANCELLED, f"{reason} before it was recorded"
            item = r.job_record(child)
            item.expires_at = store._expiry(t)
            puts.append(Put(item, Absent()))
        try:
            if puts:
                store._transact_retrying(puts)
            return acted + len(puts)
        except TransactionCancelled as exc:
            if not exc.failed_conditions():
                raise
    return acted


def retry_array(store: JobActions, parent: Job, *, from_scratch: bool,
                reason: str | None, by: str | None = None) -> Job:
    """Reopen the parent and retry its FAILED and CANCELLED children page by page
    (:mod:`dispatcher.store.array_retry`: cut short anywhere, the next tick goes on from
    where it stopped). ``by``: the bulk action retrying it; its mark goes on the parent, in
    the write that reopens it (a resume then skips the whole array)."""
    if parent.state not in (JobState.FAILED, JobState.CANCELLED):
        raise LongjobsError(f"only a FAILED or CANCELLED array job can be retried, not "
                            f"{parent.state}", job_id=parent.job_id)
    recorded = _recorded(store, parent.job_id)
    if parent.state == JobState.CANCELLED:
        _none_stopping(store, parent, recorded)
    t = store.clock()
    marker = Record(r.array_key(parent.job_id), status_key=r.OPEN_ARRAYS, status_at=r.iso(t),
                    job_id=parent.job_id, priority=str(parent.priority), created_at=t)
    tally = Tally(recorded=recorded)  # read again from child 0 by the next tick
    target = arrays.aggregate(int(parent.array_size or 0), parent.array_tolerated, tally)
    retry = ArrayRetry(parent.job_id, 0, recorded, from_scratch, reason) if recorded else None
    actions, cond = job_ops.marked(parent, by, [
        *job_state(parent.job_id, target, t), Set("array_tally", tally.as_json()),
        Set("reason", f"retried by an operator{': ' + reason if reason else ''}"),
        *(retry.begin() if retry else []),
        Remove("expires_at")],  # undecided again: its end's TTL no longer applies
        Eq("state", str(parent.state)))
    store._transact([Update(r.job_key(parent.job_id), actions, cond), Put(marker)],
                    "the array job changed while retrying; try again", job_id=parent.job_id)
    if retry is not None:
        # The retry is written and under way: if the table fails this process now, the
        # ticks carry it on (`jobs show` says how far it is), so that is no error of this one.
        with contextlib.suppress(TransactionCancelled, TableUnavailable):
            array_retry.go_on(store, retry)
    return store._job(parent.job_id)


def array_counts(parent_id: str, rec: Record) -> dict[str, Any]:
    """What ``jobs show`` says of an array: its size, children recorded, how the settled ones
    ended (the first failed indexes among them), and how many are still unsettled."""
    tally = Tally.from_json(rec.array_tally)
    size, recorded = int(rec.array_size or 0), int(rec.array_next or 0)
    return {"size": size, "recorded": recorded, "tolerated_failures":
            int(rec.array_tolerated or 0),
            # Settled: the children read ended, in index order, up to the first unfinished.
            "by_state": {"SUCCEEDED": tally.succeeded, "FAILED or CANCELLED": tally.failed,
                         "not settled yet": recorded - tally.settled,
                         "not recorded yet": size - recorded},
            "failed_indexes": tally.failed_indexes,
            "children": f"{arrays.child_id(parent_id, 0)} .. "
                        f"{arrays.child_id(parent_id, size - 1)}",
            # A retry of its children still going (the next tick carries it on).
            **({"retrying": f"{retry.next} of {retry.through} children looked at"}
               if (retry := ArrayRetry.of(rec)) is not None else {})}


def _recorded(store: JobActions, parent_id: str) -> int:
    rec = store.table.get(r.job_key(parent_id))
    return int(rec.array_next or 0) if rec is not None else 0
