"""Record: a closed bundle's jobs written to the table, then its messages deleted, never before.

The admit stage (:mod:`dispatcher.stages.admit`) hands over each bundle it closes with the jobs
and the messages they came in (:class:`Held`); this stage decides what becomes of them. Each
received message ends in exactly one of: a recorded job (deleted), a duplicate of a job already
recorded (deleted), or a REJECTED record with its reason (deleted; also for a valid message
whose item the table refused: :func:`refused`). A valid message received after every slot was
taken is recorded too, in a bundle that waits in the table for a later tick (see
:meth:`dispatcher.stages.bundle.Bundler.wait`): never sent back, since every receive counts
toward the DLQ's maxReceiveCount.

What a failure to record means for the messages: a message whose bundle could not be recorded
(the store has already tried again what failed for a moment) is not deleted. The drain stops
receiving, and once it ends the messages of the bundles that failed are given back
(:meth:`Recorder.give_back`: visible again at once, not after the hold, with task slots idle),
for the next tick; its job, if part of it was written, is a duplicate then. Each such delivery
still spends one of the queue's maxReceiveCount receives: a failure that persists tick after
tick sends the messages to the dead-letter queue, and each tick's report says why
(``record_errors``).

How the table is written (one transaction per bundle that fits, pages committed last for a
larger one, conditions that leave duplicates out) is the store's table policy:
:meth:`dispatcher.store.StageStore.record`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, JobState, Rejection
from dispatcher.ports.queue import BATCH, Queue, Received
from dispatcher.stages.dependents import Dependents, DependentsStats
from dispatcher.stages.fires import FireGate
from dispatcher.store import StageStore

log = logging.getLogger(__name__)


@dataclass
class Held:
    """An open or recording bundle's jobs and the messages to delete once it is recorded."""

    jobs: list[Job] = field(default_factory=list)
    messages: list[Received] = field(default_factory=list)
    since: float = 0.0  # its oldest message's receipt, on the admission's clock
    kept: float | None = None  # when its messages' hold was last made longer, if ever


@dataclass
class Recorded:
    """What recording one bundle (or rejecting some messages) did."""

    bundle: Bundle | None = None
    duplicates: int = 0
    refused: list[Job] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    delete_failures: int = 0
    failure: str | None = None  # the bundle could not be recorded: why (nothing deleted)
    # A job recorded to wait for others: linked to them, and released or cancelled at once if
    # they had decided already (stages/dependents.py).
    dependents: DependentsStats | None = None
    kept: list[Received] = field(default_factory=list)  # not recorded: give back at the end
    skipped: int = 0  # schedules' fires recorded as skipped (dispatcher.stages.fires)


def refused(job: Job) -> Rejection:
    """The REJECTED record of a valid job whose item the table refused (the store left it out
    of its bundle and says why in its ``reason``). Its message body is not at hand: the record
    keeps the job's fields without the payload (whose size is given)."""
    body = json.dumps({"job_id": job.job_id, "kind": job.kind,
                       "estimated_seconds": job.estimated_seconds,
                       "timeout_seconds": job.timeout_seconds, "max_attempts": job.max_attempts,
                       "payload_bytes": job.payload_bytes}, separators=(",", ":"))
    return Rejection(key=job.job_id, message_id=job.message_id or job.job_id,
                     reason=job.reason or "the table refused the job's item", body=body,
                     job_id=job.job_id, created_at=job.created_at)


class Recorder:
    """Records bundles and rejections, deletes their messages after, gives back the rest. Its
    methods run on the drain's pool: each touches only what it is given."""

    def __init__(self, store: StageStore, dependents: Dependents) -> None:
        self._store = store
        self._dependents = dependents
        self.fires = FireGate(store)

    def record(self, queue: Queue, bundle: Bundle, held: Held) -> Recorded:
        """Record a bundle; its messages are deleted after it (never before), by the drain
        (:meth:`reject` with no rejections), while the bundle launches. A failure to record is
        returned, not raised: its messages are kept for :meth:`give_back`."""
        try:
            # Labels first: a label item whose job is then not recorded is skipped by its
            # readers (dispatcher.store.label_index); a job recorded unfound by a label is not.
            self._store.index_labels([j for j in held.jobs if j.labels or j.tenant])
            duplicates = self._store.record([bundle], held.jobs)
            refused_items = [j for j in held.jobs if j.state == JobState.REJECTED]
            if refused_items:
                self._store.reject([refused(j) for j in refused_items])
        except Exception as exc:
            return Recorded(bundle, failure=f"{type(exc).__name__}: {exc}"[:1000])
        done = Recorded(bundle, len(duplicates), refused_items)
        waits = [j for j in held.jobs if j.depends_on and j.job_id in bundle.job_ids]
        if waits:
            done.dependents = DependentsStats()
            for job in waits:  # each in a bundle of its own (stages/bundle.py)
                try:
                    done.dependents.add(self._dependents.recorded(bundle, job))
                except Exception as exc:  # recorded and held: the next look links it
                    log.error("linking a dependent failed; the next look at every held "
                              "dependent links it", extra={"job_id": job.job_id,
                                                           "error": repr(exc)})
        return done

    def record_parents(self, queue: Queue, parents: list[tuple[Job, Received]]) -> Recorded:
        """Record array jobs' parents (their children are recorded in later drains, see
        :mod:`dispatcher.stages.fanout`), then delete their messages. A failure is returned
        with the messages, to be given back as a failed bundle's are."""
        try:
            self._store.index_labels([job for job, _ in parents if job.labels or job.tenant])
            duplicates = self._store.record_parents([job for job, _ in parents])
        except Exception as exc:
            return Recorded(failure=f"{type(exc).__name__}: {exc}"[:1000],
                            kept=[m for _, m in parents])
        return Recorded(duplicates=len(duplicates),
                        delete_failures=self.delete(queue, [m for _, m in parents]))

    def skip(self, queue: Queue, skipped: list[tuple[Job, Received, str]]) -> Recorded:
        """Record skipped fires' jobs, CANCELLED with their reasons, then delete their
        messages. A failure is returned with the messages, to be given back as a failed
        bundle's are."""
        try:
            written = sum(self._store.record_skipped(job, reason) for job, _, reason in skipped)
        except Exception as exc:
            return Recorded(failure=f"{type(exc).__name__}: {exc}"[:1000],
                            kept=[m for _, m, _ in skipped])
        return Recorded(duplicates=len(skipped) - written, skipped=written,
                        delete_failures=self.delete(queue, [m for _, m, _ in skipped]))

    def reject(self, queue: Queue, rejections: list[Rejection],
               messages: list[Received]) -> Recorded:
        """Record malformed messages as REJECTED, then delete ``messages`` (those and copies
        of jobs recorded already)."""
        if rejections:
            self._store.reject(rejections)
        return Recorded(rejections=rejections, delete_failures=self.delete(queue, messages))

    def end_batches(self, batches: dict[str, int]) -> None:
        """Say how many follow-ons each batch of a drain has (``batches``: batch -> count),
        once the drain recorded all it could: runners then stop looking at its end instead
        of waiting for more (dispatcher.store.follow_ons). A failure is logged: the runners
        wait a little longer at the batch's end."""
        for batch, count in batches.items():
            try:
                self._store.end_batch(batch, count)
            except Exception as exc:
                log.warning("a batch's end was not written; its runners look for more "
                            "follow-ons a little longer", extra={"batch": batch,
                                                                 "error": repr(exc)})

    @staticmethod
    def delete(queue: Queue, messages: list[Received]) -> int:
        """Delete messages whose jobs are recorded; how many could not be deleted (they come
        back after the hold, as duplicates)."""
        return sum(len(queue.delete(messages[i:i + BATCH]))
                   for i in range(0, len(messages), BATCH))

    @staticmethod
    def give_back(queue: Queue, messages: list[Received]) -> int:
        """Make the messages of bundles that could not be recorded visible again now
        (ChangeMessageVisibilityBatch to 0); how many. A failure here only leaves them to
        come back after the hold."""
        done = 0
        for i in range(0, len(messages), BATCH):
            try:
                queue.release(messages[i:i + BATCH])
                done += len(messages[i:i + BATCH])
            except Exception as exc:
                log.error("giving messages back failed; they return after the hold",
                          extra={"error": repr(exc)})
        return done
