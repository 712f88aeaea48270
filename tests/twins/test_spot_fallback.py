"""The Spot fallback: bundles Fargate Spot has no capacity for are
relaunched at once on on-demand FARGATE, counted, and the switch turns it off. On the twins."""

from __future__ import annotations

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import BundleState
from dispatcher.ops.client import JobClient
from dispatcher.ops.metrics import tick_blobs
from dispatcher.stages.tick import TickReport
from dispatcher.store import Store
from dispatcher.testing.memory_launcher import MemoryLauncher
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from dispatcher.wiring import pipeline

ENV = {"LONGJOBS_QUEUE_URL": "https://sqs.local/q", "LONGJOBS_TABLE": "t",
       "LONGJOBS_CLUSTER": "longjobs", "LONGJOBS_TASK_FAMILY": "longjobs-worker",
       "LONGJOBS_SUBNETS": "subnet-1", "LONGJOBS_LAUNCH_BACKOFF_SECONDS": "3600",
       "LONGJOBS_CAPACITY_STRATEGY": "FARGATE_SPOT:4,FARGATE:1:1"}


def tick_without_spot(**overrides: str) -> tuple[pipeline.Stages, MemoryLauncher, TickReport]:
    queue, store, launcher = MemoryQueue(), Store(MemoryTable()), MemoryLauncher()
    stages = pipeline.build(settings.load("dispatcher", {**ENV, **overrides}), queue=queue,
                          store=store, launcher=launcher)
    JobClient(ENV["LONGJOBS_QUEUE_URL"], "t", queue=queue).submit_many(
        [{"kind": "k", "payload": {}, "job_id": f"j{i}"} for i in range(3)])
    launcher.set_spot_capacity(False)
    return stages, launcher, stages.tick.tick()


def test_no_spot_capacity_relaunches_on_demand_at_once() -> None:
    stages, launcher, decision = tick_without_spot()
    assert decision.launch.spot_fallbacks == 3
    assert decision.launch.bundles_launched == 3
    # Each Spot request that found no capacity is followed by its on-demand fallback (the
    # tick launches bundles as they are recorded, so the 3 may take one call or several).
    spot = [r for r in launcher.requests if not r.on_demand]
    fallback = [r for r in launcher.requests if r.on_demand]
    assert sum(r.count for r in spot) == sum(r.count for r in fallback) == 3
    assert launcher.requests[0].on_demand is False
    for job_id in ("j0", "j1", "j2"):
        job = stages.store.get_job(job_id)
        assert job is not None and job.bundle_id
        bundle = stages.store.get_bundle(job.bundle_id)
        assert bundle is not None and bundle.state == BundleState.LAUNCHED
        assert bundle.attempt == 2 and bundle.launch_failures == 1
    main = tick_blobs(decision, backlog=None, running_tasks=3, queue="q")[0]
    assert main["SpotFallbacks"] == [3.0]  # EMF: a list of values per metric


@pytest.mark.parametrize("overrides", [{"LONGJOBS_SPOT_FALLBACK": "false"},
                                       {"LONGJOBS_CAPACITY_STRATEGY": ""}])
def test_the_switch_or_a_strategy_without_spot_means_no_fallback(
        overrides: dict[str, str]) -> None:
    _, launcher, decision = tick_without_spot(**overrides)
    assert decision.launch.spot_fallbacks == 0
    assert decision.launch.bundles_launched == 0
    assert {r.on_demand for r in launcher.requests} == {False}
