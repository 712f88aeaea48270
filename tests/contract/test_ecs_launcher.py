"""What only the ECS adapter (``EcsLauncher``) does, on moto behind the proxy: the RunTask
request's shape (a job's resources as task-level overrides included), a throttled RunTask
retried with the same clientToken (and ``RateExceeded`` once every try was throttled),
revision resolution.

The rest of the dispatch path runs in-process on the twins (``tests/twins/test_dispatch.py``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from botocore.exceptions import ClientError

from dispatcher.aws.ecs import EcsLauncher, EcsTarget
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import Resources
from dispatcher.domain.pacing import RateExceeded
from dispatcher.ops.client import JobClient
from dispatcher.ports.launcher import NOT_STARTED_BY_FIRST_CALL, LaunchRequest
from dispatcher.testing.workload import run_until_drained
from dispatcher.wiring import adapters, pipeline
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws
from tests.helpers import client, ecs_tasks, queue_counts, s, table_items


def _check_launched(aws: Aws, job_ids: list[str]) -> None:
    """Every job in a bundle launched on its own task, which ECS knows; queue empty."""
    url = aws.proxy.url
    bundles = table_items(url, aws.env["LONGJOBS_TABLE"], "BUNDLE#")
    assert sorted(j for b in bundles for j in s(b, "job_ids")) == sorted(job_ids)
    assert {s(b, "state") for b in bundles} == {"LAUNCHED"}
    arns = [s(b, "task_arn") for b in bundles]
    assert len(set(arns)) == len(bundles)
    assert sorted(ecs_tasks(url, aws.env["LONGJOBS_CLUSTER"])) == sorted(arns)
    assert queue_counts(url, aws.env["LONGJOBS_QUEUE_URL"]) == (0, 0)


def test_runtask_request_shape(aws: Aws) -> None:
    d = pipeline.aws_tick(aws.config(LONGJOBS_MAX_RUNNING_TASKS="50"))
    job_ids = [f"shape-{i}" for i in range(12)]  # alone each: 12 tasks, <= 10 per RunTask
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": j,
                              "estimated_seconds": 3600} for j in job_ids])
    run_until_drained(d)
    _check_launched(aws, job_ids)

    requests = aws.proxy.runtask_requests
    # How the tick groups bundles into calls is its own business (tests/twins/test_dispatch.py).
    counts = [int(r["count"]) for r in requests]
    assert sum(counts) == 12 and all(1 <= c <= 10 for c in counts)
    assert {r["taskDefinition"] for r in requests} == {"longjobs-worker:1"}
    for r in requests:
        # Jobs that ask for no size: no task-level cpu/memory/ephemeralStorage overrides.
        assert set(r["overrides"]) == {"containerOverrides"}
        override = r["overrides"]["containerOverrides"][0]
        assert override["name"] == "worker"
        assert [e["name"] for e in override["environment"]] == ["LONGJOBS_LAUNCH_ID"]
        assert r["clientToken"].startswith("lj-")
        assert r["networkConfiguration"]["awsvpcConfiguration"]["subnets"]
    bundles = table_items(aws.proxy.url, aws.env["LONGJOBS_TABLE"], "BUNDLE#")
    assert {s(b, "task_definition") for b in bundles} == {"longjobs-worker:1"}


def test_new_revision_is_resolved_and_pinned_on_later_launches(aws: Aws) -> None:
    from dispatcher.local.provision import Names, register_task_definition

    d = pipeline.aws_tick(aws.config())
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
    assert [r["taskDefinition"] for r in aws.proxy.runtask_requests] == [
        "longjobs-worker:1", "longjobs-worker:2"]


def test_throttled_runtask_is_retried_with_the_same_token(aws: Aws) -> None:
    d = pipeline.aws_tick(aws.config())
    aws.proxy.inject_throttle(2)
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"t{i}"} for i in range(3)])
    decision = d.tick()
    assert decision.launch.bundles_launched == 3
    tokens = [r["clientToken"] for r in aws.proxy.runtask_requests]
    # Two throttled attempts, then the same call again with its token; no other call repeats.
    assert tokens[:3] == [tokens[0]] * 3
    assert len(set(tokens)) == len(tokens) - 2
    _check_launched(aws, ["t0", "t1", "t2"])


class _ThrottledEcs:
    """A boto3 ECS client stand-in whose RunTask is always throttled."""

    def __init__(self) -> None:
        self.calls = 0

    def run_task(self, **params: Any) -> dict[str, Any]:
        self.calls += 1
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "RunTask")


def test_runtask_throttled_on_every_try_raises_rate_exceeded() -> None:
    """Retried first; then RateExceeded, which the launch stage leaves for recovery (ECS does
    not promise that a throttled call started nothing)."""
    ecs = _ThrottledEcs()
    launcher = EcsLauncher(ecs, EcsTarget("c", "f"), max_tries=2)
    with pytest.raises(RateExceeded, match="ThrottlingException: Rate exceeded"):
        launcher.run(LaunchRequest("f:1", 1, "tok", "s"))
    assert ecs.calls == 2
    assert not issubclass(RateExceeded, LongjobsError)  # not a definite refusal


def test_the_adapter_does_not_pace_runtask_itself() -> None:
    """Pacing is the launch stage's (LaunchPacer), for every launcher alike."""
    assert "runtask_per_second" not in {f.name for f in fields(EcsTarget)}


class _TokenUsedEcs:
    """A boto3 ECS client stand-in answering RunTask as ECS does when the clientToken was used
    before with other parameters. The response shape is botocore's documented one:
    https://docs.aws.amazon.com/botocore/latest/reference/services/ecs/client/exceptions/ConflictException.html
    """

    def __init__(self, started: list[str]) -> None:
        self.started = started

    def run_task(self, **params: Any) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "ConflictException", "Message": "The provided "
                                     "clientToken is already in use with a different RunTask "
                                     "request."},
                           "resourceIds": self.started,  # type: ignore[typeddict-unknown-key]
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "RunTask")


def test_a_client_token_used_before_with_other_settings_adopts_the_tasks_ecs_names() -> None:
    """A crashed tick's launch, recovered after the subnets changed: ECS refuses the retry and
    names the tasks the first call started. They are the launch's tasks; the rest of the count
    did not start (a failure, so its bundle is put back and launched again)."""
    started = ["arn:aws:ecs:us-east-1:1:task/c/a", "arn:aws:ecs:us-east-1:1:task/c/b"]
    launcher = EcsLauncher(_TokenUsedEcs(started), EcsTarget("c", "f"))
    result = launcher.run(LaunchRequest("f:1", 3, "tok", "s"))
    assert result.task_arns == started
    assert result.failures == [NOT_STARTED_BY_FIRST_CALL]


def test_resolving_the_revision_survives_a_throttle() -> None:
    """The tick's first call and every stop event's relaunch resolve it: one throttle (a mass
    Spot reclaim sends many events at once) must not fail them."""

    class ThrottledOnce:
        calls = 0

        def describe_task_definition(self, **params: Any) -> dict[str, Any]:
            self.calls += 1
            if self.calls == 1:
                raise ClientError({"Error": {"Code": "ThrottlingException",
                                             "Message": "Rate exceeded"},
                                   "ResponseMetadata": {"HTTPStatusCode": 400}},
                                  "DescribeTaskDefinition")
            return {"taskDefinition": {"taskDefinitionArn":
                                       "arn:aws:ecs:us-east-1:1:task-definition/f:7"}}

    ecs = ThrottledOnce()
    assert EcsLauncher(ecs, EcsTarget("c", "f")).resolve_task_definition() == "f:7"
    assert ecs.calls == 2


# -- a job's resources as RunTask task-level overrides (tests/twins/test_resources.py) ----------
def _overrides(aws: Aws, token: str) -> dict[str, Any]:
    (request,) = [q for q in aws.proxy.runtask_requests if q.get("clientToken") == token]
    overrides: dict[str, Any] = request["overrides"]
    return overrides


@pytest.mark.parametrize(("resources", "expected"), [
    (Resources(4096, 8192, 50), {"cpu": "4096", "memory": "8192",
                                 "ephemeralStorage": {"sizeInGiB": 50}}),
    (Resources(256, 512), {"cpu": "256", "memory": "512"}),
    (Resources(ephemeral_storage=200), {"ephemeralStorage": {"sizeInGiB": 200}}),
    (Resources(), {}),
])
def test_runtask_overrides_on_ecs(aws: Aws, resources: Resources,
                                  expected: dict[str, Any]) -> None:
    launcher = EcsLauncher(client("ecs", aws.proxy.url), adapters.ecs_target(aws.config()))
    token = f"res-{resources.cpu}-{resources.memory}-{resources.ephemeral_storage}"
    result = launcher.run(LaunchRequest(launcher.resolve_task_definition(), 2, token, "res",
                                        env={"LONGJOBS_LAUNCH_ID": "L"}, resources=resources))
    assert len(result.task_arns) == 2 and result.failures == []
    overrides = _overrides(aws, token)
    assert {k: v for k, v in overrides.items() if k != "containerOverrides"} == expected
    (container,) = overrides["containerOverrides"]  # the environment override is unchanged
    assert container["name"] == "worker"
    assert container["environment"] == [{"name": "LONGJOBS_LAUNCH_ID", "value": "L"}]
