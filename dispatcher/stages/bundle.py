"""Packing jobs into bundles: one task per bundle, so small jobs share a task's start-up cost."""

from __future__ import annotations

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, new_id
from dispatcher.stages.policy import BundlePolicy

# A bundle and its jobs are written in one TransactWriteItems call, which is limited to 4 MB.
MAX_BUNDLE_BYTES = 3_000_000


class Bundler:
    """Admits jobs while they fit into ``capacity`` bundles.

    Jobs estimated at or under the small-job threshold fill the open bundle up to the job and
    seconds limits; any other job (including one with no estimate) gets a bundle of its own.
    """

    def __init__(self, policy: BundlePolicy, capacity: int) -> None:
        self._policy = policy
        self.capacity = max(0, capacity)
        self._bundles: list[Bundle] = []
        self._open: Bundle | None = None
        self._open_bytes = 0

    def is_small(self, job: Job) -> bool:
        est = job.estimated_seconds
        return est is not None and est <= self._policy.small_job_seconds

    def _fits_open(self, job: Job) -> bool:
        b = self._open
        return (b is not None and len(b.job_ids) < self._policy.bundle_max_jobs
                and b.estimated_seconds + (job.estimated_seconds or 0)
                <= self._policy.bundle_max_seconds
                and self._open_bytes + job.item_bytes() <= MAX_BUNDLE_BYTES)

    @property
    def full(self) -> bool:
        """No further job of any size can be admitted."""
        return len(self._bundles) >= self.capacity and (
            self._open is None or len(self._open.job_ids) >= self._policy.bundle_max_jobs)

    def offer(self, job: Job) -> bool:
        if self.is_small(job) and self._fits_open(job):
            assert self._open is not None
            self._add(self._open, job)
            self._open_bytes += job.item_bytes()
            return True
        if len(self._bundles) >= self.capacity:
            return False
        bundle = Bundle(bundle_id=new_id(), job_ids=[])
        self._bundles.append(bundle)
        self._add(bundle, job)
        if self.is_small(job):
            self._open, self._open_bytes = bundle, job.item_bytes()
        return True

    @staticmethod
    def _add(bundle: Bundle, job: Job) -> None:
        bundle.job_ids.append(job.job_id)
        bundle.estimated_seconds += job.estimated_seconds or 0
        job.bundle_id = bundle.bundle_id

    def bundles(self) -> list[Bundle]:
        return list(self._bundles)
