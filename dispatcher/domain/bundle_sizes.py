"""How large a bundle may be and which jobs may share one: the sizing rule admission packs by
(:mod:`dispatcher.stages.bundle`), and retries too (:mod:`dispatcher.store.job_ops`).

A bundle holds small jobs worth ``bundle_max_seconds`` of one task's time at
``task_concurrency`` jobs in parallel, at most ``bundle_max_jobs`` of them and
``MAX_BUNDLE_BYTES`` of job items. A job is small when estimated at or under
``small_job_seconds`` and waiting for no other; any other job has a bundle of its own. Only
jobs of one *shape* share a bundle: the same priority, the same resources (a task has one
size), the same ``not_before`` if scheduled, and one kind if that kind has a limit
(``LONGJOBS_KIND_LIMITS``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dispatcher.domain.jobs import Job, Priority, Resources
from dispatcher.domain.lifecycle import DEPENDENTS_HELD_AT

# Bytes of job items one bundle may hold: what the tick keeps in memory per bundle it is
# filling or recording (a bundle of more than one transaction's worth is recorded in pages).
MAX_BUNDLE_BYTES = 16_000_000

# Priority, resources, when it is due if scheduled (None: now), its kind if that kind has a
# limit (None: any), its tenant (bundles never mix tenants: dispatcher.domain.tenants).
# (priority, resources, scheduled, limited kind, tenant, rate limits' tokens a job takes)
Shape = tuple[Priority, Resources, float | None, str | None, str | None,
              frozenset[tuple[str, int]] | None]


def work_budget(bundle_max_seconds: float, task_concurrency: int) -> float:
    """Estimated job-seconds one bundle may hold: ``bundle_max_seconds`` of one task's time
    at ``task_concurrency`` jobs in parallel."""
    return bundle_max_seconds * task_concurrency


@dataclass(frozen=True)
class BundleSizes:
    """The sizing rule's settings, as plain values (defaults: the settings' defaults)."""

    bundle_max_jobs: int = 10_000
    bundle_max_seconds: float = 900.0
    small_job_seconds: float = 60.0
    task_concurrency: int = 1
    kind_limits: Mapping[str, int] = field(default_factory=dict)  # running jobs per kind

    @property
    def max_work_seconds(self) -> float:
        return work_budget(self.bundle_max_seconds, self.task_concurrency)

    def is_small(self, job: Job) -> bool:
        """Bundled with others: a small job that waits for no other (one that does is held in
        a bundle of its own, released when its dependencies are met)."""
        est = job.estimated_seconds
        return est is not None and est <= self.small_job_seconds and not job.depends_on

    def shape(self, job: Job, at: float) -> Shape:
        """The jobs ``job`` may share a bundle with, as of ``at`` (a ``not_before`` not later
        than it is not scheduled)."""
        scheduled = job.not_before if job.not_before is not None \
            and job.not_before > at else None
        if job.depends_on:  # held until its dependencies are met (stages/dependents.py)
            scheduled = DEPENDENTS_HELD_AT
        kind = job.kind if job.kind in self.kind_limits else None
        uses = frozenset(job.uses.items()) if job.uses else None
        return job.priority, job.resources, scheduled, kind, job.tenant, uses

    def slots(self, kind: str) -> int:
        """Most jobs of limited ``kind`` one bundle runs at once."""
        return max(1, min(self.task_concurrency, self.kind_limits[kind]))

    def fits(self, jobs: int, seconds: float, item_bytes: int, job: Job, limit: int) -> bool:
        """Whether ``job`` joins a bundle holding ``jobs`` jobs of ``seconds`` estimated and
        ``item_bytes`` of items, of at most ``limit`` jobs."""
        return jobs < limit \
            and seconds + (job.estimated_seconds or 0) <= self.max_work_seconds \
            and item_bytes + job.item_bytes() <= MAX_BUNDLE_BYTES

    def pack(self, jobs: list[Job], at: float, max_jobs: int
             ) -> tuple[list[list[Job]], list[list[Job]]]:
        """``jobs`` (all to run from ``at`` on, as a retry's are) in bundles, in order: each
        small one in the bundle of its shape while it fits (at most ``max_jobs`` a bundle,
        besides the rule's own limits), in a new bundle of that shape once it does not; any
        other job alone. A job whose earlier run may still be alive (``live_task``) is alone
        too: its bundle is held until that run is known ended, and holds back no other job.
        Returns the bundles closed (full, or of one such job) and the bundles still open (the
        last of each shape, which more jobs of that shape could still join)."""
        closed: list[list[Job]] = []
        open_: dict[Shape, tuple[list[Job], float, int]] = {}
        limit = max(1, min(max_jobs, self.bundle_max_jobs))
        for job in jobs:
            if job.live_task or not self.is_small(job):
                closed.append([job])
                continue
            shape = self.shape(job, at)
            members, seconds, size = open_.get(shape, ([], 0.0, 0))
            # Jobs that take tokens alone: one launch takes a whole bundle's, and a retry does
            # not read the limits (the drain sizes its bundles by them: stages/bundle.py).
            most = limit if shape[5] is None else 1
            if members and not self.fits(len(members), seconds, size, job, most):
                closed.append(members)
                members, seconds, size = [], 0.0, 0
            members.append(job)
            open_[shape] = (members, seconds + (job.estimated_seconds or 0),
                            size + job.item_bytes())
            if len(members) >= most:
                closed.append(open_.pop(shape)[0])
        return closed, [members for members, _, _ in open_.values()]
