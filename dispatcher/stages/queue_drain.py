"""One queue's drain within a tick's admission (:class:`dispatcher.stages.admit.Admission`):
receives run ahead on the pool while this thread validates and bundles each batch, each bundle
is recorded and its messages deleted on the pool as soon as it closes, and the bundles that can
launch now are yielded as they are recorded. Its state is touched only by the thread that runs
it; the pool's work returns results that this thread applies."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from dispatcher.domain import message, tenants
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Job, Rejection
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


@dataclass(frozen=True)
class DrainSetup:
    """What every drain of one admission shares: where bundles are recorded, the policy, the
    receive (with the hold), the clock, the calls kept in flight and the hold's seconds."""

    recorder: Recorder
    policy: AdmitPolicy
    receive: Callable[[Queue, int, int], list[Received]]
    clock: Callable[[], float]
    concurrency: int
    hold: float


class QueueDrain:
    """One drain's state, touched only by the thread that runs it; the pool's work returns
    results that this thread applies."""

    def __init__(self, setup: DrainSetup, queue: Queue, bundler: Bundler, deadline: float,
                 stats: AdmissionStats, *, wait_seconds: int = 0,
                 receives: int | None = None, beat_seconds: float | None = None,
                 of_high: bool = False) -> None:
        """``of_high``: the high queue's, never cut into follow-ons for running tasks
        (urgent jobs reach them their own way: stages/handoff.py)."""
        self.setup = setup
        self.of_high = of_high
        self.recorder = setup.recorder
        self.queue = queue
        self.bundler = bundler
        self.deadline = deadline
        self.stats = stats
        self.held: dict[str, Held] = {}  # bundle id -> jobs and messages, until recorded
        self.failed: list[str] = []  # bundles that could not be recorded (still held)
        self.admitted: dict[str, str] = {}  # job ids admitted by this drain: their bundle
        self.ready: list[Bundle] = []  # recorded, to launch now: yielded to the tick
        # Recorded to wait: an intake's (Admission.intake); a drain's deferred bundles
        # (the tick launches those that take rate limits' tokens into the slots left).
        self.waiting: list[Bundle] = []
        # Array parents not recorded, and fires whose judging failed: given back at the end.
        self.kept: list[Received] = []
        self.fire_runs: set[str] = set()  # schedules' fires this drain let run
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
        ahead = max(1, self.setup.concurrency // 2)
        clock = self.setup.clock
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
                receives[pool.submit(self.setup.receive, self.queue, want,
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
            wait(pending, timeout=self.setup.hold / 8, return_when=FIRST_COMPLETED)
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
                and self.setup.policy.bundling.follow_on_seconds > 0:
            self.stopped_for_room = True

    def _close_held_too_long(self) -> None:
        for b in self.bundler.open_bundles:
            if self.setup.clock() - self.held[b.bundle_id].since >= self.setup.hold / 2:
                self.bundler.close_bundle(b.bundle_id)

    def _keep_held(self) -> None:
        """Messages held for three quarters of the hold (a recording slowed by throttling,
        retried): hidden for another hold from now, so that they do not come back while
        this tick still records them (a duplicate receive each, one more towards the
        dead-letter queue). The hold itself stays short: what a tick that dies held comes
        back after it. One ChangeMessageVisibilityBatch for ten messages, on this thread (a
        rare call: a recording seldom takes that long)."""
        hold = self.setup.hold
        now = self.setup.clock()
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
        stats, now = self.stats, self.setup.clock()
        stats.received += len(batch)
        rejections: list[Rejection] = []
        finished: list[Received] = []  # rejected, or duplicates of a recorded job: delete now
        parents: list[tuple[Job, Received]] = []
        skipped: list[tuple[Job, Received, str]] = []  # schedules' fires that run nothing
        for received in batch:
            if received.sent_at is not None:
                stats.oldest_sent_at = min(stats.oldest_sent_at or received.sent_at,
                                           received.sent_at)
            try:
                msg = message.parse(received.body, self.setup.policy.allowed_kinds)
            except InvalidMessage as exc:
                rejections.append(to_rejection(exc, received, now))
                finished.append(received)
                continue
            job = to_job(msg, received, now)
            if msg.schedule is not None and received.array_index is None:
                try:
                    why = self.recorder.fires.judge(msg.schedule.name, msg.schedule.overlap, job,
                                                    self.fire_runs, now)
                except Exception as exc:  # judged again when it comes back
                    # Given back at the end; the drain goes on: one fire's trouble (its
                    # schedule's record) must not hold up the other jobs of the queue.
                    self._failed(f"judging a schedule's fire failed: {exc!r}"[:1000], 1,
                                 stop=False)
                    self.kept.append(received)
                    continue
                if why is not None:
                    skipped.append((job, received, why))
                    continue
                self.fire_runs.add(job.job_id)  # an array's parent too: live, not recorded
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
            held = self.held.get(job.bundle_id)
            if held is None:
                held = self.held[job.bundle_id] = Held(since=now)
            held.jobs.append(job)
            held.messages.append(received)
        out: list[Future[Recorded]] = []
        if parents:
            out.append(pool.submit(self.recorder.record_parents, self.queue, parents))
        if skipped:
            out.append(pool.submit(self.recorder.skip, self.queue, skipped))
        if rejections or finished:
            out.append(pool.submit(self.recorder.reject, self.queue, rejections, finished))
        return out

    def _failed(self, failure: str, messages: int, bundle_id: str | None = None, *,
                stop: bool = True) -> None:
        """A recording failed: counted, its reason kept, and (``stop``) the drain receives no
        more."""
        stats = self.stats
        stats.record_failures += 1
        if failure not in stats.record_errors and len(stats.record_errors) < RECORD_ERRORS_KEPT:
            stats.record_errors.append(failure)
        self.receiving = self.receiving and not stop
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
            # Nothing of it is deleted: its messages come back a hold after this drain ends
            # (it still holds them, as any bundle it has not recorded) and are recorded then
            # (what was written of it becomes duplicates, or is committed by the next tick's
            # recovery of RECORDING bundles).
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
        if bundle is None:  # rejections, array parents (dispatcher.stages.fanout), skips
            stats.duplicates += result.duplicates
            stats.skipped_fires += result.skipped
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
            if bundle.bundle_id in self.bundler.footholds \
                    or (bundle.batch is not None and bundle.bundle_id in self.bundler.deferred):
                name = bundle.tenant or tenants.NONE
                stats.tenants_followed[name] = stats.tenants_followed.get(name, 0) + 1
            if bundle.bundle_id in self.bundler.footholds:  # due work, for a slot left to it
                stats.deferred_bundles += 1
                stats.footholds[str(bundle.priority)] = \
                    stats.footholds.get(str(bundle.priority), 0) + 1
                self.waiting.append(bundle)
            elif bundle.batch is not None and bundle.bundle_id in self.bundler.deferred:
                stats.follow_ons += 1  # taken by a running task, or launched by a tick
                stats.follow_on_seconds += bundle.estimated_seconds
            elif bundle.bundle_id in self.bundler.deferred:
                stats.deferred_bundles += 1  # a later tick launches it (due, kind has room)
                self.waiting.append(bundle)
            else:
                self.ready.append(bundle)
        return [deleting]
