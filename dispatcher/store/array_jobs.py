"""Array jobs in the table: the parent and its marker, how far its children are recorded, and
what is known of how they ended (the rules are :mod:`dispatcher.domain.arrays`').

An open array has a marker item (``ARRAY#<parent>``, index key ``ARRAY#open``) beside its parent
job, written in the same transaction; the tick reads the markers (one query) instead of
looking for parents among the jobs. Children are recorded by the record stage like any job;
the parent's ``array_next`` says how many are (only ever raised, so a tick that recorded more
and crashed before saying so records them again, as duplicates, and loses none). Its
``array_offered`` bounds the children a tick may have recorded: a tick raises it before it
offers them, only while the parent is undecided, so once an operator's cancel has written the
parent CANCELLED, no child at or past the mark it reads then is ever recorded
(:mod:`dispatcher.store.array_ops`).

How the children ended is read, not counted as they end: :meth:`ArrayRecords.settle_array` reads
them in index order from the first one not known ended (``array_tally.settled``), a page of
100 per BatchGetItem, and stops at the first one still unfinished. Children are recorded,
bundled and launched in index order, so they end roughly in it, and the reads come to one
per 100 children plus one per tick while some run: no write of the runner, the task-event
handler or an operator changes for arrays, and nothing grows with how often a child changes.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

from dispatcher.domain import arrays, sizes
from dispatcher.domain.arrays import Tally
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState, Priority
from dispatcher.ports.table import (
    Absent,
    Action,
    And,
    ConditionFailed,
    Delete,
    Eq,
    In,
    Lacks,
    Lt,
    Op,
    Or,
    Put,
    Record,
    Remove,
    Set,
    Table,
    TransactionCancelled,
    Update,
)
from dispatcher.store import array_retry
from dispatcher.store import codec as r
from dispatcher.store.array_retry import CHILD_PAGE, ArrayRetry, go_on
from dispatcher.store.base import Reads, job_state


@dataclass
class OpenArray:
    """An array whose children are not all recorded or not all ended."""

    parent: Job
    size: int
    tolerated: int
    recorded: int  # array_next: children 0..recorded-1 are recorded
    tally: Tally
    retry: ArrayRetry | None = None  # a retry of its children in progress
    offered: int = 0  # array_offered: no child at or past it was ever offered to be recorded


class ArrayRecords(Reads):
    """The array jobs' part of :class:`~dispatcher.store.StageStore`."""

    def record_parents(self, parents: list[Job]) -> set[str]:
        """Record array parents and their markers; return the ids that existed already."""
        duplicates: set[str] = set()
        for job in parents:
            marker = Record(r.array_key(job.job_id), status_key=r.OPEN_ARRAYS,
                            status_at=r.iso(job.created_at), job_id=job.job_id,
                            priority=str(job.priority), created_at=job.created_at)
            try:
                self._transact_retrying([Put(r.job_record(job), Absent()),
                                         Put(marker, Absent())])
            except TransactionCancelled as exc:
                if not exc.failed_conditions():
                    raise
                duplicates.add(job.job_id)
        return duplicates

    def open_arrays(self, priority: Priority | None = None) -> list[OpenArray]:
        """The open arrays (of ``priority``), oldest first, parents read whole."""
        markers = [m for m in self.table.query(r.OPEN_ARRAYS)
                   if priority is None or (m.priority or Priority.NORMAL) == priority]
        found = {rec.pk: rec for rec in self.table.get_many(
            [r.job_key(m.job_id) for m in markers if m.job_id])}
        # A marker whose parent is gone (expired, or never written): nothing to do.
        return [_open(rec) for m in markers
                if (rec := found.get(r.job_key(m.job_id or ""))) is not None
                and rec.array_size is not None]

    def reread(self, open_arrays: list[OpenArray]) -> list[OpenArray]:
        """The same arrays, their parents read again (one BatchGetItem per 100)."""
        found = {rec.pk: rec for rec in self.table.get_many(
            [r.job_key(a.parent.job_id) for a in open_arrays])}
        return [_open(rec) for a in open_arrays
                if (rec := found.get(r.job_key(a.parent.job_id))) is not None]

    def array_may_start(self, parent: Job, reason: str | None = None,
                        keep: list[dict[str, str | bool]] | None = None) -> None:
        """An array whose dependencies decided: its children may be recorded now (``reason``
        None: its ``depends_on`` is cleared, but for ``keep``, its n_to_n ones, which go on
        deciding child by child), or it is CANCELLED with ``reason`` before any child was
        (or, its dependencies judged again after a retry, with the retry in progress ended).
        ConflictError if the parent changed meanwhile."""
        t = self.clock()
        kept: list[Action] = [Set("depends_on", keep)] if keep else [Remove("depends_on")]
        actions: list[Action] = kept if reason is None else [
            *job_state(parent.job_id, JobState.CANCELLED, t), *array_retry.END,
            Set("reason", sizes.clip_text(reason, sizes.MAX_REASON_BYTES)), *self._expires(t)]
        self._transact([Update(r.job_key(parent.job_id), actions,
                               Eq("state", str(parent.state)))],
                       "the array job changed meanwhile", job_id=parent.job_id)

    def recorded_up_to(self, parent_id: str, n: int) -> None:
        """Children ``0..n-1`` are recorded: raise the parent's ``array_next`` to ``n`` (never
        lower it: a later call may have raised it further already)."""
        count_recorded(self.table, parent_id, n)

    def may_offer(self, parent_id: str, below: int) -> bool:
        """Children below ``below`` may be offered to be recorded: raise the parent's
        ``array_offered`` to it, while the parent is undecided. False once it is decided (an
        operator cancelled it: offer no more of its children; a cancel reads this mark after
        its own write, so it knows every child a tick may still record)."""
        key = r.job_key(parent_id)
        try:
            self.table.write(Update(key, [Set("array_offered", below)], And(
                In("state", UNDECIDED), Or(Lacks("array_offered"), Lt("array_offered", below)))))
            return True
        except ConditionFailed:
            rec = self.table.get(key)  # raised as far by another tick, or decided?
            return rec is not None and rec.state in UNDECIDED \
                and int(rec.array_offered or 0) >= below

    def offered_back(self, parent_id: str, mark: int, down_to: int) -> None:
        """This tick raised ``array_offered`` to ``mark`` and offered no child from ``down_to``
        on: lower it back, unless another write moved it meanwhile (so a cancel does not look
        for children no tick will record)."""
        with contextlib.suppress(ConditionFailed):
            self.table.write(Update(r.job_key(parent_id), [Set("array_offered", down_to)],
                                    Eq("array_offered", mark)))

    def settle_array(self, array: OpenArray, pages: int = 1000) -> OpenArray:
        """Read the children from the first not known ended, in order, until one is
        unfinished (or ``pages`` pages were read); write the parent's state and tally
        if they changed, and close the array (delete its marker) once it is decided and every
        recorded child has ended. A retry of its children in progress goes on first (a few
        pages: ``array_retry.TICK_PAGES``), and only the children it has passed are read
        (:mod:`dispatcher.store.array_retry`)."""
        tally = replace(array.tally, failed_indexes=list(array.tally.failed_indexes))
        readable = array.recorded
        reached: int | None = None
        if array.retry is not None and array.parent.state not in TERMINAL_JOB_STATES:
            reached = go_on(self, array.retry, min(pages, array_retry.TICK_PAGES))
            readable = array.recorded if reached is None else min(readable, reached)
        for _ in range(pages):
            start = tally.settled
            stop = min(readable, start + CHILD_PAGE)
            if start >= stop:
                break
            ids = [arrays.child_id(array.parent.job_id, i) for i in range(start, stop)]
            states = {job.job_id: job.state for job in self.get_jobs(ids)}
            for i, job_id in enumerate(ids, start):
                # Recorded (array_next says so) and gone: expired by TTL long after it ended
                # (an array open past the retention period). Counted as failed rather than
                # guessed a success, and never waited for.
                state = states.get(job_id, JobState.FAILED)
                if state not in TERMINAL_JOB_STATES:
                    break
                tally.add(i, state)
            if tally.settled < stop:
                break
        tally.recorded = array.recorded
        target = arrays.aggregate(array.size, array.tolerated, tally)
        if array.parent.state == JobState.CANCELLED:  # by an operator: it stays so
            target = JobState.CANCELLED
        decided = target in TERMINAL_JOB_STATES
        # Closed once decided and every recorded child has ended: a FAILED array records no
        # more children (dispatcher.stages.fanout), so its recorded ones are all there is.
        close = decided and tally.settled >= array.recorded
        parent = array.parent
        changed = target != parent.state or tally != array.tally
        if changed or close:
            t = self.clock()
            actions: list[Action] = [Set("array_tally", tally.as_json())]
            if target != parent.state:
                actions += job_state(parent.job_id, target, t)
                if decided:  # a retry still in progress ends with it
                    ended = "" if reached is None or array.retry is None else \
                        f"; its retry ended at child {reached} of {array.retry.through}"
                    actions += [*self._expires(t), *(array_retry.END if array.retry else [])]
                    actions.append(Set("reason", _reason(array, tally, target) + ended))
            ops: list[Op] = [Update(r.job_key(parent.job_id), actions,
                                                       Eq("state", str(parent.state)))]
            if close:
                ops.append(Delete(r.array_key(parent.job_id)))
            try:
                self._transact_retrying(ops)
            except TransactionCancelled as exc:
                if not exc.failed_conditions():
                    raise
                return array  # an operator acted on the parent meanwhile: next tick
            parent.state = target
        return OpenArray(parent, array.size, array.tolerated, array.recorded, tally,
                         None if decided else array.retry, array.offered)


# An array parent's states while its children may still be recorded.
UNDECIDED = (str(JobState.PENDING), str(JobState.RUNNING))


def count_recorded(table: Table, parent_id: str, n: int) -> None:
    """Raise ``parent_id``'s ``array_next`` to ``n``, never lowering it."""
    with contextlib.suppress(ConditionFailed):
        table.write(Update(r.job_key(parent_id), [Set("array_next", n)], Lt("array_next", n)))


def _open(rec: Record) -> OpenArray:
    recorded = int(rec.array_next or 0)
    return OpenArray(r.record_job(rec), int(rec.array_size or 0), int(rec.array_tolerated or 0),
                     recorded, Tally.from_json(rec.array_tally), ArrayRetry.of(rec),
                     max(recorded, int(rec.array_offered or 0)))


def _reason(array: OpenArray, tally: Tally, target: JobState) -> str:
    if target == JobState.FAILED:
        shown = ", ".join(map(str, tally.failed_indexes[:10]))
        return (f"{tally.failed} of {array.size} children failed or were cancelled, more "
                f"than the {array.tolerated} tolerated (first: {shown})")
    return f"{tally.succeeded} of {array.size} children succeeded"
