"""Intake: drain the queue into recorded jobs, never deleting a message before it is recorded.

Each received message ends in exactly one of: a recorded job (deleted), a duplicate of a job
already recorded (deleted), a REJECTED record with its reason (deleted; also for a valid message
whose item the table refused), or back in the queue because capacity ran out (released, still
backlog).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.domain import message
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Job, JobState, Rejection
from dispatcher.ports.queue import BATCH, Queue, Received
from dispatcher.ports.store import DispatchStore
from dispatcher.stages.bundle import Bundler
from dispatcher.stages.policy import AdmitPolicy


@dataclass
class IntakeStats:
    received: int = 0
    admitted: int = 0
    rejected: int = 0
    duplicates: int = 0
    released: int = 0
    delete_failures: int = 0
    oldest_sent_at: float | None = None
    rejections: list[dict[str, str]] = field(default_factory=list)


def to_job(msg: message.JobMessage, received: Received, at: float) -> Job:
    return Job(job_id=msg.job_id, kind=msg.kind, payload=msg.payload,
               estimated_seconds=msg.estimated_seconds, max_attempts=msg.max_attempts,
               timeout_seconds=msg.timeout_seconds, created_at=at,
               enqueued_at=received.sent_at, message_id=received.message_id,
               payload_bytes=msg.payload_bytes)


def to_rejection(exc: InvalidMessage, received: Received, at: float) -> Rejection:
    body = received.body.encode()[:message.REJECTED_BODY_BYTES].decode(errors="replace")
    return Rejection(key=exc.job_id or received.message_id, message_id=received.message_id,
                     reason=exc.reason, body=body, job_id=exc.job_id, created_at=at)


class Intake:
    def __init__(self, queue: Queue, store: DispatchStore, policy: AdmitPolicy,
                 clock: Callable[[], float] = time.time) -> None:
        self._policy = policy
        self._queue = queue
        self._store = store
        self._clock = clock

    def drain(self, capacity: int, deadline: float, stats: IntakeStats) -> list[Bundle]:
        bundler = Bundler(self._policy.bundling, capacity)
        jobs: dict[str, Job] = {}
        done: list[Received] = []  # to delete once their outcome is recorded
        leftover: list[Received] = []
        rejections: list[Rejection] = []
        while capacity > 0 and not bundler.full and time.monotonic() < deadline:
            batch = self._queue.receive(BATCH)
            if not batch:
                break
            stats.received += len(batch)
            taken = 0
            for received in batch:
                if received.sent_at is not None:
                    stats.oldest_sent_at = min(stats.oldest_sent_at or received.sent_at,
                                               received.sent_at)
                try:
                    msg = message.parse(received.body, self._policy.allowed_kinds)
                except InvalidMessage as exc:
                    rejections.append(to_rejection(exc, received, self._clock()))
                    done.append(received)
                    continue
                if msg.job_id in jobs:  # the same job twice in one tick
                    stats.duplicates += 1
                    done.append(received)
                    continue
                job = to_job(msg, received, self._clock())
                if bundler.offer(job):
                    jobs[job.job_id] = job
                    done.append(received)
                    taken += 1
                else:
                    leftover.append(received)
            if taken == 0 and leftover:
                break
        # Record first, delete last: a crash in between only causes redeliveries, which the
        # conditional writes turn into duplicates.
        if rejections:
            self._store.reject(rejections)
            stats.rejected += len(rejections)
            stats.rejections.extend({"key": r.key, "reason": r.reason} for r in rejections)
        bundles = bundler.bundles()
        duplicates = self._store.record(bundles, list(jobs.values())) if bundles else set()
        # A job the table refused was recorded REJECTED by the store (it hurts only itself).
        refused = [j for j in jobs.values() if j.state == JobState.REJECTED]
        stats.duplicates += len(duplicates)
        stats.rejected += len(refused)
        stats.rejections.extend({"key": j.job_id, "reason": j.reason or ""} for j in refused)
        stats.admitted += len(jobs) - len(duplicates) - len(refused)
        if leftover:
            self._queue.release(leftover)
            stats.released += len(leftover)
        for start in range(0, len(done), BATCH):
            failed = self._queue.delete(done[start:start + BATCH])
            stats.delete_failures += len(failed)
        return [b for b in bundles if b.job_ids]
