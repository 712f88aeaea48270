"""AWS calls per job are a design property (batching, bundling, 10 tasks per RunTask): assert
them. Counts are deterministic, unlike time, so they may be asserted on a shared machine."""

from __future__ import annotations

from dispatcher import wiring
from dispatcher.testing.workload import api_calls_for_small_jobs
from tests.conftest import Aws

N = 500


def test_api_calls_per_job_for_500_small_jobs(aws: Aws) -> None:
    d = wiring.dispatcher(aws.config(LONGJOBS_BUNDLE_MAX_JOBS="50",
                                      LONGJOBS_MAX_RUNNING_TASKS="100"))
    counts = api_calls_for_small_jobs(aws.proxy, d, N, wave=100)
    # 500 jobs / 50 per bundle = 10 bundles; each wave of 100 fills 2 bundles, launched by one
    # RunTask; 10 messages per send, receive and delete batch.
    assert counts["sqs.SendMessageBatch"] == N // 10
    assert counts["sqs.DeleteMessageBatch"] == N // 10
    assert counts["ecs.RunTask"] == 5
    # Per wave: 2 record transactions (51 items each > 100 together), begin + finish launch.
    assert counts["dynamodb.TransactWriteItems"] == 5 * 4
    # Each wave takes two ticks (the second finds the queue empty); an idle tick costs 10 calls:
    # DescribeTaskDefinition, lease put + delete, 6 index queries (orphaned launches, active
    # bundles in 3 states, due bundles, running jobs for timeouts), one empty receive.
    assert counts == {
        "dynamodb.DeleteItem": 10, "dynamodb.PutItem": 10, "dynamodb.Query": 60,
        "dynamodb.TransactWriteItems": 20, "ecs.DescribeTaskDefinition": 10, "ecs.RunTask": 5,
        "sqs.DeleteMessageBatch": 50, "sqs.ReceiveMessage": 60, "sqs.SendMessageBatch": 50,
    }
    assert sum(counts.values()) / N == 0.55
