"""Array jobs on the real adapters (DynamoDB through pynamodb, SQS, ECS on moto): the parent's
and the children's attributes round-trip, one message becomes the children, and an operator
sees the array's counts and cancels it whole."""

from __future__ import annotations

import pytest

from dispatcher.domain import arrays
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ops.client import JobClient
from dispatcher.ports.table import Set, Update
from dispatcher.testing.workload import run_until_drained
from dispatcher.wiring import pipeline
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws
from tests.helpers import queue_counts


def test_one_message_becomes_an_arrays_children_on_the_real_adapters(aws: Aws) -> None:
    d = pipeline.aws_tick(aws.config(LONGJOBS_MAX_RUNNING_TASKS="5"))
    client = JobClient()
    client.submit("k", {"day": "2026-12-01"}, job_id="arr", array_size=12,
                  tolerated_failures="10%", estimated_seconds=1)
    run_until_drained(d)
    d.tick()  # the parent was recorded by a tick that offered no child: this one settles it
    store = open_store(aws.env["LONGJOBS_TABLE"])
    parent = store.get_job("arr")
    assert parent is not None and parent.array_size == 12 and parent.array_tolerated == 1
    assert parent.state == JobState.RUNNING and parent.bundle_id is None
    children = store.get_jobs([arrays.child_id("arr", i) for i in range(12)])
    assert [c.array_index for c in children] == list(range(12))
    assert {c.array_parent for c in children} == {"arr"}
    assert all(c.payload == {"day": "2026-12-01"} and c.bundle_id for c in children)
    assert queue_counts(aws.proxy.url, aws.env["LONGJOBS_QUEUE_URL"]) == (0, 0)

    shown = client.show("arr").to_json()["array"]
    assert shown["recorded"] == 12
    assert shown["by_state"]["not settled yet"] == 12
    client.cancel("arr")
    got = client.get("arr")
    assert isinstance(got, Job) and got.state == JobState.CANCELLED

    # Its retry waits for the children its cancel asked their task to stop; then, carried on
    # the parent (dispatcher/store/array_retry.py), it puts its ended children back to PENDING
    # (three as if their runs had failed, the rest as their runner ends them on the request),
    # sharing a new bundle as admitted small jobs do; the cursor gone once done.
    for i in range(3):
        store.table.write(Update(f"JOB#arr:{i}", [Set("state", "FAILED")]))
    with pytest.raises(LongjobsError, match="9 of its children are still stopping"):
        client.retry("arr")
    for i in range(3, 12):
        store.table.write(Update(f"JOB#arr:{i}", [Set("state", "CANCELLED")]))
    client.retry("arr")
    assert client.get("arr").state == JobState.RUNNING  # type: ignore[union-attr]
    children = store.get_jobs([arrays.child_id("arr", i) for i in range(12)])
    assert [c.state for c in children] == [JobState.PENDING] * 12
    retried = [c for c in children if c.history and "retried_at" in c.history[-1]]
    assert [c.array_index for c in retried] == list(range(12))
    assert len({c.bundle_id for c in retried}) == 1
    item = store.table.get("JOB#arr")
    assert item is not None and item.array_retry_next is None and item.array_retry is None
