"""Admit: drain the queues into bundles of valid jobs, recorded before any message is deleted.

Each received message is validated (:mod:`dispatcher.domain.message`): a malformed one is
rejected, a valid one becomes a job, and the jobs are packed into bundles
(:mod:`dispatcher.stages.bundle`). Each bundle, once closed, goes to the record stage
(:mod:`dispatcher.stages.recorder`), which says what becomes of its messages.

The drain is a pipeline with a bounded number of AWS calls in flight (``concurrency``): receives
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

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from dispatcher.domain import message
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import PRIORITY_ORDER, Job, Priority, Rejection
from dispatcher.ports.queue import BATCH, Queue, Received
from dispatcher.stages.admitted import AdmissionStats, to_job, to_rejection
from dispatcher.stages.bundle import Bundler
from dispatcher.stages.policy import AdmitPolicy
from dispatcher.stages.recorder import Held, Recorded, Recorder

log = logging.getLogger(__name__)

# SQS short polling samples a subset of its servers, so one empty receive does not prove the
# queue empty; this many in a row do.
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-short-and-long-polling.html
EMPTY_RECEIVES = 3
# Distinct recording errors kept in a tick's decision.
RECORD_ERRORS_KEPT = 10


class Admission:
    """Receives, validates and bundles; each closed bundle goes to ``recorder`` on the drain's
    pool, and each recorded bundle that can launch now goes back to the tick (:meth:`drain`)."""

    def __init__(self, queues: Queue | Mapping[Priority, Queue], recorder: Recorder,
                 policy: AdmitPolicy, clock: Callable[[], float] = time.time, *,
                 concurrency: int = 8, hold_seconds: float = 300.0) -> None:
        """``queues``: the queue of each priority (one Queue serves every level)."""
        self._policy = policy
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
              beat_seconds: float | None = None, takers: int = 0) -> Iterator[list[Bundle]]:
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
        dispatcher/stages/handoff.py.)"""
        if capacity <= 0:
            if takers > 0:
                yield from self._drain_for_takers(takers, deadline, stats, kind_room, visible,
                                                  beat_seconds)
            return
        visible = dict(visible) if visible is not None else self.backlog()
        guaranteed = {p: (shares or {}).get(p, 0) for p in PRIORITY_ORDER}
        room = dict(kind_room or {})
        left = capacity
        if self._policy.bundling.follow_on_seconds <= 0:
            takers = 0  # follow-ons are off
        with ThreadPoolExecutor(self._concurrency, thread_name_prefix="admit") as pool:
            for n, (priority, queue) in enumerate(self._queues):
                below = sum(guaranteed[p] for p, _ in self._queues[n + 1:])
                slots = max(0, left - below)
                # The running tasks take one queue's follow-ons (the first below the high
                # one with a backlog), as with no slot free: also when the levels above (or
                # the shares of those below) leave this one no slot.
                sharing = takers if priority != Priority.HIGH and visible.get(priority) else 0
                if time.monotonic() >= deadline or not (slots or sharing):
                    continue
                takers -= sharing
                target = self.target_jobs(visible.get(priority, 0), slots or sharing)
                stats.target_jobs = max(stats.target_jobs, target)
                bundler = Bundler(self._policy.bundling, slots, target, at=self._clock(),
                                  kind_limits=self._policy.kind_limits, kind_room=room,
                                  backlog=visible.get(priority, 0), clock=self._clock,
                                  takers=sharing)
                yield from _Drain(self, queue, bundler, deadline, stats,
                                  beat_seconds=beat_seconds,
                                  of_high=priority == Priority.HIGH).run(pool)
                left -= bundler.opened
                room = bundler.kind_room

    def _drain_for_takers(self, takers: int, deadline: float, stats: AdmissionStats,
                          kind_room: Mapping[str, int] | None,
                          visible: Mapping[Priority, int] | None,
                          beat_seconds: float | None) -> Iterator[list[Bundle]]:
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
                              backlog=backlog, clock=self._clock, takers=takers)
            with ThreadPoolExecutor(self._concurrency, thread_name_prefix="admit") as pool:
                yield from _Drain(self, queue, bundler, deadline, stats,
                                  beat_seconds=beat_seconds).run(pool)
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
                          kind_limits=self._policy.kind_limits, waiting=jobs)
        drain = _Drain(self, queue, bundler, deadline, stats, wait_seconds=wait_seconds,
                       receives=1)
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


class _Drain:
    """One drain's state, touched only by the thread that runs it; the pool's work returns
    results that this thread applies."""

    def __init__(self, admission: Admission, queue: Queue, bundler: Bundler, deadline: float,
                 stats: AdmissionStats, *, wait_seconds: int = 0,
                 receives: int | None = None, beat_seconds: float | None = None,
                 of_high: bool = False) -> None:
        """``of_high``: the high queue's, never cut into follow-ons for running tasks
        (urgent jobs reach them their own way: stages/handoff.py)."""
        self.admission = admission
        self.of_high = of_high
        self.recorder = admission._recorder
        self.queue = queue
        self.bundler = bundler
        self.deadline = deadline
        self.stats = stats
        self.held: dict[str, Held] = {}  # bundle id -> jobs and messages, until recorded
        self.failed: list[str] = []  # bundles that could not be recorded (still held)
        self.admitted: dict[str, str] = {}  # job ids admitted by this drain: their bundle
        self.ready: list[Bundle] = []  # recorded, to launch now: yielded to the tick
        self.waiting: list[Bundle] = []  # recorded to wait, of an intake (Admission.intake)
        self.kept: list[Received] = []  # array parents not recorded: given back at the end
        self.wait_seconds = wait_seconds  # each receive's long poll
        self.receives_left = receives  # None: until the slots are taken or the queue is empty
        self.receiving = False  # still receiving
        self.empty = 0
        self.stopped_for_room = False  # stopped receiving with every slot's share taken
        self.beat = beat_seconds

    def run(self, pool: ThreadPoolExecutor) -> Iterator[list[Bundle]]:
        # In flight, in the order submitted (dicts as ordered sets): what is done is applied in
        # that order, so bundles recorded at once launch in the order they were recorded, not
        # in their futures' hash order (their addresses: another order on every run).
        receives: dict[Future[list[Received]], None] = {}
        work: dict[Future[Recorded], None] = {}
        self.receiving = True
        ahead = max(1, self.admission._concurrency // 2)
        clock = self.admission._clock
        yielded_at = clock()
        while True:
            if self.receiving and (self.bundler.full or time.monotonic() >= self.deadline):
                self.receiving = False
                if self.bundler.full:
                    self._stopped_for_room()
            # Receive no more than the slots can take (a short receive for the last few): what
            # is received beyond them waits in the table rather than launch now.
            while self.receiving and len(receives) < ahead:
                want = min(BATCH, self.bundler.room() - BATCH * len(receives))
                if want <= 0 or self.receives_left == 0:
                    self.receiving = bool(receives)  # none in flight: no room left at all
                    if want <= 0:
                        self._stopped_for_room()
                    break
                if self.receives_left is not None:
                    self.receives_left -= 1
                receives[pool.submit(self.admission.receive, self.queue, want,
                                     self.wait_seconds)] = None
            if not receives:
                self.bundler.close()  # nothing more is coming: record what is open
            self._close_held_too_long()
            self._keep_held()
            work.update(dict.fromkeys(
                pool.submit(self.recorder.record, self.queue, b, self.held[b.bundle_id])
                for b in self.bundler.take_closed()))
            if not receives and not work:
                break
            pending: list[Future[Any]] = [*receives, *work]
            # Woken now and then however long a call takes, to keep what is held (above).
            wait(pending, timeout=self.admission._hold / 8, return_when=FIRST_COMPLETED)
            for r in [f for f in receives if f.done()]:
                del receives[r]
                work.update(dict.fromkeys(self._admit(pool, r)))
            for w in [f for f in work if f.done()]:
                del work[w]
                work.update(dict.fromkeys(self._recorded(pool, w)))
                for bundle in self.ready:  # one at a time, in the order they were recorded
                    yield [bundle]
                    yielded_at = clock()
                self.ready.clear()
            if self.beat is not None and clock() - yielded_at >= self.beat:
                yield []  # nothing to launch for a while: the tick may look around meanwhile
                yielded_at = clock()
        # Only now, as this queue is not received from again in this tick: given back
        # earlier, the same messages would be received again at once, each time spending a
        # receive. Duplicates of their jobs that arrived later are in their held messages.
        given_back = [m for b in self.failed for m in self.held[b].messages] + self.kept
        self.stats.released += self.recorder.give_back(self.queue, given_back)
        self.recorder.end_batches(self.bundler.batches)
        if self.stopped_for_room and not self.stats.small_jobs_left:
            try:
                self.stats.small_jobs_left = self.queue.backlog().visible > 0
            except Exception as exc:  # a hint for the runners only: none given
                log.warning("reading the queue's backlog after the drain failed",
                            extra={"error": repr(exc)})

    def _stopped_for_room(self) -> None:
        """The drain stops receiving with every slot's share taken: a drain of small jobs
        (not of the high queue, whose jobs no follow-on takes, nor an intake of urgent ones,
        which receives a set number of times) may have left
        more in the queue; if it did (a look at the queue once the drain ends), the summary
        tells the running tasks (with follow-ons on: only then may the next tick cut them
        some)."""
        if self.receives_left is None and self.bundler.small_seen and not self.of_high \
                and self.admission._policy.bundling.follow_on_seconds > 0:
            self.stopped_for_room = True

    def _close_held_too_long(self) -> None:
        for b in self.bundler.open_bundles:
            if time.monotonic() - self.held[b.bundle_id].since >= self.admission._hold / 2:
                self.bundler.close_bundle(b.bundle_id)

    def _keep_held(self) -> None:
        """Messages held for three quarters of the hold (a recording slowed by throttling,
        retried): hidden for another hold from now, so that they do not come back while
        this tick still records them (a duplicate receive each, one more towards the
        dead-letter queue). The hold itself stays short: what a tick that dies held comes
        back after it. One ChangeMessageVisibilityBatch for ten messages, on this thread (a
        rare call: a recording seldom takes that long)."""
        hold = self.admission._hold
        now = time.monotonic()
        for bundle_id, held in self.held.items():
            if now - (held.kept or held.since) < hold * 3 / 4:
                continue
            held.kept = now
            for i in range(0, len(held.messages), BATCH):
                try:
                    self.queue.release(held.messages[i:i + BATCH], after=int(hold))
                except Exception as exc:  # they may come back: duplicates, then, no loss
                    log.warning("holding messages longer failed", extra={
                        "bundle_id": bundle_id, "error": repr(exc)})

    def _admit(self, pool: ThreadPoolExecutor,
               f: Future[list[Received]]) -> list[Future[Recorded]]:
        """Validate and bundle one received batch; return the work it starts."""
        try:
            batch = f.result()
        except Exception as exc:  # stop receiving; what was admitted is still recorded
            log.error("receive failed; the drain stops here", extra={"error": repr(exc)})
            self.receiving = False
            return []
        if not batch:
            self.empty += 1
            self.receiving = self.receiving and self.empty < EMPTY_RECEIVES
            return []
        self.empty = 0
        stats, now = self.stats, self.admission._clock()
        stats.received += len(batch)
        rejections: list[Rejection] = []
        finished: list[Received] = []  # rejected, or duplicates of a recorded job: delete now
        parents: list[tuple[Job, Received]] = []
        for received in batch:
            if received.sent_at is not None:
                stats.oldest_sent_at = min(stats.oldest_sent_at or received.sent_at,
                                           received.sent_at)
            try:
                msg = message.parse(received.body, self.admission._policy.allowed_kinds)
            except InvalidMessage as exc:
                rejections.append(to_rejection(exc, received, now))
                finished.append(received)
                continue
            job = to_job(msg, received, now)
            if job.array_size is not None:  # an array's parent: recorded, never bundled
                stats.arrays += 1
                parents.append((job, received))
                continue
            first = self.admitted.get(job.job_id)
            if first is not None:  # the same job twice in one drain (a redelivery, a resend)
                stats.duplicates += 1
                if first in self.held:
                    # Its first copy is not recorded yet: this one is deleted once it is (by
                    # the recording, or after it by _recorded), and comes back with it if the
                    # recording fails (deleted now, it would leave nothing if that recording
                    # then failed).
                    self.held[first].messages.append(received)
                else:
                    finished.append(received)
                continue
            if not self.bundler.offer(job):
                # Every slot is taken: this one waits in the table, and the drain stops here
                # (an intake of urgent jobs, Admission.intake, takes up to its ``waiting``;
                # a drain making follow-ons goes on past a small job of a shape that does not
                # follow on, while it may admit more: not past a job that needs a slot).
                self.bundler.wait(job)
                stats.waiting += 1
                self.receiving = self.receiving and (
                    self.bundler.takes_waiting
                    or (self.bundler.follows_on and self.bundler.is_small(job)))
            assert job.bundle_id is not None
            self.admitted[job.job_id] = job.bundle_id
            held = self.held.setdefault(job.bundle_id, Held())
            held.jobs.append(job)
            held.messages.append(received)
        out: list[Future[Recorded]] = []
        if parents:
            out.append(pool.submit(self.recorder.record_parents, self.queue, parents))
        if rejections or finished:
            out.append(pool.submit(self.recorder.reject, self.queue, rejections, finished))
        return out

    def _failed(self, failure: str, messages: int, bundle_id: str | None = None) -> None:
        """A recording failed: counted, its reason kept, and the drain receives no more."""
        stats = self.stats
        stats.record_failures += 1
        if failure not in stats.record_errors and len(stats.record_errors) < RECORD_ERRORS_KEPT:
            stats.record_errors.append(failure)
        self.receiving = False
        log.error("recording failed; its messages are given back for a later tick",
                  extra={"error": failure, "bundle_id": bundle_id, "messages": messages})

    def _recorded(self, pool: ThreadPoolExecutor,
                  f: Future[Recorded]) -> list[Future[Recorded]]:
        """Apply what recording a bundle (or deleting messages) did; return the work it starts:
        deleting a recorded bundle's messages, on the pool, while the bundle launches (a
        bundle of 3,000 jobs takes 300 DeleteMessageBatch calls, seconds its launch need not
        wait)."""
        stats = self.stats
        try:
            result = f.result()
        except Exception as exc:
            # Nothing of it is deleted: its messages come back after the hold and are
            # recorded then (what was written of it becomes duplicates, or is committed by
            # the next tick's recovery of RECORDING bundles).
            stats.record_failures += 1
            log.error("recording a bundle failed; its messages are kept for redelivery",
                      extra={"error": repr(exc)})
            return []
        stats.delete_failures += result.delete_failures
        if result.rejections:
            stats.rejected += len(result.rejections)
            stats.rejections.extend({"key": r.key, "reason": r.reason}
                                    for r in result.rejections)
        bundle = result.bundle
        if bundle is None:  # rejections, or array parents (dispatcher.stages.fanout)
            stats.duplicates += result.duplicates
            if result.failure is not None:  # given back at the end, as a failed bundle's
                self._failed(result.failure, len(result.kept))
                self.kept += result.kept
            return []
        if result.failure is not None:
            # Kept held (a later copy of one of its jobs waits with it), given back at the end
            # of the drain; receiving more would only spend their receives too.
            self.failed.append(bundle.bundle_id)
            self._failed(result.failure, len(self.held[bundle.bundle_id].messages),
                         bundle.bundle_id)
            return []
        # Its messages, and copies of its jobs received while it was recorded: all recorded.
        held = self.held.pop(bundle.bundle_id)
        deleting = pool.submit(self.recorder.reject, self.queue, [], held.messages)
        stats.duplicates += result.duplicates
        if result.dependents is not None:
            stats.dependents_released += len(result.dependents.released)
            stats.dependents_cancelled += result.dependents.dependents_cancelled
        stats.rejected += len(result.refused)
        stats.rejections.extend({"key": j.job_id, "reason": j.reason or ""}
                                for j in result.refused)
        admitted = len(held.jobs) - result.duplicates - len(result.refused)
        stats.admitted += admitted
        by = stats.admitted_by_priority
        by[str(bundle.priority)] = by.get(str(bundle.priority), 0) + admitted
        if bundle.job_ids and bundle.state != BundleState.DONE:
            stats.bundles_recorded += 1
            if bundle.batch is not None and bundle.bundle_id in self.bundler.deferred:
                stats.follow_ons += 1  # taken by a running task, or launched by a tick
                stats.follow_on_seconds += bundle.estimated_seconds
            elif bundle.bundle_id in self.bundler.deferred:
                stats.deferred_bundles += 1  # a later tick launches it (due, kind has room)
                self.waiting.append(bundle)
            else:
                self.ready.append(bundle)
        return [deleting]
