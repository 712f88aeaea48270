"""AWS calls per job are a design property (batching, bundling, 10 tasks per RunTask, grouped
result writes): assert them, end to end. Counts do not depend on time the way durations do, so
they may be asserted on a shared machine; where a count can move with timing (an empty receive
more or less, one flush more), the assertion is a bound."""

from __future__ import annotations

from typing import Any

import boto3

from dispatcher.handlers import on_task_event
from dispatcher.testing.workload import (
    DEMO_HANDLERS,
    CallCounts,
    api_calls_end_to_end,
    job_states,
    small_jobs,
    stopped_event,
)
from dispatcher.wiring import pipeline
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws

N = 500
WAVE = 500  # jobs sent at once (moto's SQS slows with queue depth)


def end_to_end(aws: Aws, tasks: int) -> CallCounts:
    """N small jobs, WAVE at a time, each wave in ``tasks`` bundles; all must succeed."""
    # A long tick budget: on a loaded machine a wave must still be drained by one tick, as
    # on AWS (what is counted is a drain's calls, not where a deadline cut it).
    # The dispatcher sizes bundles by the runners' concurrency, as the stack gives both.
    cfg = aws.config(LONGJOBS_MAX_RUNNING_TASKS=str(tasks), LONGJOBS_TICK_SECONDS="900",
                     LONGJOBS_TASK_CONCURRENCY="20")
    stages = pipeline.for_aws(cfg)
    ecs = boto3.client("ecs", endpoint_url=aws.moto.url)  # outside the proxy: not counted

    def list_tasks() -> list[str]:
        arns: list[str] = []
        for page in ecs.get_paginator("list_tasks").paginate(cluster=cfg.cluster):
            arns += page["taskArns"]
        return arns

    def on_stopped(arn: str) -> Any:
        return on_task_event(stopped_event(arn, cfg.container), cfg.container, stages.reruns)

    runner_env = {**aws.env, "LONGJOBS_HANDLERS": DEMO_HANDLERS,
                  "LONGJOBS_TASK_CONCURRENCY": "20", "LONGJOBS_FLUSH_SECONDS": "30",
                  "LONGJOBS_HEARTBEAT_SECONDS": "30", "LONGJOBS_ASSIGN_WAIT_SECONDS": "5"}
    jobs = small_jobs(N, seconds=0)
    counts = api_calls_end_to_end(aws.proxy, stages.tick, jobs, wave=WAVE,
                                  runner_env=runner_env, list_tasks=list_tasks,
                                  on_stopped=on_stopped)
    states = job_states(open_store(cfg.table, cfg.region, aws.moto.url),
                        [j["job_id"] for j in jobs])
    assert states == {"SUCCEEDED": N}, (states, counts.table())
    return counts


def check_components(counts: CallCounts, tasks: int) -> None:
    bundles = tasks * N // WAVE
    producer, dispatcher, runner = (counts.by_api(c) for c in ("producer", "dispatcher",
                                                                 "runner"))
    # The producer: one SendMessageBatch per 10 jobs, nothing else.
    assert producer == {"sqs.SendMessageBatch": N // 10}
    # The dispatcher: every message received and deleted in batches of 10 (a receive that
    # comes back short or empty is extra; a batch of deletes may end short where a bundle
    # ends, and a message delivered twice, as SQS may, is deleted on its own: moto does it
    # under concurrent receives on a loaded machine); the bundles of a wave launched as each is
    # recorded (one RunTask, or one each); the jobs recorded in transactions of up to 100 items.
    assert N // 10 <= dispatcher["sqs.DeleteMessageBatch"] <= N // 10 + bundles + N // 100, \
        counts.table()
    assert N // 10 <= dispatcher["sqs.ReceiveMessage"] <= N // 10 + 8 * (N // WAVE) * 3, \
        counts.table()
    assert N // WAVE <= dispatcher["ecs.RunTask"] <= bundles, counts.table()
    assert dispatcher.get("dynamodb.TransactWriteItems", 0) <= 2 * N // 98 + 4 * bundles, \
        counts.table()
    # The runner: per bundle its assignment (pointer, bundle, its pages), the claim, its jobs
    # read 100 at a time, starts and results grouped (<= 98 jobs a transaction, and a flush
    # when the bundle ends): no per-job call.
    assert counts.total("runner") <= bundles * 7 + N // 100 + 2 * N // 98, counts.table()
    assert runner.get("dynamodb.UpdateItem", 0) <= 2 * bundles, counts.table()


# What one more tick costs, which a loaded machine may add to a drain: a receive per priority
# queue, the lease taken and released, the RUNNING jobs' read (the 8 shards of the status index
# and the key of before sharding), the tick's summary of what waits, and the capacity reads.
TICK_CALLS = 20


def test_api_calls_per_small_job_end_to_end(aws: Aws) -> None:
    """Bundles of ~84 jobs (6 a wave): 0.53-0.55 calls per job measured (2026-12-02), the bound
    0.55 and two more ticks; SQS alone is 0.3 (send, receive, delete in tens), everything else
    is shared by a bundle or a tick."""
    counts = end_to_end(aws, tasks=6)
    check_components(counts, tasks=6)
    assert counts.per_job() <= 0.55 + 2 * TICK_CALLS / N, counts.table()


def test_api_calls_per_small_job_end_to_end_with_large_bundles(aws: Aws) -> None:
    """Bundles of 250 jobs (2 a wave, recorded in pages): 0.442-0.444 calls per job measured
    (2026-12-05, `bench/api_calls.py`): at most 0.45, and the two ticks more than the drain
    needs that a loaded machine may take (the per-bundle and per-tick calls shrink with the
    bundles)."""
    counts = end_to_end(aws, tasks=2)
    check_components(counts, tasks=2)
    assert counts.per_job() <= 0.45 + 2 * TICK_CALLS / N, counts.table()
