"""The dispatch path end to end: SQS -> job table -> RunTask, against moto over HTTP."""

from __future__ import annotations

import json

import pytest

from dispatcher import wiring
from dispatcher.aws.dynamodb import open_store
from dispatcher.domain.bundles import BundleState
from dispatcher.ops.client import JobClient
from dispatcher.testing.workload import mixed_jobs, run_until_drained, submit_in_waves
from tests.conftest import Aws
from tests.helpers import client, ecs_tasks, queue_counts, s, table_items


def _dispatcher(aws: Aws, **overrides: str):  # type: ignore[no-untyped-def]
    return wiring.dispatcher(aws.config(**overrides))


def _check_converged(aws: Aws, job_ids: list[str], *, max_jobs: int = 50) -> None:
    """Every job recorded once, queue empty, every bundle launched once on its own task."""
    url = aws.proxy.url
    jobs = table_items(url, aws.env["LONGJOBS_TABLE"], "JOB#")
    assert sorted(s(i, "job_id") for i in jobs) == sorted(job_ids)
    assert queue_counts(url, aws.env["LONGJOBS_QUEUE_URL"]) == (0, 0)
    bundles = table_items(url, aws.env["LONGJOBS_TABLE"], "BUNDLE#")
    in_bundles = [j for b in bundles for j in s(b, "job_ids")]
    assert sorted(in_bundles) == sorted(job_ids)  # each job in exactly one bundle
    assert all(len(s(b, "job_ids")) <= max_jobs for b in bundles)
    assert {s(b, "state") for b in bundles} == {BundleState.LAUNCHED}
    arns = [s(b, "task_arn") for b in bundles]
    assert len(set(arns)) == len(bundles)
    assert sorted(ecs_tasks(url, aws.env["LONGJOBS_CLUSTER"])) == sorted(arns)


def test_mixed_jobs_recorded_once_bundled_and_launched(aws: Aws) -> None:
    d = _dispatcher(aws, LONGJOBS_MAX_RUNNING_TASKS="500", LONGJOBS_BUNDLE_MAX_JOBS="20",
                    LONGJOBS_BUNDLE_MAX_SECONDS="120")
    jobs = mixed_jobs(240)
    submit_in_waves(JobClient(), d, jobs, wave=80)
    _check_converged(aws, [j["job_id"] for j in jobs], max_jobs=20)

    bundles = table_items(aws.proxy.url, aws.env["LONGJOBS_TABLE"], "BUNDLE#")
    small = {j["job_id"] for j in jobs if (j["estimated_seconds"] or 1e9) <= 60}
    for b in bundles:
        members = s(b, "job_ids")
        if len(members) > 1:  # only small jobs share a bundle, within the seconds limit
            assert set(members) <= small
            assert s(b, "estimated_seconds") <= 120
    assert sum(1 for b in bundles if set(s(b, "job_ids")) - small) == len(jobs) - len(small)

    requests = aws.proxy.runtask_requests
    assert requests and all(1 <= r["count"] <= 10 for r in requests)
    assert {r["taskDefinition"] for r in requests} == {"longjobs-worker:1"}
    for r in requests:
        override = r["overrides"]["containerOverrides"][0]
        assert override["name"] == "worker"
        assert [e["name"] for e in override["environment"]] == ["LONGJOBS_LAUNCH_ID"]
        assert r["clientToken"].startswith("lj-")
        assert r["networkConfiguration"]["awsvpcConfiguration"]["subnets"]
    assert {s(b, "task_definition") for b in bundles} == {"longjobs-worker:1"}


def test_admission_keeps_backlog_in_sqs(aws: Aws) -> None:
    d = _dispatcher(aws, LONGJOBS_MAX_RUNNING_TASKS="3")
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"long-{i}",
                              "estimated_seconds": 3600} for i in range(8)])
    decision = d.tick()
    assert decision.capacity == 3 and decision.launch.bundles_launched == 3
    assert len(table_items(aws.proxy.url, aws.env["LONGJOBS_TABLE"], "JOB#")) == 3
    visible, in_flight = queue_counts(aws.proxy.url, aws.env["LONGJOBS_QUEUE_URL"])
    assert visible + in_flight == 5  # released, not deleted: SQS is the backlog
    again = d.tick()
    assert again.capacity == 0 and again.intake.received == 0


def test_new_revision_is_pinned_on_later_launches(aws: Aws) -> None:
    from dispatcher.local.provision import Names, register_task_definition

    d = _dispatcher(aws)
    JobClient().submit("k", {}, job_id="before-deploy")
    d.tick()
    register_task_definition(client("ecs", aws.proxy.url), Names(), image="worker:v2")
    JobClient().submit("k", {}, job_id="after-deploy")
    d.tick()
    store = open_store(aws.env["LONGJOBS_TABLE"])
    revisions = {}
    for job_id in ("before-deploy", "after-deploy"):
        job = store.get_job(job_id)
        assert job is not None and job.bundle_id
        bundle = store.get_bundle(job.bundle_id)
        assert bundle is not None
        revisions[job_id] = bundle.task_definition
    assert revisions == {"before-deploy": "longjobs-worker:1", "after-deploy": "longjobs-worker:2"}


def test_duplicate_deliveries_and_producer_retries_make_one_job(aws: Aws) -> None:
    d = _dispatcher(aws)
    c = JobClient()
    for _ in range(3):  # a producer retrying
        c.submit("k", {"n": 1}, job_id="same-job", estimated_seconds=5)
    d.tick()
    c.submit("k", {"n": 1}, job_id="same-job", estimated_seconds=5)  # a late redelivery
    decision = d.tick()
    assert decision.intake.duplicates == 1 and decision.intake.admitted == 0
    _check_converged(aws, ["same-job"])


MALFORMED = {
    "not-json": ("{this is not json", "not JSON"),
    "not-object": ("[1, 2]", "not a JSON object"),
    "missing-kind": (json.dumps({"schema_version": 1, "job_id": "bad-1", "payload": {}}),
                     "kind: Field required"),
    "wrong-version": (json.dumps({"schema_version": 2, "job_id": "bad-2", "kind": "k",
                                  "payload": {}}), "schema_version"),
    "payload-not-object": (json.dumps({"schema_version": 1, "job_id": "bad-3", "kind": "k",
                                       "payload": [1]}), "payload"),
    "unknown-kind": (json.dumps({"schema_version": 1, "job_id": "bad-4", "kind": "nope",
                                 "payload": {}}), "unknown kind 'nope'"),
    "too-large": (json.dumps({"schema_version": 1, "job_id": "bad-5", "kind": "k",
                              "payload": {"blob": "x" * 300_000}}), "payload too large"),
}


def test_malformed_messages_are_rejected_with_reasons(aws: Aws) -> None:
    d = _dispatcher(aws, LONGJOBS_ALLOWED_KINDS="k")
    c = JobClient()
    sqs = client("sqs", aws.proxy.url)
    c.submit("k", {}, job_id="good-before")
    for body, _ in MALFORMED.values():
        sqs.send_message(QueueUrl=aws.env["LONGJOBS_QUEUE_URL"], MessageBody=body)
    c.submit("k", {}, job_id="good-after")
    run_until_drained(d)
    _check_converged(aws, ["good-before", "good-after"])
    rejected = table_items(aws.proxy.url, aws.env["LONGJOBS_TABLE"], "REJECT#")
    assert len(rejected) == len(MALFORMED)
    reasons = [s(r, "reason") for r in rejected]
    for name, (_, expected) in MALFORMED.items():
        assert any(expected in r for r in reasons), (name, reasons)
    for r in rejected:
        assert s(r, "state") == "REJECTED" and s(r, "body")
        assert len(s(r, "body").encode()) <= 4096
    keys = {r["pk"]["S"] for r in rejected}
    assert {"REJECT#bad-1", "REJECT#bad-5"} <= keys  # keyed by job id when readable


def test_runtask_failures_go_back_to_pending_and_launch_later(aws: Aws) -> None:
    d = _dispatcher(aws)
    aws.proxy.inject_runtask_failures(["RESOURCE:MEMORY", "Capacity is unavailable"])
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{i}"} for i in range(5)])
    first = d.tick()
    assert first.launch.bundles_launched == 3
    assert dict(first.launch.failures) == {"RESOURCE:MEMORY": 1, "Capacity": 1}
    bundles = table_items(aws.proxy.url, aws.env["LONGJOBS_TABLE"], "BUNDLE#")
    pending = [b for b in bundles if s(b, "state") == "PENDING"]
    assert sorted(s(b, "last_failure") for b in pending) == [
        "Capacity is unavailable", "RESOURCE:MEMORY"]
    assert all(s(b, "launch_failures") == 1 for b in pending)
    second = d.tick()
    assert second.due_bundles == 2 and second.launch.bundles_launched == 2
    _check_converged(aws, [f"j{i}" for i in range(5)])


def test_backoff_holds_failed_bundles_until_due(aws: Aws) -> None:
    d = _dispatcher(aws, LONGJOBS_LAUNCH_BACKOFF_SECONDS="3600")
    aws.proxy.inject_runtask_failures(["RESOURCE:CPU"])
    JobClient().submit("k", {}, job_id="held")
    d.tick()
    assert d.tick().due_bundles == 0  # not due for an hour


def test_throttled_runtask_is_retried_with_the_same_token(aws: Aws) -> None:
    d = _dispatcher(aws)
    aws.proxy.inject_throttle(2)
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"t{i}"} for i in range(3)])
    decision = d.tick()
    assert decision.launch.bundles_launched == 3
    tokens = [r["clientToken"] for r in aws.proxy.runtask_requests]
    assert len(tokens) == 3 and len(set(tokens)) == 1
    _check_converged(aws, ["t0", "t1", "t2"])


@pytest.mark.parametrize("lease_holder_seconds", [600])
def test_a_held_lease_skips_the_tick(aws: Aws, lease_holder_seconds: int) -> None:
    store = open_store(aws.env["LONGJOBS_TABLE"])
    assert store.acquire_lease("someone-else", lease_holder_seconds)
    JobClient().submit("k", {}, job_id="waits")
    decision = _dispatcher(aws).tick()
    assert decision.skipped and decision.intake.received == 0
    store.release_lease("someone-else")
    assert _dispatcher(aws).tick().launch.bundles_launched == 1
