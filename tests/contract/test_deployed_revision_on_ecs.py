"""The deploy flow on moto's ECS and DynamoDB: ``longjobs deploy`` copies the stack's revision,
a stack update changing a setting keeps the deployed image (the tick re-derives the deployment
once), and a deploy after a stack update keeps the stack's settings. Also the copy itself
(``EcsTaskDefinitions.register_copy``): only image and env change, tags carried over."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from dispatcher.aws.ecs import EcsTarget
from dispatcher.aws.ecs_revisions import REGISTERABLE_FIELDS, EcsTaskDefinitions
from dispatcher.cli.app import app
from dispatcher.domain.errors import ResourceMissing
from dispatcher.ops.client import JobClient
from dispatcher.wiring import pipeline
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws
from tests.helpers import client

ACCOUNT = "123456789012"
FAMILY = "longjobs-worker"


def register_stack_revision(ecs: Any, image: str = "registry/worker:A", cpu: str = "256",
                            memory: str = "512") -> str:
    """A revision as the stack registers it (its ARN, as ``!Ref`` gives it)."""
    return str(ecs.register_task_definition(
        family=FAMILY,
        taskRoleArn=f"arn:aws:iam::{ACCOUNT}:role/task",
        executionRoleArn=f"arn:aws:iam::{ACCOUNT}:role/execution",
        networkMode="awsvpc",
        requiresCompatibilities=["FARGATE"],
        cpu=cpu,
        memory=memory,
        containerDefinitions=[{
            "name": "worker",
            "image": image,
            "command": ["python", "-m", "job_runner"],
            "essential": True,
            "stopTimeout": 120,
            "memory": int(memory),  # moto wants a container-level memory
            "environment": [{"name": "LONGJOBS_TABLE", "value": "jobs"},
                            {"name": "POWERTOOLS_SERVICE_NAME", "value": "longjobs-worker"}],
            "logConfiguration": {"logDriver": "awslogs", "options": {
                "awslogs-group": "worker", "awslogs-region": "us-east-1",
                "awslogs-stream-prefix": "worker"}},
        }],
        tags=[{"key": "team", "value": "batch"}],
    )["taskDefinition"]["taskDefinitionArn"])


def described(ecs: Any, revision: str) -> dict[str, Any]:
    return dict(ecs.describe_task_definition(taskDefinition=revision,
                                             include=["TAGS"]))


def worker(td: dict[str, Any]) -> dict[str, Any]:
    (container,) = td["taskDefinition"]["containerDefinitions"]
    return dict(container)


def revisions(ecs: Any) -> list[str]:
    return list(ecs.list_task_definitions(familyPrefix=FAMILY)["taskDefinitionArns"])


def deploy_cli(monkeypatch: pytest.MonkeyPatch, stack: str, *args: str) -> dict[str, Any]:
    monkeypatch.setenv("LONGJOBS_STACK_TASK_DEFINITION", stack)
    result = CliRunner().invoke(app, ["deploy", *args, "--json"])
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.output)
    return out


def launch(aws: Aws, stack: str, job_id: str) -> str:
    """Submit a job and run one tick as the stack's functions would: the revision launched."""
    JobClient().submit("k", {}, job_id=job_id)
    before = len(aws.proxy.runtask_requests)
    pipeline.aws_tick(aws.config(LONGJOBS_STACK_TASK_DEFINITION=stack)).tick()
    (request,) = aws.proxy.runtask_requests[before:]
    return str(request["taskDefinition"])


def test_a_stack_update_after_a_deploy_runs_the_deployed_image_with_the_new_settings(
        aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    ecs = client("ecs", aws.proxy.url)
    stack = register_stack_revision(ecs)
    deployed = deploy_cli(monkeypatch, stack, "--image", "registry/worker:B")
    copy_b = deployed["revision"]
    assert worker(described(ecs, copy_b))["image"] == "registry/worker:B"
    assert deployed["derived_from"] == stack.rsplit("/", 1)[-1]
    assert launch(aws, stack, "before-update") == copy_b

    # A stack update changing the task size: CloudFormation registers the stack's Image again,
    # with the new CPU and memory, the newest ACTIVE revision, and hands its ARN to the functions.
    updated = register_stack_revision(ecs, "registry/worker:A", cpu="1024", memory="2048")
    count = len(revisions(ecs))
    ran = launch(aws, updated, "after-update")
    td = described(ecs, ran)
    assert (worker(td)["image"], td["taskDefinition"]["cpu"],
            td["taskDefinition"]["memory"]) == ("registry/worker:B", "1024", "2048")
    assert td["tags"] == [{"key": "team", "value": "batch"}]
    assert len(revisions(ecs)) == count + 1  # one copy, by that tick
    record = open_store(aws.env["LONGJOBS_TABLE"]).deployment()
    assert record is not None
    assert (record.task_definition, record.derived_from, record.image) == (
        ran, updated.rsplit("/", 1)[-1], "registry/worker:B")

    assert launch(aws, updated, "later") == ran  # once, not every tick
    assert len(revisions(ecs)) == count + 1
    store = open_store(aws.env["LONGJOBS_TABLE"])
    job = store.get_job("after-update")
    assert job is not None and job.bundle_id
    bundle = store.get_bundle(job.bundle_id)
    assert bundle is not None and bundle.task_definition == ran  # what `jobs show` tells


def test_a_deploy_after_a_stack_update_keeps_the_stacks_settings(
        aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    ecs = client("ecs", aws.proxy.url)
    stack = register_stack_revision(ecs)
    deploy_cli(monkeypatch, stack, "--image", "registry/worker:B", "--env", "FEATURE=on")
    updated = register_stack_revision(ecs, cpu="2048", memory="4096")
    deployed = deploy_cli(monkeypatch, updated, "--image", "registry/worker:C")
    td = described(ecs, deployed["revision"])
    assert (worker(td)["image"], td["taskDefinition"]["cpu"]) == ("registry/worker:C", "2048")
    assert {"name": "FEATURE", "value": "on"} in worker(td)["environment"]
    assert (deployed["previous_image"], deployed["version"]) == ("registry/worker:B", 2)
    assert launch(aws, updated, "j") == deployed["revision"]

    # A rollback to B's revision: B's image on the stack's current settings.
    first = deployed["previous_revision"].rsplit(":", 1)[1]
    rolled = deploy_cli(monkeypatch, updated, "--revision", first)
    td = described(ecs, rolled["revision"])
    assert (worker(td)["image"], td["taskDefinition"]["cpu"]) == ("registry/worker:B", "2048")


# ------------------------------------------------------------------------------- the copy itself


def registerable(td: dict[str, Any]) -> dict[str, Any]:
    return {k: copy.deepcopy(td["taskDefinition"][k]) for k in REGISTERABLE_FIELDS
            if k in td["taskDefinition"]}


def test_register_copy_changes_only_image_and_env(aws: Aws) -> None:
    ecs = client("ecs", aws.proxy.url)
    source = register_stack_revision(ecs)
    before = described(ecs, source)
    defs = EcsTaskDefinitions(ecs, EcsTarget("c", FAMILY))

    revision = defs.register_copy(source, "registry/worker:2",
                                  {"POWERTOOLS_SERVICE_NAME": "jobs", "LONGJOBS_EXTRA": "1"})

    after = described(ecs, revision)
    assert revision == after["taskDefinition"]["taskDefinitionArn"].rsplit("/", 1)[-1]
    old, new = registerable(before), registerable(after)
    (old_container,), (new_container,) = old["containerDefinitions"], new["containerDefinitions"]
    assert new_container["image"] == "registry/worker:2"
    assert new_container["environment"] == [
        {"name": "LONGJOBS_TABLE", "value": "jobs"},
        {"name": "POWERTOOLS_SERVICE_NAME", "value": "jobs"},
        {"name": "LONGJOBS_EXTRA", "value": "1"},
    ]
    for field in ("image", "environment"):
        del old_container[field], new_container[field]
    assert new == old
    assert after["tags"] == before["tags"]
    # The source stays ACTIVE: tasks running it are untouched.
    assert described(ecs, source)["taskDefinition"]["status"] == "ACTIVE"
    assert defs.image_of(source) == "registry/worker:A"


def test_register_copy_targets_the_named_container_and_names_what_is_missing(aws: Aws) -> None:
    ecs = client("ecs", aws.proxy.url)
    source = register_stack_revision(ecs)
    EcsTaskDefinitions(ecs, EcsTarget("c", FAMILY, "worker")).register_copy(
        source, "registry/worker:3", {})
    assert worker(described(ecs, FAMILY))["image"] == "registry/worker:3"
    with pytest.raises(ResourceMissing, match="no container named 'sidecar'"):
        EcsTaskDefinitions(ecs, EcsTarget("c", FAMILY, "sidecar")).register_copy(
            source, "registry/worker:4", {})
    with pytest.raises(ResourceMissing, match="'nope:1' does not exist"):
        EcsTaskDefinitions(ecs, EcsTarget("c", FAMILY)).register_copy(
            "nope:1", "registry/worker:1", {})
