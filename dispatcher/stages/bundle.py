"""Packing jobs into bundles: one task per bundle, so small jobs share a task's start-up cost.

Bundles are sized by work: a bundle holds small jobs worth ``bundle_max_seconds`` of one task's
time at ``task_concurrency`` jobs in parallel (900 s at 20 in parallel of 2 s jobs is 9,000
jobs). With a backlog larger than the free task slots can take at once, the bundles are made
even (``target_jobs`` each, the backlog spread over the slots) so every task starts at once and
ends at about the same time; the last slot takes whatever is left, up to the work limit.

A bundle is closed as soon as it is full, so the tick records and launches it while it keeps
draining the queue.
"""

from __future__ import annotations

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, new_id
from dispatcher.stages.policy import BundlePolicy

# Bytes of job items one bundle may hold: what the dispatcher keeps in memory per bundle it is
# filling or recording (a bundle of more than one transaction's worth is recorded in pages).
MAX_BUNDLE_BYTES = 16_000_000


class Bundler:
    """Admits jobs while they fit into ``capacity`` bundles, closing each one when full.

    Jobs estimated at or under the small-job threshold fill the open bundle; any other job
    (including one with no estimate) gets a bundle of its own, closed at once.
    """

    def __init__(self, policy: BundlePolicy, capacity: int,
                 target_jobs: int | None = None) -> None:
        self._policy = policy
        self.capacity = max(0, capacity)
        self._target = target_jobs
        self.opened = 0
        self._closed: list[Bundle] = []
        self._open: Bundle | None = None
        self._open_bytes = 0

    def is_small(self, job: Job) -> bool:
        est = job.estimated_seconds
        return est is not None and est <= self._policy.small_job_seconds

    def _limit(self) -> int:
        """Jobs the open bundle may hold: the even share, except in the last slot."""
        limit = self._policy.bundle_max_jobs
        if self._target is not None and self.opened < self.capacity:
            limit = min(limit, max(1, self._target))
        return limit

    def _fits_open(self, job: Job) -> bool:
        b = self._open
        return (b is not None and len(b.job_ids) < self._limit()
                and b.estimated_seconds + (job.estimated_seconds or 0)
                <= self._policy.max_work_seconds
                and self._open_bytes + job.item_bytes() <= MAX_BUNDLE_BYTES)

    @property
    def open_bundle(self) -> Bundle | None:
        return self._open

    @property
    def full(self) -> bool:
        """No further job of any size can be admitted."""
        return self.opened >= self.capacity and self._open is None

    def offer(self, job: Job) -> bool:
        """Admit ``job`` into a bundle; False when no bundle can take it (capacity spent)."""
        if self.is_small(job) and self._fits_open(job):
            assert self._open is not None
            self._add(self._open, job)
            self._open_bytes += job.item_bytes()
            if len(self._open.job_ids) >= self._limit():
                self.close()
            return True
        if self.opened >= self.capacity:
            return False
        self.close()
        bundle = Bundle(bundle_id=new_id(), job_ids=[])
        self.opened += 1
        self._add(bundle, job)
        if self.is_small(job):
            self._open, self._open_bytes = bundle, job.item_bytes()
            if len(bundle.job_ids) >= self._limit():
                self.close()
        else:
            self._closed.append(bundle)
        return True

    def close(self) -> None:
        """Close the open bundle (full, held long enough, or the drain ends)."""
        if self._open is not None:
            self._closed.append(self._open)
            self._open, self._open_bytes = None, 0

    def take_closed(self) -> list[Bundle]:
        """The bundles closed since the last call, ready to record."""
        out, self._closed = self._closed, []
        return out

    @staticmethod
    def _add(bundle: Bundle, job: Job) -> None:
        bundle.job_ids.append(job.job_id)
        bundle.estimated_seconds += job.estimated_seconds or 0
        job.bundle_id = bundle.bundle_id
