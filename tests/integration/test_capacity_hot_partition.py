"""The job table takes 1,000 jobs/s without a hot partition: a small end-to-end run on moto,
recorded with each write's items (the proxy's ``capture_items``), counted by DynamoDB's
capacity rules (dispatcher.testing.capacity). Counts only: the rate is WCU per job times the
admission rate, never a measured duration. The same recording keyed as before sharding must be
flagged, so this test can fail."""

from __future__ import annotations

from typing import Any

import boto3

from dispatcher.aws.dynamodb.model import STATUS_INDEX, key_schema
from dispatcher.handlers import on_task_event
from dispatcher.ports.record import INDEX_ATTRIBUTES
from dispatcher.testing.capacity import (
    PARTITION_WCU_LIMIT,
    TABLE,
    IndexSpec,
    model,
    specs,
    unsharded,
)
from dispatcher.testing.workload import (
    DEMO_HANDLERS,
    api_calls_end_to_end,
    small_jobs,
    stopped_event,
)
from dispatcher.wiring import pipeline
from tests.conftest import Aws

N = 100
RATE = 1000.0


def test_the_hottest_partition_stays_under_its_limit_at_1000_jobs_per_second(aws: Aws) -> None:
    cfg = aws.config(LONGJOBS_MAX_RUNNING_TASKS="2", LONGJOBS_TICK_SECONDS="900")
    stages = pipeline.for_aws(cfg)
    ecs = boto3.client("ecs", endpoint_url=aws.moto.url)  # outside the proxy

    def list_tasks() -> list[str]:
        return [a for page in ecs.get_paginator("list_tasks").paginate(cluster=cfg.cluster)
                for a in page["taskArns"]]

    def on_stopped(arn: str) -> Any:
        return on_task_event(stopped_event(arn, cfg.container), cfg.container, stages.reruns)

    runner_env = {**aws.env, "LONGJOBS_HANDLERS": DEMO_HANDLERS,
                  "LONGJOBS_TASK_CONCURRENCY": "20", "LONGJOBS_FLUSH_SECONDS": "30",
                  "LONGJOBS_HEARTBEAT_SECONDS": "30", "LONGJOBS_ASSIGN_WAIT_SECONDS": "5"}
    aws.proxy.capture_items = True
    try:
        api_calls_end_to_end(aws.proxy, stages.tick, small_jobs(N, seconds=0), wave=N,
                             runner_env=runner_env, list_tasks=list_tasks,
                             on_stopped=on_stopped)
        calls = aws.proxy.recorded()
    finally:
        aws.proxy.capture_items = False

    now = model(calls, N, specs(key_schema(), INDEX_ATTRIBUTES))
    # Each job's index entry: put as PENDING, moved (a delete and a put) to SUCCEEDED when its
    # start and end are written together; ~3 writes of the status index per job, bundles aside.
    assert 3 <= now.wcu_per_job(STATUS_INDEX) < 3.5, now.writes
    assert now.wcu_per_job(TABLE) > 0 and now.reads > 0
    _, key, _ = now.hottest(STATUS_INDEX)
    assert key.startswith("JOB#PENDING#"), key  # a job state's shard: puts and deletes
    assert now.rate(None, RATE) < PARTITION_WCU_LIMIT, now.hottest()
    assert now.max_jobs_per_second() > 2 * RATE

    # The same run with the status index keyed as before (one partition per state): flagged.
    before = model(calls, N, [IndexSpec("by_status", "status_key", "status_at", "ALL")],
                   partition=unsharded)
    assert before.hottest()[:2] == ("by_status", "JOB#PENDING")
    assert before.rate(None, RATE) >= 2 * PARTITION_WCU_LIMIT
