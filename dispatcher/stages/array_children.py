"""An array's children as messages: :class:`ArrayChildren`, the source a priority's
:class:`~dispatcher.stages.fanout.FannedQueue` reads in turn with its queue (see
:mod:`dispatcher.stages.fanout` for how children go through admission and are counted on their
parent).

Before it offers a child, a tick has raised the parent's ``array_offered`` past it
(:data:`OFFER_AHEAD` children a write, only while the parent is undecided), and at its end
lowers it back to the first child it never offered. So the children a tick that died may have
recorded, or one still running may record, all lie below that mark, and an operator's cancel,
which reads it after writing the parent CANCELLED, cancels every one of them
(:mod:`dispatcher.store.array_ops`); a tick whose raise is refused offers no more of them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from dispatcher.domain import arrays
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES
from dispatcher.ports.queue import BATCH, Backlog, Queue, Received
from dispatcher.ports.table import TableUnavailable
from dispatcher.stages.n_to_n import Frontier
from dispatcher.store import StageStore
from dispatcher.store.array_jobs import OpenArray

log = logging.getLogger(__name__)

# A parent's ``array_next`` is written once this many more of its children are recorded in
# order, and at the tick's end: a tick that dies offers at most this many again (duplicates).
WRITE_EVERY = 100
# A tick raises a parent's ``array_offered`` this many children past what it offered, one
# conditional UpdateItem at a time (and lowers it once at its end): about 0.001 calls a child.
OFFER_AHEAD = 1000


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

    def release(self, messages: list[Received], after: int = 0) -> None:
        if after:
            return  # no timeout hides a child: it is this tick's until it is given back
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
