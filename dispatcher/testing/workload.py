"""Workloads shared by tests and benchmarks, so the numbers the README reports are the ones the
tests assert."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from dispatcher.ops.client import JobClient
from dispatcher.stages.tick import Decision, Dispatcher


def mixed_jobs(n: int, *, seed: int = 7, small_share: float = 0.6,
               prefix: str = "job") -> list[dict[str, Any]]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        small = rng.random() < small_share
        jobs.append({"kind": "demo.sleep", "job_id": f"{prefix}-{i:05d}",
                     "payload": {"i": i, "seconds": 0.1 if small else 30},
                     "estimated_seconds": rng.uniform(1, 20) if small else rng.choice(
                         [None, 600.0, 3600.0])})
    return jobs


def small_jobs(n: int, prefix: str = "small") -> list[dict[str, Any]]:
    return [{"kind": "demo.sleep", "job_id": f"{prefix}-{i:05d}", "payload": {"i": i},
             "estimated_seconds": 1.0} for i in range(n)]


def run_until_drained(dispatcher: Dispatcher, *, max_ticks: int = 50,
                      on_tick: Callable[[Decision], None] | None = None) -> list[Decision]:
    """Tick until a tick receives nothing and has nothing left to launch."""
    decisions = []
    for _ in range(max_ticks):
        d = dispatcher.tick()
        decisions.append(d)
        if on_tick:
            on_tick(d)
        if d.intake.received == 0 and d.due_bundles == 0 and d.launch.recovered == 0:
            return decisions
    raise AssertionError(f"not drained after {max_ticks} ticks")


def submit_in_waves(client: JobClient, dispatcher: Dispatcher, jobs: list[dict[str, Any]],
                    wave: int = 100) -> list[Decision]:
    """moto's SQS costs grow with queue depth, so large runs are fed in waves."""
    decisions: list[Decision] = []
    for start in range(0, len(jobs), wave):
        client.submit_many(jobs[start:start + wave])
        decisions.extend(run_until_drained(dispatcher))
    return decisions


def api_calls_for_small_jobs(proxy: Any, dispatcher: Dispatcher, n_jobs: int = 500,
                             wave: int = 100) -> dict[str, int]:
    """Run ``n_jobs`` small bundled jobs through producer + dispatcher; count calls by API."""
    proxy.reset_counts()
    submit_in_waves(JobClient(), dispatcher, small_jobs(n_jobs), wave=wave)
    return dict(sorted(proxy.counts().items()))
