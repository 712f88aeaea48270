"""The template hands the functions the stack's own worker revision, and grants re-deriving
the deployment to the tick alone: checked on the template after the SAM transform."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.store.codec import DEPLOY_KEY
from tests.integration.test_infra import as_list, policy_statements

WORKER_ROLES = [{"Fn::GetAtt": ["WorkerTaskRole", "Arn"]},
                {"Fn::GetAtt": ["WorkerExecutionRole", "Arn"]}]
STACK_REVISION = {"Ref": "WorkerTaskDefinition"}


def granting(statements: list[dict[str, Any]], action: str) -> list[dict[str, Any]]:
    return [s for s in statements if action in as_list(s["Action"])]


@pytest.mark.parametrize("function", ["DispatcherFunction", "TaskEventFunction"])
def test_functions_that_launch_get_the_stacks_revision(expanded: dict[str, Any],
                                                       function: str) -> None:
    """``!Ref`` of the task definition is its ARN with the revision: a stack update that
    registers a new revision updates the functions' environment with it."""
    env = expanded["Resources"][function]["Properties"]["Environment"]["Variables"]
    assert env["LONGJOBS_STACK_TASK_DEFINITION"] == STACK_REVISION


def test_only_the_tick_may_register_and_it_passes_only_the_worker_roles(
        expanded: dict[str, Any]) -> None:
    tick = policy_statements(expanded, "DispatcherFunctionRole")
    (register,) = granting(tick, "ecs:RegisterTaskDefinition")
    assert as_list(register["Action"]) == ["ecs:RegisterTaskDefinition"]
    # The roles a registered copy may name, and RunTask may pass: the two worker roles only.
    passing = [s for s in tick if any(a.startswith("iam:") for a in as_list(s["Action"]))]
    assert [as_list(s["Action"]) for s in passing] == [["iam:PassRole"]]
    assert passing[0]["Resource"] == WORKER_ROLES
    assert passing[0]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
    # Tags carried over to a copy: on the family's revisions, when registering, nothing else.
    (tag,) = [s for s in granting(tick, "ecs:TagResource")
              if s.get("Condition") == {"StringEquals": {
                  "ecs:CreateAction": "RegisterTaskDefinition"}}]
    assert tag["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:ecs:${AWS::Region}:"
                                          "${AWS::AccountId}:task-definition/${TaskFamily}:*"}

    task_event = policy_statements(expanded, "TaskEventFunctionRole")
    assert granting(task_event, "ecs:RegisterTaskDefinition") == []


def test_deploy_writes_only_the_deployment_record(expanded: dict[str, Any]) -> None:
    document = expanded["Resources"]["DeployPolicy"]["Properties"]["PolicyDocument"]
    table = [s for s in document["Statement"]
             if any(a.startswith("dynamodb:") for a in as_list(s["Action"]))]
    assert [sorted(as_list(s["Action"])) for s in table] == [["dynamodb:GetItem",
                                                              "dynamodb:PutItem"]]
    assert table[0]["Resource"] == {"Fn::GetAtt": ["JobTable", "Arn"]}
    assert table[0]["Condition"] == {
        "ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [DEPLOY_KEY]}}


def test_the_stack_revision_is_an_output_for_deploys(expanded: dict[str, Any]) -> None:
    output = expanded["Outputs"]["StackTaskDefinition"]
    assert output["Value"] == STACK_REVISION
    assert "LONGJOBS_STACK_TASK_DEFINITION" in output["Description"]
