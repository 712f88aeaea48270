"""Fan-out: array jobs' children admitted from the table as if they were queued messages.

A producer sends one message for an array of N children (:mod:`dispatcher.domain.arrays`); its
parent is recorded by the admit stage. Each priority's queue is then read through a
:class:`FannedQueue`: its receives alternate between the real queue and an
:class:`~dispatcher.stages.array_children.ArrayChildren` source, which makes child ``i`` of
each open array into a message (its parent's body, ``array_index`` = i) without any call. So
children go through admission as every job does: validated, de-duplicated, bundled (their
estimate decides), recorded, and only then "deleted", which raises the parent's ``array_next``
past every child recorded in order (a conditional UpdateItem per
:data:`~dispatcher.stages.array_children.WRITE_EVERY` children, and one at the tick's end). A
tick that dies first leaves ``array_next`` lower than what was recorded: the next one offers
those children again, and the record stage finds them duplicates. None is lost, none recorded
twice, and the producer's one message costs the dispatcher about 0.05 calls per child
(``bench/arrays.py``).

:class:`ArrayTally` is the tick's two steps: it hands each source the open arrays at the
tick's start, and at its end settles them (their parents' state follows their children:
:meth:`dispatcher.store.StageStore.settle_array`). An array with n_to_n dependencies is offered
only up to its frontier (:mod:`dispatcher.stages.n_to_n`), which the drain moves on as it
offers the children below it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from dispatcher.domain import dependencies as deps
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState, Priority
from dispatcher.ports.queue import BATCH, Backlog, Queue, Received
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.array_children import ArrayChildren
from dispatcher.stages.depends import Judgement, judge_all
from dispatcher.stages.n_to_n import Frontier, element_wise, frontiers, whole
from dispatcher.store import StageStore
from dispatcher.store.array_jobs import OpenArray

log = logging.getLogger(__name__)

# While the queue answers empty, a fanned queue asks it only every this many receives.
EMPTY_EVERY = 8
# Pages of 100 children a tick's settle reads at most, shared by the open arrays: a tick's end
# takes seconds, not minutes, however many children ended; the rest is read by the next ticks.
SETTLE_PAGES = 1000


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

    def release(self, messages: list[Received], after: int = 0) -> None:
        queued = [m for m in messages if m.array_index is None]
        if queued:
            self._queue.release(queued, after)
        children = [m for m in messages if m.array_index is not None]
        if children:
            self.children.release(children, after)

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
