"""An operator's cancel and retry of an array job act on its children (the operator side of
:mod:`dispatcher.store.array_jobs`).

- Cancel: every recorded child still unfinished is cancelled, 100 at a time
  (:meth:`OperatorStore.cancel_page`), then the parent goes CANCELLED (so no tick records
  another child of it: the children source takes only undecided parents); the recorded count
  is read again after, and children a tick recorded meanwhile are cancelled too. A cancel cut
  short anywhere is finished by running it again. A retry of the children still in progress
  is ended first, so none is retried behind the cancel.
- Retry: the parent goes back to RUNNING (PENDING if no child was recorded yet) with its
  tally read again from child 0 and its marker put back, so the ticks settle it again and
  record the children a cancel or an early failure left unrecorded; in the same write a
  retry of its FAILED and CANCELLED children begins, carried page by page
  (:mod:`dispatcher.store.array_retry`) by this process, or by the next tick if it is cut
  short.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from dispatcher.domain import arrays, cancels
from dispatcher.domain.arrays import Tally
from dispatcher.domain.bundle_sizes import BundleSizes
from dispatcher.domain.cancels import NotCancelled
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.ports.table import (
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
from dispatcher.store import array_retry, job_ops
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
    def _job(self, job_id: str) -> Job: ...
    def get_jobs(self, job_ids: list[str]) -> list[Job]: ...
    def cancel_page(self, job_ids: list[str], *, reason: str | None = None,
                    by: str | None = None, only: JobState | None = None) -> list[PageOutcome]: ...

# A cancel reads the recorded count again at most this often, for children a tick recorded
# while it cancelled (a tick records children only while it runs: one more look suffices
# unless ticks overlap the cancel for long).
CANCEL_ROUNDS = 5


def cancel_array(store: JobActions, parent: Job, reason: str | None,
                 by: str | None = None) -> Job:
    """A retry of its children in progress ended first, then its recorded children, then
    the parent (with ``by``'s mark: the bulk action cancelling it), then the children a tick
    recorded meanwhile. A cancel cut short before the parent's write leaves the parent
    undecided (its retry, if one was in progress, ended: the ticks count the children it had
    not reached as they are), so running the cancel again (or resuming the bulk action,
    whose selection still holds it) finishes it; one cut short after it is finished by a
    cancel of the CANCELLED parent, which cancels the children still unfinished rather than
    say there is nothing to cancel."""
    left: dict[str, str] = {}  # the children it could not cancel, and why
    if parent.state in TERMINAL_JOB_STATES:
        if parent.state == JobState.CANCELLED and _cancel_children(store, parent, 0, 1,
                                                                   left)[1]:
            if left:
                raise cancels.incomplete(parent.job_id, left)
            return store._job(parent.job_id)
        raise LongjobsError(f"array job is already {parent.state}; nothing to cancel",
                            job_id=parent.job_id)
    array_retry.stop(store.table, parent.job_id)  # no child is retried after this
    done, _ = _cancel_children(store, parent, 0, 1, left)
    t = store.clock()
    actions, cond = job_ops.marked(parent, by, [
        *job_state(parent.job_id, JobState.CANCELLED, t),
        Set("reason", f"cancelled by an operator{': ' + reason if reason else ''}"),
        *store._expires(t)], Eq("state", str(parent.state)))
    store._transact([Update(r.job_key(parent.job_id), actions, cond)],
                    "the array job changed while cancelling; try again", job_id=parent.job_id)
    _cancel_children(store, parent, done, CANCEL_ROUNDS, left)
    if left:  # the parent is cancelled; these children are not, and the operator is told
        raise cancels.incomplete(parent.job_id, left)
    return store._job(parent.job_id)


def _cancel_children(store: JobActions, parent: Job, done: int, rounds: int,
                     left: dict[str, str]) -> tuple[int, int]:
    """Cancel the recorded children of ``parent`` from index ``done`` on that are still
    unfinished, reading the recorded count again up to ``rounds`` times; returns the count
    read last and how many were cancelled (or asked of their tasks). A child that could not
    be cancelled (:class:`NotCancelled`: its task runs it and cannot be asked to stop it) goes
    into ``left`` with the reason; one that ended meanwhile is done with."""
    acted = 0
    for _ in range(rounds):
        recorded = _recorded(store, parent.job_id)
        if recorded <= done:
            break
        for start in range(done, recorded, CHILD_PAGE):
            ids = [arrays.child_id(parent.job_id, i)
                   for i in range(start, min(recorded, start + CHILD_PAGE))]
            unfinished = [j.job_id for j in store.get_jobs(ids)
                          if j.state not in TERMINAL_JOB_STATES]
            if unfinished:
                acted += len(unfinished)
                for out in store.cancel_page(unfinished, reason=f"its array {parent.job_id} "
                                             "was cancelled"):
                    if isinstance(out.error, NotCancelled):
                        left[out.job_id] = out.error.reason
        done = recorded
    return done, acted


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
