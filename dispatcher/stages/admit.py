"""Admit: drain the queues into bundles of valid jobs, recorded before any message is deleted.

Each received message is validated (:mod:`dispatcher.domain.message`): a malformed one is
rejected, a valid one becomes a job, and the jobs are packed into bundles
(:mod:`dispatcher.stages.bundle`). Each bundle, once closed, goes to the record stage
(:mod:`dispatcher.stages.recorder`), which says what becomes of its messages.

The drain (each queue's: :mod:`dispatcher.stages.queue_drain`) is a pipeline with a bounded
number of AWS calls in flight (``concurrency``): receives
run ahead while the main thread validates and bundles; each bundle is recorded and its messages
deleted on the pool as soon as it closes, and yielded to the tick (which launches it) while the
drain goes on. Messages are received with the ``hold_seconds`` visibility timeout and
a bundle is closed once its oldest message was held for half of it, so every message is recorded
and deleted before it could be delivered again; those of a recording still going at three
quarters of it (throttled, retried) are hidden for another hold. The hold is short (a tick
whose Lambda dies leaves what it held to come back after it), not the time a drain may take.
Memory is bounded by the open and in-flight bundles, not by the depth of the queue.

Priorities: each level (high, normal, low) has its queue, drained in that order. The tick
tells each level how many free task slots it may take (:meth:`DueWork.share
<dispatcher.stages.due_work.DueWork.share>`: by weight, ``LONGJOBS_PRIORITY_WEIGHTS``, with a
credit carried across ticks so that no level with work starves), and a level also takes what
the levels above it left unused. Scheduled jobs and jobs of a kind at its limit are recorded at
once in deferred bundles (see :mod:`dispatcher.stages.bundle`) that take no slot now.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Generator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.ports.queue import BATCH, Queue, Received
from dispatcher.stages.admitted import AdmissionStats
from dispatcher.stages.bundle import Bundler
from dispatcher.stages.policy import AdmitPolicy
from dispatcher.stages.queue_drain import DrainSetup, QueueDrain
from dispatcher.stages.recorder import Recorder
from dispatcher.stages.tenant_slots import TenantRoom

# How to read the rate limits (dispatcher.store.rate_buckets), for a drain's bundlers.
LimitsRead = Callable[[], Mapping[str, RateLimit]]


def read_once(read: LimitsRead | None) -> LimitsRead | None:
    """``read``, made once however many times it is asked (a read that fails is tried again
    at the next ask): a drain's levels share one read of the limits."""
    if read is None:
        return None
    got: list[Mapping[str, RateLimit]] = []

    def once() -> Mapping[str, RateLimit]:
        if not got:
            got.append(read())
        return got[0]

    return once


class Admission:
    """Receives, validates and bundles; each closed bundle goes to ``recorder`` on the drain's
    pool, and each recorded bundle that can launch now goes back to the tick (:meth:`drain`)."""

    def __init__(self, queues: Queue | Mapping[Priority, Queue], recorder: Recorder,
                 policy: AdmitPolicy, clock: Callable[[], float] = time.time, *,
                 concurrency: int = 8, hold_seconds: float = 300.0,
                 rate_limits: Callable[[], Mapping[str, RateLimit]] | None = None) -> None:
        """``queues``: the queue of each priority (one Queue serves every level);
        ``rate_limits``: how to read the rate limits (a drain reads them at its first job
        that takes tokens, to size its bundles: :class:`Bundler`)."""
        self._policy = policy
        self._rate_limits = rate_limits
        if isinstance(queues, Queue):
            queues = {p: queues for p in PRIORITY_ORDER}
        # Each distinct queue once, in the order of the highest level it serves, under normal
        # if it serves normal (a shared queue's jobs are mostly of the default priority, and
        # its backlog then competes for slots with normal's due bundles), else that level.
        self._queues: list[tuple[Priority, Queue]] = []
        for p in PRIORITY_ORDER:
            if p in queues and all(queues[p] is not q for _, q in self._queues):
                serves_normal = queues.get(Priority.NORMAL) is queues[p]
                self._queues.append((Priority.NORMAL if serves_normal else p, queues[p]))
        self._recorder = recorder
        self._clock = clock
        self._concurrency = max(2, concurrency)
        self._hold = hold_seconds
        self._setup = DrainSetup(recorder, policy, self.receive, clock, self._concurrency,
                                 hold_seconds)

    def target_jobs(self, visible: int, capacity: int) -> int:
        """Jobs per bundle that spread ``visible`` messages evenly over ``capacity`` tasks (at
        least a task's worth of parallel jobs)."""
        return max(self._policy.bundling.task_concurrency, math.ceil(visible / max(1, capacity)))

    def backlog(self, *, below_high: bool = False) -> dict[Priority, int]:
        """Visible messages of each level's queue (a shared queue's under its level);
        ``below_high``: of the levels below the high one only (a drain for running tasks
        takes none of the high queue's, which reach them their own way)."""
        return {p: q.backlog().visible for p, q in self._queues
                if not (below_high and p == Priority.HIGH)}

    def drain(self, capacity: int, deadline: float, stats: AdmissionStats, *,
              kind_room: Mapping[str, int] | None = None,
              shares: Mapping[Priority, int] | None = None,
              visible: Mapping[Priority, int] | None = None,
              beat_seconds: float | None = None, takers: int = 0,
              running_tenants: Collection[str | None] | None = None,
              tenant_room: TenantRoom = None, deferred: list[Bundle] | None = None
              ) -> Iterator[list[Bundle]]:
        """Admit up to ``capacity`` bundles of work before ``deadline`` (monotonic), each
        priority's queue in turn, yielding each recorded bundle that can launch now as soon as
        it is recorded (``stats.bundles_recorded`` counts every bundle recorded, deferred ones
        too). The caller runs it to its end: only then are the messages of bundles that could
        not be recorded given back. ``kind_room``: jobs each limited kind may still start;
        ``shares``: the slots each level may take (besides what the levels above it leave;
        default: all of them, highest first); ``visible``: each level's backlog, if read
        already (:meth:`backlog`); ``beat_seconds``: yield an empty list whenever that long
        (on the clock) passed without a yield, so the tick can look around (at the high queue,
        stages/lookout.py) however long the drain goes without a bundle to launch.

        ``takers``: the running tasks that take follow-ons as they end their bundles (their
        own batch's, then another's: dispatcher.store.follow_ons). The first queue below the
        high one with a backlog is cut into follow-ons for them too (:class:`Bundler`'s
        ``takers``; follow-ons on): with no slot free, none launched; with some, once it is
        more than those slots take. Its jobs wait in the table, where those tasks take them,
        rather than in the queue for a slot to free and a new task to start. (Urgent jobs
        have their own way to running tasks with no slot free:
        dispatcher/stages/handoff.py.) ``running_tenants``: the tenants of the running tasks;
        a batch of another tenant opens with a foothold (:class:`Bundler`); ``tenant_room``:
        tasks each capped tenant may still start, or how to read them
        (dispatcher/stages/tenant_slots.py); ``deferred``: the bundles it recorded to wait
        (due later, or now: of a limited kind, or taking rate limits' tokens) are added to it.
        """
        # The limits, read at the first job that takes tokens, once for all levels.
        limits = read_once(self._rate_limits)
        if capacity <= 0:
            if takers > 0:
                yield from self._drain_for_takers(takers, deadline, stats, kind_room, visible,
                                                  beat_seconds, running_tenants, deferred,
                                                  limits)
            return
        visible = dict(visible) if visible is not None else self.backlog()
        guaranteed = {p: (shares or {}).get(p, 0) for p in PRIORITY_ORDER}
        room = dict(kind_room or {})
        tenant_left = tenant_room
        left = capacity
        if self._policy.bundling.follow_on_seconds <= 0:
            takers = 0  # follow-ons are off
        # The running tasks take one queue's follow-ons (the first below the high one with a
        # backlog), as with no slot free: also when the levels above (or the shares of those
        # below) leave this one no slot; that one is drained last, after the levels that take
        # slots, so that a deep backlog cut for running tasks keeps no free slot waiting.
        later: tuple[Priority, Queue, int] | None = None
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix="admit") as pool:
            for n, (priority, queue) in enumerate(self._queues):
                below = sum(guaranteed[p] for p, _ in self._queues[n + 1:])
                slots = max(0, left - below)
                sharing = takers if priority != Priority.HIGH and visible.get(priority) else 0
                takers -= sharing
                if sharing and not slots:
                    later = (priority, queue, sharing)
                    continue
                if time.monotonic() >= deadline or not slots:
                    continue
                bundler = yield from self._drain_one(pool, priority, queue, slots, sharing,
                                                     visible, room, deadline, stats,
                                                     beat_seconds, running_tenants,
                                                     tenant_left, deferred, limits)
                left -= bundler.opened
                room, tenant_left = bundler.kind_room, bundler.tenant_room
            if later is not None and time.monotonic() < deadline:
                priority, queue, sharing = later
                yield from self._drain_one(pool, priority, queue, 0, sharing, visible, room,
                                           deadline, stats, beat_seconds, running_tenants,
                                           tenant_left, deferred, limits)

    def _drain_one(self, pool: ThreadPoolExecutor, priority: Priority, queue: Queue,
                   slots: int, sharing: int, visible: Mapping[Priority, int],
                   room: Mapping[str, int], deadline: float, stats: AdmissionStats,
                   beat_seconds: float | None,
                   running_tenants: Collection[str | None] | None = None,
                   tenant_room: TenantRoom = None, deferred: list[Bundle] | None = None,
                   limits: LimitsRead | None = None
                   ) -> Generator[list[Bundle], None, Bundler]:
        """One level's drain into ``slots`` free slots, and into follow-ons for ``sharing``
        running tasks; its bundler, once it ends (the bundles it opened, the kinds' room
        left)."""
        target = self.target_jobs(visible.get(priority, 0), slots or sharing)
        stats.target_jobs = max(stats.target_jobs, target)
        bundler = Bundler(self._policy.bundling, slots, target, at=self._clock(),
                          kind_limits=self._policy.kind_limits, kind_room=room,
                          backlog=visible.get(priority, 0), clock=self._clock, takers=sharing,
                          running_tenants=running_tenants, tenant_room=tenant_room,
                          rate_limits=limits)
        drain = QueueDrain(self._setup, queue, bundler, deadline, stats,
                           beat_seconds=beat_seconds, of_high=priority == Priority.HIGH)
        yield from drain.run(pool)
        if deferred is not None:
            deferred += drain.waiting
        return bundler

    def _drain_for_takers(self, takers: int, deadline: float, stats: AdmissionStats,
                          kind_room: Mapping[str, int] | None,
                          visible: Mapping[Priority, int] | None,
                          beat_seconds: float | None,
                          running_tenants: Collection[str | None] | None = None,
                          deferred: list[Bundle] | None = None,
                          limits: LimitsRead | None = None
                          ) -> Iterator[list[Bundle]]:
        if self._policy.bundling.follow_on_seconds <= 0:
            return  # follow-ons are off
        visible = dict(visible) if visible is not None else self.backlog()
        for priority, queue in self._queues:
            backlog = visible.get(priority, 0)
            if priority == Priority.HIGH or not backlog:
                continue
            target = self.target_jobs(backlog, takers)
            stats.target_jobs = max(stats.target_jobs, target)
            bundler = Bundler(self._policy.bundling, 0, target, at=self._clock(),
                              kind_limits=self._policy.kind_limits, kind_room=kind_room,
                              backlog=backlog, clock=self._clock, takers=takers,
                              running_tenants=running_tenants, rate_limits=limits)
            with ThreadPoolExecutor(self._concurrency, thread_name_prefix="admit") as pool:
                drain = QueueDrain(self._setup, queue, bundler, deadline, stats,
                                   beat_seconds=beat_seconds)
                yield from drain.run(pool)
                if deferred is not None:
                    deferred += drain.waiting
            return

    def has_queue(self, priority: Priority) -> bool:
        """Whether ``priority`` has a queue of its own, which :meth:`intake` takes from."""
        return any(p == priority for p, _ in self._queues)

    def intake(self, priority: Priority, jobs: int, deadline: float, stats: AdmissionStats,
               *, wait_seconds: int = 0) -> list[Bundle]:
        """Admit up to ``jobs`` messages of ``priority``'s own queue although no task slot is
        free: each is recorded in a bundle that waits (PENDING, due now), returned for the
        hand-off to running tasks (dispatcher/stages/handoff.py). One receive, long-polling
        ``wait_seconds`` (the tick's watch for urgent jobs): the jobs it brings are handed at
        once, not after the polls that would follow. Nothing, if that priority has no queue
        of its own."""
        # A queue shared with normal is listed under normal (see __init__): not this one's.
        queue = next((q for p, q in self._queues if p == priority), None)
        if queue is None or jobs <= 0:
            return []
        bundler = Bundler(self._policy.bundling, 0, at=self._clock(),
                          kind_limits=self._policy.kind_limits, waiting=jobs,
                          rate_limits=self._rate_limits)
        drain = QueueDrain(self._setup, queue, bundler, deadline, stats,
                           wait_seconds=wait_seconds, receives=1)
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix="intake") as pool:
            for _ in drain.run(pool):
                pass  # nothing is ready to launch: every bundle of it waits
        return drain.waiting

    # -- work done on the pool ------------------------------------------------------------------
    def receive(self, queue: Queue, max_messages: int = BATCH,
                wait_seconds: int = 0) -> list[Received]:
        if wait_seconds > 0:
            return queue.receive(max_messages, visibility_timeout=int(self._hold),
                                 wait_seconds=wait_seconds)
        return queue.receive(max_messages, visibility_timeout=int(self._hold))
