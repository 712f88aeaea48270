"""Fan-out: array jobs' children admitted from the table as if they were queued messages.

A producer sends one message for an array of N children (:mod:`dispatcher.domain.arrays`); its
parent is recorded by the admit stage. Each priority's queue is then read through a
:class:`FannedQueue`: its receives alternate between the real queue and an
:class:`ArrayChildren` source, which makes child ``i`` of each open array into a message (its
parent's body, ``array_index`` = i) without any call. So children go through admission as
every job does: validated, de-duplicated, bundled (their estimate decides), recorded, and only
then "deleted", which raises the parent's ``array_next`` past every child recorded in order
(a conditional UpdateItem per :data:`WRITE_EVERY` children, and one at the tick's end). A tick
that dies first leaves ``array_next`` lower than what was recorded: the next one offers those
children again, and the record stage finds them duplicates. None is lost, none recorded twice,
and the producer's one message costs the dispatcher about 0.05 calls per child
(``bench/arrays.py``).

Before it offers a child, a tick has raised the parent's ``array_offered`` past it
(:data:`OFFER_AHEAD` children a write, only while the parent is undecided), and at its end
lowers it back to the first child it never offered. So the children a tick that died may have
recorded, or one still running may record, all lie below that mark, and an operator's cancel,
which reads it after writing the parent CANCELLED, cancels every one of them
(:mod:`dispatcher.store.array_ops`); a tick whose raise is refused offers no more of them.

:class:`ArrayTally` is the tick's two steps: it hands each source the open arrays at the
tick's start, and at its end settles them (their parents' state follows their children:
:meth:`dispatcher.store.StageStore.settle_array`). An array with n_to_n dependencies is offered
only up to its frontier (:mod:`dispatcher.stages.n_to_n`), which the drain moves on as it
offers the children below it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from dispatcher.domain import arrays
from dispatcher.domain import dependencies as deps
from dispatcher.domain.errors import ConflictError, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState, Priority
from dispatcher.ports.queue import BATCH, Backlog, Queue, Received
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.depends import Judgement, judge_all
from dispatcher.stages.n_to_n import Frontier, element_wise, frontiers, whole
from dispatcher.store import StageStore
from dispatcher.store.array_jobs import OpenArray

log = logging.getLogger(__name__)

# While the queue answers empty, a fanned queue asks it only every this many receives.
EMPTY_EVERY = 8
# A parent's ``array_next`` is written once this many more of its children are recorded in
# order, and at the tick's end: a tick that dies offers at most this many again (duplicates).
WRITE_EVERY = 100
# A tick raises a parent's ``array_offered`` this many children past what it offered, one
# conditional UpdateItem at a time (and lowers it once at its end): about 0.001 calls a child.
OFFER_AHEAD = 1000
# Pages of 100 children a tick's settle reads at most, shared by the open arrays: a tick's end
# takes seconds, not minutes, however many children ended; the rest is read by the next ticks.
SETTLE_PAGES = 1000


@dataclass
class _Cursor:
    """One array's children as this tick offers them."""

    parent_id: str
    size: int
    body: str
    sent_at: float | None
    recorded: int  # children below it are recorded (in this tick's view)
    offered: int  # the next index never offered in this tick
    written: int  # array_next as last written
    limit: int  # children below it may be offered in this tick (its size, or its frontier)
    done: set[int] = field(default_factory=set)  # recorded, above ``recorded``
    back: list[int] = field(default_factory=list)  # offered, given back: offered again first
    # Children whose message names dependencies (n_to_n: their elements that ended against
    # them), by index.
    held: dict[int, list[dict[str, str | bool]]] = field(default_factory=dict)
    # An n_to_n array's frontier while it may move on (its last read found only ended
    # elements), and whether a receive is reading it now.
    frontier: Frontier | None = None
    reading: bool = False
    # Children below it may be offered (the parent's ``array_offered`` as read at the tick's
    # start, or as this tick raised it), and the mark as read at the start, which the tick's
    # end never lowers (children a tick before may have recorded lie below it).
    reserved: int = 0
    inherited: int = 0

    def stalled(self) -> bool:
        """Every child it may offer now was offered, but one read may let it offer more: a
        raise of its ``array_offered``, or a move of its n_to_n frontier."""
        if self.reading:
            return False
        if self.reserved < self.limit:
            return self.offered >= self.reserved
        return self.frontier is not None and self.offered >= self.limit

    def waiting(self) -> int:
        """Children it may still offer in this tick, as far as known: below its limit, given
        back, and (while its frontier may move on) up to its size, which the backlog counts so
        that the drain sizes its bundles for them as for a plain array's."""
        ahead = self.size if self.frontier is not None else self.limit
        return ahead - self.offered + len(self.back)

    def body_of(self, index: int) -> str:
        """Child ``index``'s message: its parent's, with ``depends_on`` if it is held. Made as
        it is offered: a held child's body is a copy of the parent's payload, and a tick may
        hold up to a window of them."""
        if index not in self.held:
            return self.body
        # The parent's message names no dependency (arrays.parent_message): one key added.
        return f'{self.body[:-1]},"depends_on":{_dumps(self.held[index])}}}'


class ArrayChildren(Queue):
    """The children of one priority's open arrays, as messages (see the module). Receives,
    deletes and releases come from the drain's pool threads: one lock guards the cursors."""

    def __init__(self, store: StageStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._read = threading.Condition(self._lock)  # a frontier's read ended
        self._cursors: list[_Cursor] = []

    def load(self, open_arrays: list[OpenArray],
             limits: Mapping[str, Frontier] | None = None) -> None:
        """This tick's arrays: those undecided with children still to record (``limits``:
        the frontiers of those with n_to_n dependencies, by parent id)."""
        cursors = []
        for a in open_arrays:
            if a.parent.state in TERMINAL_JOB_STATES or a.recorded >= a.size:
                continue
            frontier = (limits or {}).get(a.parent.job_id)
            cursors.append(_Cursor(
                a.parent.job_id, a.size, _dumps(arrays.parent_message(a.parent)),
                a.parent.enqueued_at, a.recorded, a.recorded, a.recorded,
                a.size if frontier is None else frontier.limit,
                held=dict(frontier.held) if frontier else {},
                frontier=frontier if frontier is not None and frontier.more else None,
                reserved=a.offered, inherited=a.offered))
        with self._lock:
            self._cursors = cursors

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        raise LongjobsError("array children are made by the dispatcher, not sent")

    def receive(self, max_messages: int = BATCH, visibility_timeout: int | None = None,
                wait_seconds: int = 0) -> list[Received]:
        """Children to offer; an array whose every child below its ``array_offered`` was
        offered has it raised first, and an n_to_n array whose every child below its frontier
        was offered has its frontier moved on (each one write or one bounded read, outside the
        lock: other receives meanwhile offer the other arrays' children, or, with none to
        offer, wait for it rather than answer empty, which would end the drain)."""
        out: list[Received] = []
        while True:
            with self._lock:
                for c in self._cursors:
                    while len(out) < max_messages and (
                            c.back or c.offered < min(c.limit, c.reserved)):
                        if c.back:
                            index = c.back.pop(0)
                        else:
                            index, c.offered = c.offered, c.offered + 1
                        ident = arrays.child_id(c.parent_id, index)
                        out.append(Received(ident, ident, c.body_of(index), c.sent_at,
                                            array_index=index))
                    if len(out) >= max_messages:
                        return out
                behind = next((c for c in self._cursors if c.stalled()), None)
                if behind is None:
                    if out or not any(c.reading for c in self._cursors):
                        return out
                    self._read.wait()
                    continue
                behind.reading = True
            if behind.reserved < behind.limit:
                self._reserve(behind)
            else:
                self._extend(behind)

    def _reserve(self, c: _Cursor) -> None:
        """Raise the array's ``array_offered`` :data:`OFFER_AHEAD` past what is offered; a
        parent decided meanwhile (cancelled) or a table that fails ends its offers for the
        rest of the tick (the next tick reads it again)."""
        below = min(c.size, c.offered + OFFER_AHEAD)
        raised = False
        try:
            raised = self._store.may_offer(c.parent_id, below)
        except TableUnavailable as exc:
            log.error("marking array jobs' children offered failed; the next tick goes on",
                      extra={"job_id": c.parent_id, "reason": exc.reason})
        finally:
            with self._lock:
                c.reading = False
                if raised:
                    c.reserved = below
                else:
                    c.limit, c.frontier = c.offered, None
                self._read.notify_all()

    def _extend(self, c: _Cursor) -> None:
        """Move an n_to_n array's frontier on by one read; a read that fails leaves it where
        it is for the rest of the tick (the next tick reads from there)."""
        frontier = c.frontier
        assert frontier is not None
        held: dict[int, list[dict[str, str | bool]]] = {}
        moved: Frontier | None = None
        try:
            held = frontier.extend(self._store)
            moved = frontier
        except TableUnavailable as exc:
            log.error("reading array jobs' n_to_n dependencies failed; the next tick looks "
                      "again", extra={"job_id": c.parent_id, "reason": exc.reason})
        finally:  # whatever happened, the receives waiting for this read go on
            with self._lock:
                c.reading = False
                c.held.update(held)
                if moved is not None:
                    c.limit = moved.limit
                c.frontier = moved if moved is not None and moved.more else None
                self._read.notify_all()

    def _children(self, messages: list[Received]) -> list[tuple[_Cursor, int]]:
        """Each message's array and index (under the lock; a message of no array offered in
        this tick is left out)."""
        by_parent = {c.parent_id: c for c in self._cursors}
        return [(c, m.array_index) for m in messages if m.array_index is not None
                and (c := by_parent.get(m.message_id.rpartition(":")[0])) is not None]

    def delete(self, messages: list[Received]) -> dict[str, str]:
        """The children's jobs are recorded: raise each parent's ``array_next`` over those
        recorded in order."""
        raised: list[tuple[str, int]] = []
        with self._lock:
            for c, index in self._children(messages):
                c.done.add(index)
            for c in self._cursors:
                n = c.recorded
                while n in c.done:
                    c.done.discard(n)
                    n += 1
                c.recorded = n
                if n - c.written >= WRITE_EVERY:
                    c.written = n
                    raised.append((c.parent_id, n))
        for parent_id, n in raised:
            self._store.recorded_up_to(parent_id, n)
        return {}

    def flush(self) -> None:
        """Write ``array_next`` where it is behind what this tick recorded, and lower
        ``array_offered`` to the first child this tick never offered (its end)."""
        with self._lock:
            behind = [(c.parent_id, c.recorded) for c in self._cursors if c.recorded > c.written]
            ahead: list[tuple[str, int, int]] = []
            for c in self._cursors:
                c.written = max(c.written, c.recorded)
                floor = max(c.inherited, c.offered)
                if c.reserved > floor:
                    ahead.append((c.parent_id, c.reserved, floor))
                    c.reserved = floor
        for parent_id, n in behind:
            self._store.recorded_up_to(parent_id, n)
        for parent_id, mark, floor in ahead:
            self._store.offered_back(parent_id, mark, floor)

    def release(self, messages: list[Received]) -> None:
        with self._lock:
            for c, index in self._children(messages):
                c.back.append(index)
            for c in self._cursors:
                c.back.sort()

    def backlog(self) -> Backlog:
        with self._lock:
            left = sum(c.waiting() for c in self._cursors)
        return Backlog(visible=left, in_flight=0, delayed=0)


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class FannedQueue(Queue):
    """A priority's queue and its arrays' children, read in turn (see the module). While the
    queue answers empty and children remain, it is asked only every :data:`EMPTY_EVERY`-th
    receive: a receive of an empty queue is a call that brings nothing."""

    def __init__(self, queue: Queue, children: ArrayChildren) -> None:
        self._queue = queue
        self.children = children
        self._turn = 0
        self._queue_empty = False
        self._lock = threading.Lock()

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        return self._queue.send(entries)

    def receive(self, max_messages: int = BATCH, visibility_timeout: int | None = None,
                wait_seconds: int = 0) -> list[Received]:
        with self._lock:
            self._turn += 1
            every = EMPTY_EVERY if self._queue_empty else 2
            children_first = self._turn % every != 0
        if children_first:
            got = self.children.receive(max_messages)
            if got:
                return got
        wait = 0 if self.children.backlog().visible else wait_seconds
        got = self._queue.receive(max_messages, visibility_timeout, wait) if wait > 0 else \
            self._queue.receive(max_messages, visibility_timeout)
        with self._lock:
            self._queue_empty = not got
        return got or ([] if children_first else self.children.receive(max_messages))

    def delete(self, messages: list[Received]) -> dict[str, str]:
        queued = [m for m in messages if m.array_index is None]
        failed = self._queue.delete(queued) if queued else {}
        children = [m for m in messages if m.array_index is not None]
        if children:
            failed.update(self.children.delete(children))
        return failed

    def release(self, messages: list[Received]) -> None:
        queued = [m for m in messages if m.array_index is None]
        if queued:
            self._queue.release(queued)
        children = [m for m in messages if m.array_index is not None]
        if children:
            self.children.release(children)

    def backlog(self) -> Backlog:
        queued = self._queue.backlog()
        return Backlog(queued.visible + self.children.backlog().visible, queued.in_flight,
                       queued.delayed)


@dataclass
class ArrayStats:
    """What the tick's array step did."""

    open: int = 0
    decided: list[dict[str, str]] = field(default_factory=list)  # parent id, state


class ArrayTally:
    """The tick's array steps: :meth:`offer` (at its start) hands each priority's source the
    open arrays; :meth:`settle` (at its end, when this tick's children are recorded) writes
    each parent's state from its children's."""

    def __init__(self, store: StageStore, children: dict[Priority, ArrayChildren],
                 clock: Callable[[], float] = time.time) -> None:
        """``children``: each level's source (levels that share a queue share its source)."""
        self._store = store
        self._clock = clock
        self._children = children
        self._open: list[OpenArray] = []

    def offer(self, stats: ArrayStats) -> None:
        arrays_open = self._store.open_arrays()
        # Judged on their dependencies on whole jobs; n_to_n ones decide child by child.
        waiting = [replace(a.parent, depends_on=whole(a.parent)) for a in arrays_open
                   if whole(a.parent) and a.parent.state not in TERMINAL_JOB_STATES]
        try:
            said = judge_all(self._store, waiting, self._clock()) if waiting else {}
        except TableUnavailable as exc:  # those arrays wait for the next tick
            log.error("reading array jobs' dependencies failed; the next tick looks again",
                      extra={"reason": exc.reason})
            said = {p.job_id: Judgement(deps.WAITING) for p in waiting}
        self._open = [a for a in arrays_open if self._may_start(a, said.get(a.parent.job_id))]
        stats.open = len(self._open)
        limits = self._frontiers()
        for source in self._sources():  # a source serves the levels that share its queue
            source.load([a for a in self._open if self._children[a.parent.priority] is source],
                        limits)

    def _frontiers(self) -> dict[str, Frontier]:
        """The n_to_n arrays' frontiers; an array whose n_to_n dependency cannot be met is
        CANCELLED (as one whose dependency went against it)."""
        try:
            limits = frontiers(self._store, self._open, self._clock())
        except TableUnavailable as exc:  # none of them is offered: the next tick reads again
            log.error("reading array jobs' n_to_n dependencies failed; the next tick looks "
                      "again", extra={"reason": exc.reason})
            return {a.parent.job_id: Frontier(a.recorded) for a in self._open
                    if element_wise(a.parent)}
        for a in self._open:
            reason = limits[a.parent.job_id].cancel if a.parent.job_id in limits else None
            if reason is not None and self._may_start(a, Judgement(deps.AGAINST, reason)):
                limits.pop(a.parent.job_id)
        return limits

    def _may_start(self, array: OpenArray, said: Judgement | None) -> bool:
        """An array whose parent waits for dependencies (``said``: their judgement) records
        no child until they are met (its n_to_n ones are kept: they decide child by child);
        one decided against it is CANCELLED (and closed by its next settle)."""
        parent = array.parent
        if said is None:  # it waits for none (any more), or it ended
            return True
        if said.verdict == deps.WAITING:
            return False
        keep = [d.as_json() for d in element_wise(parent)]
        try:
            self._store.array_may_start(parent, said.reason if said.verdict == deps.AGAINST
                                        else None, keep)
        except (ConflictError, TableUnavailable):
            return False  # an operator acted meanwhile, or the table failed: next tick
        if said.verdict == deps.AGAINST:
            parent.state = JobState.CANCELLED
        parent.depends_on = keep if said.verdict == deps.MET and keep else None
        return True

    def _sources(self) -> list[ArrayChildren]:
        return list({id(c): c for c in self._children.values()}.values())

    def settle(self, stats: ArrayStats) -> None:
        if not self._open:  # arrays recorded in this tick have no children yet
            return
        for source in self._sources():
            source.flush()
        reread = self._store.reread(self._open)
        pages = max(1, SETTLE_PAGES // max(1, len(reread)))
        for array in reread:
            try:
                settled = self._store.settle_array(array, pages)
            except Exception as exc:  # one array's trouble never fails the tick
                log.error("settling an array job failed; the next tick tries again",
                          extra={"job_id": array.parent.job_id, "error": repr(exc)})
                continue
            if settled.parent.state != array.parent.state and \
                    settled.parent.state in TERMINAL_JOB_STATES:
                stats.decided.append({"job_id": array.parent.job_id,
                                      "state": str(settled.parent.state)})
        self._open = []
