"""Retried work is bundled (the system model's ``retries_bundled`` check): a bulk retry of N
small jobs takes no more bundles than admission's sizing rule packs N such jobs into, page by
page, and each shared bundle's task goes on to the retry's other due bundles, so the tasks it
starts are bounded by the free slots, as an admitted batch's are.

The bound, for the jobs of one shape (dispatcher/domain/bundle_sizes.py) retried in one page:
any ``per`` of them fit one bundle, ``per`` being the least of the retry's bundle size, the
rule's job limit, and what its work and bytes budgets hold of the largest of them (one for jobs
that take tokens); packing in order closes a bundle only when the next job does not fit, so
every bundle closed holds at least ``per`` and the bundles are at most ``ceil(n / per)``. Over
a run of P pages, at most ``ceil(n / per) + P - 1``. An array's children, retried through their
parent in bundles of their own, are left out.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from dispatcher.domain.bundle_sizes import MAX_BUNDLE_BYTES, BundleSizes, Shape
from dispatcher.domain.bundles import has_follow_ons
from dispatcher.domain.jobs import Job
from dispatcher.store.job_ops import RETRY_BUNDLE_JOBS
from tests import model_checks as checks


def per_bundle(jobs: list[Job], rule: BundleSizes) -> int:
    """How many of ``jobs`` (one shape) any one bundle holds at least: one, for jobs that take
    a rate limit's tokens (a retry reads no limits, and one launch takes a whole bundle's
    tokens: :meth:`BundleSizes.pack` puts each alone)."""
    if any(j.uses for j in jobs):
        return 1
    longest = max((j.estimated_seconds or 0.0 for j in jobs), default=0.0)
    largest = max((j.item_bytes() for j in jobs), default=1)
    by_work = math.floor(rule.max_work_seconds / longest) if longest > 0 else RETRY_BUNDLE_JOBS
    return max(1, min(RETRY_BUNDLE_JOBS, rule.bundle_max_jobs, by_work,
                      MAX_BUNDLE_BYTES // largest))


def unbundled(view: checks.View, retried: set[str], rule: BundleSizes, pages: int,
              at: float) -> list[str]:
    """What a bulk retry of ``retried`` (over at most ``pages`` pages, at ``at``) did against
    the check: shapes spread over more bundles than the bound, and shared bundles whose
    task would not go on to other due work (of no batch, or of a drain's)."""
    shapes: dict[Shape, list[Job]] = defaultdict(list)
    bundles: dict[Shape, set[str]] = defaultdict(set)
    out: list[str] = []
    for job_id in sorted(retried):
        job = view.job(job_id)
        # An array's children are retried through their parent, in bundles of their own, page
        # by page of the array (dispatcher/store/array_retry.py; tests/twins/
        # test_retries_share_bundles.py): not packed with the run's other jobs.
        if job is None or job.array_size is not None or job.array_parent or job.live_task \
                or not rule.is_small(replace(job, depends_on=None)) or not job.bundle_id:
            continue
        shape = rule.shape(replace(job, depends_on=None), at)
        shapes[shape].append(job)
        bundles[shape].add(job.bundle_id)
        bundle = view.bundle(job.bundle_id)
        if bundle is not None and len(bundle.job_ids) > 1 \
                and (bundle.batch is None or has_follow_ons(bundle.batch)):
            out.append(f"{job_id}'s retry bundle {bundle.bundle_id} of {len(bundle.job_ids)} "
                       f"jobs is of batch {bundle.batch}: its task would take no other due "
                       "bundle of the retry, and each would start a task of its own")
    for shape, jobs in shapes.items():
        most = math.ceil(len(jobs) / per_bundle(jobs, rule)) + pages - 1
        if len(bundles[shape]) > most:
            out.append(f"{len(jobs)} small jobs of one shape retried in {pages} page(s) are in "
                       f"{len(bundles[shape])} bundles, more than the {most} admission's rule "
                       f"packs them into: {sorted(j.job_id for j in jobs)}")
    return sorted(set(out))
