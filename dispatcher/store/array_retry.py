"""An array's retry in progress, kept on its parent until every child it retries is retried.

An array of many children cannot be retried in one transaction (100 actions), and a retry cut
short between its writes must leave no child running while its parent counts it ended, nor a
parent decided again from children not yet retried. So the retry is a cursor on the parent:

- The operator's write reopens the parent (RUNNING, its tally read again from child 0, its
  open marker back) and sets ``array_retry_next`` to 0 and ``array_retry`` to how far the
  retry goes (the children recorded then) and how (from scratch, the operator's reason).
- The children are read a page of 100 at a time, and the ended ones retried into bundles
  packed as admission packs its jobs (small children of one shape share a bundle of up to
  ``job_ops.RETRY_BUNDLE_JOBS``, which one transaction writes with them; where the ended
  children are dense, a bundle not full yet waits for the next page's). Each transaction
  checks the cursor is where the one before left it and the parent still open, and moves it
  to the first child it leaves for later (the last one removes it): a child below the
  cursor is never looked at again, so none is retried twice, and none waiting is behind it.
  A page with no ended child and none waiting is one conditional write of its cursor's
  move.
- The ticks settle the parent only below the cursor (``ArrayRecords.settle_array``): a child
  not yet retried is never counted, and a retried one is unfinished, so never counted ended
  before it ends again.
- Whoever runs next carries a retry cut short to its end: the operator's process goes on
  page by page; a tick that settles the array goes on from the cursor first, a few pages a
  tick. Two at once cannot both write from one cursor (the fence): the one refused stops
  and leaves it to the other.
- An array decided again meanwhile (its retried children failed again past its tolerance)
  or cancelled ends the retry: its fence refuses the later pages, and the write that decides
  or cancels the parent removes the cursor (its reason says where the retry ended). The
  children not reached stay as they were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from dispatcher.domain import arrays, sizes
from dispatcher.domain.bundle_sizes import BundleSizes
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    Action,
    And,
    Condition,
    ConditionFailed,
    Eq,
    Has,
    In,
    Op,
    Record,
    Remove,
    Set,
    Table,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store import job_ops

# Pages a tick carries one array's retry on (each a read and up to three transactions): the
# rest goes on at the next ticks, so a tick's end stays short however large the array.
TICK_PAGES = 10
# A page of children, read with one BatchGetItem (at most 100 items a call).
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_BatchGetItem.html
CHILD_PAGE = 100
NEXT = "array_retry_next"
OPEN_STATES = [str(JobState.PENDING), str(JobState.RUNNING)]


class ChildWrites(Protocol):
    """What a retry's pages use of a store (an operator's or a tick's)."""

    table: Table
    clock: Callable[[], float]
    bundle_sizes: BundleSizes  # how the retried children are packed into bundles

    def get_jobs(self, job_ids: list[str]) -> list[Job]: ...
    def _transact_retrying(self, ops: list[Op]) -> None: ...


@dataclass(frozen=True)
class ArrayRetry:
    """A retry of an array's ended children in progress: ``next`` is the first child not
    yet looked at, ``through`` the children recorded when it began (those after are new)."""

    parent_id: str
    next: int
    through: int
    from_scratch: bool = False
    reason: str | None = None

    @classmethod
    def of(cls, rec: Record) -> ArrayRetry | None:
        if rec.array_retry_next is None or not isinstance(rec.array_retry, dict):
            return None
        how = rec.array_retry
        return cls(r.ident(rec.pk), int(rec.array_retry_next), int(how.get("through", 0)),
                   bool(how.get("from_scratch")), how.get("reason"))

    def begin(self) -> list[Action]:
        """The actions, in the parent's reopening write, that start it."""
        reason = None if self.reason is None else sizes.clip_text(self.reason,
                                                                  sizes.MAX_REASON_BYTES)
        return [Set(NEXT, self.next), Set("array_retry", {
            "through": self.through, "from_scratch": self.from_scratch, "reason": reason})]

    def fence(self) -> Condition:
        """The parent still open and the retry still at this page."""
        return And(Eq(NEXT, self.next), In("state", OPEN_STATES))


END: list[Action] = [Remove(NEXT), Remove("array_retry")]


def stop(table: Table, parent_id: str) -> None:
    """End the retry in progress on the parent (if any) before it is cancelled: no page is
    retried after this write, so the children a cancel reads next are all there will be. The
    children it has not reached stay as they are."""
    with contextlib.suppress(ConditionFailed):
        table.write(Update(r.job_key(parent_id), END, Has(NEXT)))


def go_on(store: ChildWrites, retry: ArrayRetry, pages: int | None = None) -> int | None:
    """Retry the ended children from the cursor on, ``pages`` pages at most (None: to the
    end). Returns None once the retry is done, else a cursor it has reached: every child
    below it has been looked at (the stored cursor is there or further on, unless the
    retry was ended), also when a write was refused and this one stopped: another process
    moved the cursor or changed a child it read, or the parent was decided or cancelled.

    The ended children are retried into bundles packed as admission packs its jobs
    (:func:`job_ops.retry_groups`), across pages where they are dense: when a page brings a
    bundle's worth or more, a bundle that more children of its shape could still join waits
    for the next page's (the cursor stays at its first child, so a carrier cut short leaves
    none of them behind the cursor); the last page read writes what is left."""
    if pages is not None and pages < 1:
        return retry.next
    done = 0
    read = retry.next  # the first child not read yet
    waiting: list[Job] = []  # ended children read, in bundles not full yet, in index order
    while True:
        stop = min(retry.through, read + CHILD_PAGE)
        done += 1
        last = stop >= retry.through or (pages is not None and done >= pages)
        moved = _page(store, retry, waiting + _ended(store, retry, read, stop), stop, last)
        if moved is None:
            return retry.next
        retry, waiting = moved
        read = stop
        if last:
            return None if stop >= retry.through else stop


def _ended(store: ChildWrites, retry: ArrayRetry, start: int, stop: int) -> list[Job]:
    """Children ``start`` to ``stop`` that ended FAILED or CANCELLED, in index order (one
    BatchGetItem), each checked for its retry."""
    ids = [arrays.child_id(retry.parent_id, i) for i in range(start, stop)]
    ended = [job for job in store.get_jobs(ids)  # in index order
             if job.state in (JobState.FAILED, JobState.CANCELLED)]
    for job in ended:
        job_ops.check_retry(job, None, None, by_its_array=True)
    return ended


def _page(store: ChildWrites, retry: ArrayRetry, ended: list[Job], stop: int,
          last: bool) -> tuple[ArrayRetry, list[Job]] | None:
    """Retry the ``ended`` children read below ``stop`` (those an earlier page left waiting
    first): the bundles closed (every one if ``last`` or if fewer than a bundle holds were
    read), in transactions that each check the cursor is where the one before left it and
    move it to the first child that a later one retries or that is left waiting (else to
    ``stop``, or removing it at the end): a carrier that dies between them leaves no retried
    child below the cursor to be looked at again, and no child still to retry below it.
    Returns the retry as the cursor is then and the children left waiting; None if a write
    was refused (nothing of that transaction was written)."""
    t = store.clock()
    closed, open_ = job_ops.retry_groups(ended, store.bundle_sizes, t=t)
    # A bundle not full yet waits for the next page's children only while they come dense
    # (a bundle's worth in hand): fewer are retried with their page, as they were read.
    if last or len(ended) < job_ops.RETRY_BUNDLE_JOBS:
        closed, open_ = [*closed, *open_], []
    index = {j.job_id: int(j.array_index or 0) for j in ended}
    waiting = sorted((j for g in open_ for j in g), key=lambda j: index[j.job_id])
    units = [job_ops.retry_unit(g, t=t, from_scratch=retry.from_scratch, reason=retry.reason)
             for g in closed]
    key = r.job_key(retry.parent_id)
    if not units:
        if waiting:  # nothing to write yet: the cursor stays at the first child waiting
            return retry, waiting
        # Nothing to retry here: the cursor's move alone, a plain conditional write.
        try:
            store.table.write(Update(key, [Set(NEXT, stop)] if stop < retry.through else END,
                                     retry.fence()))
        except ConditionFailed:
            return None
        return replace(retry, next=stop), waiting
    # One action of each transaction is the parent's: the cursor's move.
    groups = job_ops.pack(units, MAX_TRANSACTION_ITEMS - 1)
    for n, group in enumerate(groups):
        to = min([index[j] for g in groups[n + 1:] for u in g for j in u.job_ids]
                 + [index[j.job_id] for j in waiting], default=stop)
        moved = Update(key, [Set(NEXT, to)] if to < retry.through else END, retry.fence())
        try:
            store._transact_retrying([*(op for u in group for op in u.ops), moved])
        except TransactionCancelled as exc:
            if exc.failed_conditions():
                return None
            raise
        retry = replace(retry, next=to)
    return retry, waiting

