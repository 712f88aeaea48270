"""Bundles of a large backlog end together: a bundle the drain closes later gets fewer jobs.

The drain admits jobs at some rate and launches each bundle as it closes, so with equal
bundles the last task started (and ended) the whole admission time after the first: at the
reference batch's shape, about a minute of 400 s. The bundler tapers the shares by the rate it
sees (``tapered_share``), so each task's end, its bundle's close time plus its jobs' work, is
nearly the same for all.
"""

from __future__ import annotations

import pytest

from dispatcher.domain.jobs import Job
from dispatcher.stages.bundle import Bundler, tapered_share
from dispatcher.stages.policy import BundlePolicy

# The reference batch's task: 20 jobs of 2 s at once (10 jobs/s), bundles of up to 9,000.
POLICY = BundlePolicy(bundle_max_jobs=10_000, bundle_max_seconds=900, small_job_seconds=60,
                      task_concurrency=20)
JOB_SECONDS = 2.0
TASK_RATE = POLICY.task_concurrency / JOB_SECONDS


def ends(jobs: int, slots: int, admit_rate: float, taper: bool) -> list[float]:
    """Each bundle's end: the time it closed (at ``admit_rate`` jobs/s) plus its jobs' work on
    one task."""
    now = [0.0]
    bundler = Bundler(POLICY, slots, -(-jobs // slots), at=0.0,
                      backlog=jobs if taper else None, clock=lambda: now[0])
    closed_at: dict[str, float] = {}
    for i in range(jobs):
        now[0] = (i + 1) / admit_rate
        assert bundler.offer(Job(job_id=f"j{i}", kind="k", payload={},
                                 estimated_seconds=JOB_SECONDS))
        for b in bundler.take_closed():
            closed_at[b.bundle_id] = now[0]
            closed_at[b.bundle_id + ":jobs"] = len(b.job_ids)
    bundler.close()
    for b in bundler.take_closed():
        closed_at[b.bundle_id] = now[0]
        closed_at[b.bundle_id + ":jobs"] = len(b.job_ids)
    ids = [k for k in closed_at if not k.endswith(":jobs")]
    assert sum(closed_at[k + ":jobs"] for k in ids) == jobs
    assert len(ids) == slots
    return [closed_at[k] + closed_at[k + ":jobs"] / TASK_RATE for k in ids]


def test_tapered_bundles_end_together_where_even_ones_end_a_drain_apart() -> None:
    # 60,000 jobs on 60 tasks at 1,500 jobs/s: 40 s of admission, 100 s of work a task.
    even = ends(60_000, 60, 1_500.0, taper=False)
    tapered = ends(60_000, 60, 1_500.0, taper=True)
    assert max(even) - min(even) > 35.0  # the whole admission time
    assert max(tapered) - min(tapered) < 3.0
    assert max(tapered) < max(even) - 15.0  # and the batch ends earlier


def test_without_the_backlog_or_a_clock_the_shares_stay_even() -> None:
    even = ends(6_000, 6, 1_000.0, taper=False)
    assert max(even) - min(even) == pytest.approx(5.0, abs=0.01)


@pytest.mark.parametrize(("remaining", "slots", "admit_rate"),
                         [(200_000, 60, 2_000.0), (10_000, 7, 100.0), (500, 60, 50.0)])
def test_the_shares_sum_to_the_backlog(remaining: int, slots: int, admit_rate: float) -> None:
    """Each next share, taken from what is left, uses up the backlog in ``slots`` bundles."""
    left, shares = remaining, []
    for n in range(slots, 0, -1):
        share = min(left, tapered_share(left, n, admit_rate, TASK_RATE))
        shares.append(share)
        left -= share
    assert left == 0
    assert shares == sorted(shares, reverse=True)


def test_a_drain_much_faster_than_a_task_gives_even_shares() -> None:
    assert tapered_share(60_000, 60, 1e9, TASK_RATE) == 1_000
    assert tapered_share(60_000, 60, 0.0, TASK_RATE) == 1_000


def test_jobs_beyond_the_counted_backlog_get_the_even_share() -> None:
    """SQS's count is approximate and producers go on sending: past the backlog the drain
    counted (100 here, its even share of 10 slots set at 100 by a larger count), a new bundle
    takes the even share again instead of a task's slots' worth."""
    now = [0.0]
    bundler = Bundler(POLICY, 10, 100, at=0.0, backlog=100, clock=lambda: now[0])
    sizes = []
    for i in range(2_000):
        now[0] = (i + 1) / 1_000.0
        if not bundler.offer(Job(job_id=f"j{i}", kind="k", payload={},
                                 estimated_seconds=JOB_SECONDS)):
            break
        sizes += [len(b.job_ids) for b in bundler.take_closed()]
    assert sizes[:5] == [20] * 5  # the counted 100, tapered (a task's 20 slots at least)
    assert sizes[5:9] == [100] * 4  # then the even share


def test_a_share_is_a_whole_number_of_a_tasks_rounds() -> None:
    """The nightly bench's shape: 6,000 jobs of 30 s on 60 tasks of 20 at once, admitted at
    ~390 jobs/s. The taper's shares are near the even 100; a share of 101 would run six rounds
    of 30 s where 100 run five. Every bundle holds whole rounds, and none more than five."""
    policy = BundlePolicy(bundle_max_jobs=10_000, bundle_max_seconds=14_400,
                          small_job_seconds=60, task_concurrency=20)
    now = [0.0]
    bundler = Bundler(policy, 60, 100, at=0.0, backlog=6_000, clock=lambda: now[0])
    sizes: list[int] = []
    for i in range(6_000):
        now[0] = (i + 1) / 390.0
        assert bundler.offer(Job(job_id=f"j{i}", kind="k", payload={}, estimated_seconds=30.0))
        sizes += [len(b.job_ids) for b in bundler.take_closed()]
    bundler.close()
    sizes += [len(b.job_ids) for b in bundler.take_closed()]
    assert sum(sizes) == 6_000 and len(sizes) == 60
    assert all(n % 20 == 0 for n in sizes), sizes
    assert max(-(-n // 20) for n in sizes) == 5, sizes
