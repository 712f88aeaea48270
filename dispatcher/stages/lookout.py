"""Urgent jobs while the slots are busy: the tick looks at the high queue between its drain's
rounds (:class:`Lookout`), and after the drain watches it for a while (:func:`watch_urgent`).

A tick admits a backlog in one drain (stages/admit.py), the high queue first: a deep backlog
keeps it draining for minutes (the reference batch, 200,000 jobs: ~2 minutes at the default
concurrency), and the tick's look for urgent jobs (:func:`watch_urgent`, stages/handoff.py) comes
only after it, while the next ticks find the lease held. A high job sent meanwhile waited for
the drain, then for a later tick. So, while it drains, the tick looks at the high queue once
every ``LOOK_SECONDS`` (on its clock: the drain yields at least that often, see
``Admission.drain``'s ``beat_seconds``): one receive without a long poll, whose jobs are
taken in (``Admission.intake``: recorded in bundles that wait) and handed to running tasks, as
the look after the drain does.

Handed, not launched: the slots the drain has not filled yet are the backlog's (it spreads the
backlog over all of them); a hand-off takes none, and a running task starts the job within a
heartbeat and a job, where a fresh task needs 30-60 s to start. The tasks it may go to: those
active at the tick's start and those the tick launched since (``hosts_among`` reads them whole
and keeps those running, recently beating, of its size). A job no task can take yet (none has
started) waits in the table, due: the next look hands it, or a later tick (its hand-off reads
the due high bundles; a free slot launches them, high first). So does one whose hand-off the
table refused (``Handoffs.hand`` logs it): a look never ends the drain.

Cost: one ReceiveMessage per ``LOOK_SECONDS`` of drain, none before the tick knows of a task
(active, or launched by it): at most eight in the reference batch's first tick, a drain of
124 s (0.00004 a job); for a job that comes, its
intake (a transaction, a delete), one BatchGetItem per 100 tasks and a transaction per task
it is handed to.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Priority
from dispatcher.stages.admit import Admission
from dispatcher.stages.admitted import AdmissionStats
from dispatcher.stages.handoff import (
    LONG_POLL_SECONDS,
    Handoffs,
    HandoffStats,
    is_host,
    is_source,
)
from dispatcher.store import StageStore

# Drain time between two looks: an urgent job waits at most this, a heartbeat interval (30 s)
# and a running job before it starts, within the minute asked for; about eight receives in a
# drain of two minutes.
LOOK_SECONDS = 15.0


class Lookout:
    """One tick's looks at the high queue while its drain goes on (:meth:`after` each yield)."""

    def __init__(self, admission: Admission, handoffs: Handoffs, active: list[Bundle],
                 deadline: float, intake: AdmissionStats, stats: HandoffStats,
                 clock: Callable[[], float] = time.time) -> None:
        """``active``: the tick's active bundles (and any it launched before the drain);
        ``deadline``: the drain's (monotonic); ``intake``, ``stats``: the tick's."""
        self._admission = admission
        self._handoffs = handoffs
        self._deadline = deadline
        self._intake = intake
        self._stats = stats
        self._clock = clock
        self._tasks = {b.bundle_id: b for b in active if b.state != BundleState.DONE}
        self._waiting: list[Bundle] = []  # taken in, not handed yet
        self._next = clock() + LOOK_SECONDS
        self.enabled = admission.has_queue(Priority.HIGH)

    @property
    def waiting(self) -> list[Bundle]:
        """What its looks took in and no task has taken yet (PENDING, due): a slot the drain
        left free launches it at the drain's end (stages/due_work.py, ``DueWork.spare``)."""
        return list(self._waiting)

    def after(self, launched: list[Bundle]) -> None:
        """At each yield of the drain, with the bundles it yielded (the tick launches them):
        look at the high queue if ``LOOK_SECONDS`` passed since the drain began or the last
        look, and a task could take what comes."""
        self._tasks.update((b.bundle_id, b) for b in launched)
        now = self._clock()
        if not self.enabled or now < self._next or not self._tasks:
            return
        self._next = now + LOOK_SECONDS
        tasks = list(self._tasks.values())
        room = self._handoffs.room(tasks) - sum(len(b.job_ids) for b in self._waiting)
        if room > 0:
            self._stats.looks += 1
            self._waiting += self._admission.intake(Priority.HIGH, room, self._deadline,
                                                    self._intake)
        if not self._waiting:
            return
        hosts = self._handoffs.hosts_among(list(self._tasks))
        self._stats.hosts = max(self._stats.hosts, len(hosts))
        self._handoffs.hand(self._waiting, hosts, self._stats)
        self._waiting = [b for b in self._waiting if b.state == BundleState.PENDING and b.job_ids]


# Due high bundles read by a tick with every slot busy, to hand their jobs (one Query).
URGENT_READ = 100
# Receives of the high queue at most, in a tick with every slot busy (its watch for urgent
# jobs: a long poll each, so a watch of 50 s takes about three when nothing comes).
WATCH_ROUNDS = 100


def watch_urgent(store: StageStore, admission: Admission, handoffs: Handoffs,
                 clock: Callable[[], float], stats: tuple[AdmissionStats, HandoffStats],
                 active: list[Bundle], drain_deadline: float, begun: float) -> None:
    """After the drain, no slot left: take the high queue's jobs in and hand them to running
    tasks (stages/handoff.py); with a watch, go on long-polling the high queue until the watch
    ends, counted from the tick's start (``begun``): the tick then ends before the next one is
    due, however long it drained, rather than hold the lease over it and have it skipped (a
    stream's ticks drain every minute). A receive a tick (a long poll, a few) when no urgent
    job comes; reads and writes only for those that do. ``stats``: the tick's intake and
    hand-off figures, added to."""
    intake, handed = stats
    now = clock()
    room = handoffs.room([b for b in active if is_host(b, now, handoffs.policy)])
    if room <= 0:
        return
    until = begun + handoffs.policy.watch_seconds
    # Taken in and not handed yet: first those an earlier tick left (it died before its
    # hand-off, or no task could take them then), one read of the due high bundles.
    waiting = [b for b in store.due_bundles(URGENT_READ, now, (), [Priority.HIGH])
               if is_source(b, now, handoffs.policy)]
    # One receive a round (a long poll while watching): an empty one takes its wait, so the
    # rounds end with the watch; the bound is for a queue that does not wait.
    for n in range(WATCH_ROUNDS):
        before = clock()
        left = min(until - before, drain_deadline - time.monotonic())
        wait = int(max(0.0, min(LONG_POLL_SECONDS, left)))
        if wait <= 0 and n > 0:  # under a second left: short polls until then would spend
            break  # a receive every few milliseconds; the next tick looks again
        came = admission.intake(Priority.HIGH, room, time.monotonic() + LONG_POLL_SECONDS + 5,
                                intake, wait_seconds=wait)
        waiting += came
        if waiting and (came or n == 0):  # the hosts as they are now: a task may end
            hosts = handoffs.hosts(active)
            handed.hosts = max(handed.hosts, len(hosts))
            handoffs.hand(waiting, hosts, handed)
            waiting = [b for b in waiting if b.state == BundleState.PENDING and b.job_ids]
        if not came and clock() <= before:  # nothing came, no time passed
            break
        if clock() >= until or time.monotonic() >= drain_deadline:
            break
    handed.watched_seconds = int(max(0.0, clock() - now))
