"""What the template renders for the parameters that widen or narrow access, checked offline.

The SAM-transformed template is rendered for given parameter values by a small evaluator of the
intrinsics these parts use (Ref, Fn::If and the conditions, Fn::Select, Fn::Split, Fn::Sub,
Fn::Join): ``JobPolicyArns`` (comma-separated) attaches managed policies to the worker task role;
``JobSecret1``-``5`` give the worker container environment variables from SSM or Secrets
Manager, and the execution role exactly the reads they need (kms:Decrypt only with
``JobSecretsKmsKeyArn``); empty, they render nothing. The task-state rule is evaluated on ECS
events built from AWS's published sample (``tests/fixtures``) by moto's EventBridge pattern
matcher, and the generated names are checked for a stack name of 128 characters.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from dispatcher.domain.launches import Launch
from dispatcher.stages.launch import request_for
from tests.integration.test_infra import ACCOUNT, REGION, TEMPLATE, matches
from tests.integration.test_infra import resolve as resolve_sample

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NO_VALUE = object()  # AWS::NoValue: removed from the list or mapping that holds it
STACK_128 = "s" * 128  # the longest stack name CloudFormation accepts
SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:db-password-AbCdEf"
PARAMETER_ARN = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/app/api-token"
KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
POLICY_ARNS = [f"arn:aws:iam::{ACCOUNT}:policy/read-reports",
               "arn:aws:iam::aws:policy/AmazonS3ReadOnlyAccess"]


# ------------------------------------------------------------------------------------ rendering


class Rendering:
    """The template's intrinsics evaluated for given parameter values (the rest of the
    parameters at their defaults); references to resources are left as they are."""

    def __init__(self, template: dict[str, Any], values: dict[str, Any],
                 stack_name: str = "longjobs") -> None:
        self.template = template
        params = template["Parameters"]
        self.values = {name: values.get(name, spec.get("Default")) for name, spec in
                       params.items()}
        for name, spec in params.items():
            if spec["Type"] == "CommaDelimitedList" and isinstance(self.values[name], str):
                self.values[name] = self.values[name].split(",")
        self.values.update({"AWS::Region": REGION, "AWS::AccountId": ACCOUNT,
                            "AWS::Partition": "aws", "AWS::StackName": stack_name})

    def condition(self, name: str) -> bool:
        return bool(self.value(self.template["Conditions"][name]))

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.value(n) for n in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                if arg == "AWS::NoValue":
                    return NO_VALUE
                return self.values.get(arg, node)
            if key == "Condition":
                return self.condition(arg)
            if key == "Fn::If":
                name, yes, no = arg
                return self.value(yes if self.condition(name) else no)
            if key == "Fn::Equals":
                left, right = (self.value(a) for a in arg)
                return left == right
            if key == "Fn::Not":
                return not self.value(arg[0])
            if key == "Fn::Or":
                return any(self.value(a) for a in arg)
            if key == "Fn::And":
                return all(self.value(a) for a in arg)
            if key == "Fn::Select":
                index, items = arg
                return self.value(items)[int(index)]
            if key == "Fn::Split":
                sep, text = arg
                return str(self.value(text)).split(sep)
            if key == "Fn::Join":
                sep, parts = arg
                return sep.join(str(p) for p in self.value(parts))
            if key == "Fn::Sub" and isinstance(arg, str):
                return re.sub(r"\$\{([^}.!]+)\}",
                              lambda m: str(self.values.get(m.group(1), m.group(0))), arg)
        out = {k: self.value(v) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not NO_VALUE}


def props(expanded: dict[str, Any], resource: str, **values: Any) -> dict[str, Any]:
    """A resource's properties as CloudFormation would create them for these parameters."""
    rendered = Rendering(expanded, values).value(expanded["Resources"][resource]["Properties"])
    assert isinstance(rendered, dict)
    return rendered


def worker_container(expanded: dict[str, Any], **values: Any) -> dict[str, Any]:
    (container,) = props(expanded, "WorkerTaskDefinition", **values)["ContainerDefinitions"]
    assert isinstance(container, dict)
    return container


def execution_statements(expanded: dict[str, Any], **values: Any) -> list[dict[str, Any]]:
    role = props(expanded, "WorkerExecutionRole", **values)
    return [s for p in role.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]


# ------------------------------------------------------------------------ JobPolicyArns, secrets


def test_without_job_parameters_the_worker_gets_nothing_more(expanded: dict[str, Any]) -> None:
    """The defaults: no managed policy on the task role beyond its own table grant, no secret
    in the container, nothing but the ECS managed policy on the execution role."""
    task_role = props(expanded, "WorkerTaskRole")
    assert "ManagedPolicyArns" not in task_role
    assert [p["PolicyName"] for p in task_role["Policies"]] == ["job-table"]
    assert "Secrets" not in worker_container(expanded)
    execution = props(expanded, "WorkerExecutionRole")
    assert "Policies" not in execution
    assert execution["ManagedPolicyArns"] == [
        "arn:aws:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"]


def test_job_policy_arns_are_attached_to_the_task_role_only(expanded: dict[str, Any]) -> None:
    task_role = props(expanded, "WorkerTaskRole", JobPolicyArns=",".join(POLICY_ARNS))
    assert task_role["ManagedPolicyArns"] == POLICY_ARNS
    # The execution role (ECS's own, to pull and log) and the functions' roles stay as they were.
    execution = props(expanded, "WorkerExecutionRole", JobPolicyArns=",".join(POLICY_ARNS))
    assert execution == props(expanded, "WorkerExecutionRole")
    for role in ("DispatcherFunctionRole", "TaskEventFunctionRole"):
        assert POLICY_ARNS[0] not in json.dumps(
            props(expanded, role, JobPolicyArns=",".join(POLICY_ARNS)))


def test_job_secrets_become_the_containers_secrets_with_exact_reads(
        expanded: dict[str, Any]) -> None:
    """Two slots set (one secret, one parameter; slot 2 left empty): the container gets both
    variables, and the execution role may read exactly those ARNs (each action authorizes its
    own service's ARNs only: GetSecretValue cannot read a parameter, nor GetParameters a
    secret)."""
    values = {"JobSecret1": f"DB_PASSWORD={SECRET_ARN}", "JobSecret3": f"API_TOKEN={PARAMETER_ARN}"}
    assert worker_container(expanded, **values)["Secrets"] == [
        {"Name": "DB_PASSWORD", "ValueFrom": SECRET_ARN},
        {"Name": "API_TOKEN", "ValueFrom": PARAMETER_ARN}]
    statements = execution_statements(expanded, **values)
    assert {s["Sid"]: (s["Action"], s["Resource"]) for s in statements} == {
        "ReadJobSecrets": (["ssm:GetParameters", "secretsmanager:GetSecretValue"],
                           [SECRET_ARN, PARAMETER_ARN])}
    only_ssm = execution_statements(expanded, JobSecret5=f"TOKEN={PARAMETER_ARN}")
    assert [(s["Sid"], s["Resource"]) for s in only_ssm] == [("ReadJobSecrets",
                                                              [PARAMETER_ARN])]


# What AWS documents inside the condition functions but Fn::If ("Condition functions",
# Supported functions: "Fn::FindInMap, Ref, Other condition functions"):
# https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/intrinsic-function-reference-conditions.html
DOCUMENTED_IN_CONDITIONS = {"Ref", "Fn::FindInMap", "Condition", "Fn::And", "Fn::Equals",
                            "Fn::Not", "Fn::Or"}


def _functions(value: Any) -> set[str]:
    if isinstance(value, list):
        return set().union(*map(_functions, value)) if value else set()
    if isinstance(value, dict):
        return set(value) | _functions(list(value.values()))
    return set()


def test_every_condition_uses_only_what_aws_documents_in_conditions() -> None:
    """cfn-lint took Fn::Select, Fn::Split and Fn::Join inside Fn::Equals, which AWS's page on
    the condition functions does not list: a stack could fail to create on it."""
    template = yaml_parse(TEMPLATE.read_text())
    used = {name: _functions(rule) for name, rule in template["Conditions"].items()}
    assert {name: sorted(f - DOCUMENTED_IN_CONDITIONS) for name, f in used.items()
            if f - DOCUMENTED_IN_CONDITIONS} == {}


def test_kms_decrypt_only_with_a_key_and_only_through_ssm_and_secrets_manager(
        expanded: dict[str, Any]) -> None:
    with_key = execution_statements(expanded, JobSecret2=f"DB_PASSWORD={SECRET_ARN}",
                                    JobSecretsKmsKeyArn=KEY_ARN)
    (decrypt,) = [s for s in with_key if s["Action"] == "kms:Decrypt"]
    assert decrypt["Resource"] == KEY_ARN
    assert decrypt["Condition"] == {"StringEquals": {"kms:ViaService": [
        f"ssm.{REGION}.amazonaws.com", f"secretsmanager.{REGION}.amazonaws.com"]}}
    without_key = execution_statements(expanded, JobSecret2=f"DB_PASSWORD={SECRET_ARN}")
    assert not any(s["Action"] == "kms:Decrypt" for s in without_key)
    # A key with no secret to decrypt grants nothing.
    assert execution_statements(expanded, JobSecretsKmsKeyArn=KEY_ARN) == []


@pytest.mark.parametrize(("value", "accepted"), [
    ("", True),
    (f"DB_PASSWORD={SECRET_ARN}", True),
    (f"API_TOKEN={PARAMETER_ARN}", True),
    (f"X={PARAMETER_ARN.replace('arn:aws:', 'arn:aws-us-gov:')}", True),
    (f"DB_PASSWORD={SECRET_ARN}:password::", False),  # a JSON key: the grant would not match
    (SECRET_ARN, False),  # no variable name
    (f"1ABC={SECRET_ARN}", False),  # not a variable name
    (f"A=B={SECRET_ARN}", False),
    (f"BUCKET=arn:aws:s3:::{ACCOUNT}-reports", False),  # neither SSM nor Secrets Manager
])
def test_job_secret_values_are_checked_before_deploying(expanded: dict[str, Any], value: str,
                                                        accepted: bool) -> None:
    """CloudFormation refuses a slot its AllowedPattern does not match (whole value), so every
    slot that renders splits into a name and an ARN of SSM or Secrets Manager."""
    patterns = {expanded["Parameters"][f"JobSecret{n}"]["AllowedPattern"] for n in range(1, 6)}
    assert len(patterns) == 1
    assert (re.fullmatch(patterns.pop(), value) is not None) is accepted


def test_deploy_policy_passes_the_roles_the_task_definition_names(
        expanded: dict[str, Any]) -> None:
    """`longjobs deploy` registers a copy of the revision, secrets included; it passes the
    same two roles, whatever JobPolicyArns or JobSecret add to them."""
    values = {"JobPolicyArns": POLICY_ARNS[0], "JobSecret1": f"DB_PASSWORD={SECRET_ARN}"}
    task_definition = props(expanded, "WorkerTaskDefinition", **values)
    statements = props(expanded, "DeployPolicy", **values)["PolicyDocument"]["Statement"]
    (passing,) = [s for s in statements if s["Action"] == "iam:PassRole"]
    assert passing["Resource"] == [task_definition["TaskRoleArn"],
                                   task_definition["ExecutionRoleArn"]]


# --------------------------------------------------------------------------- the task-state rule


def fixture_event(**detail: Any) -> dict[str, Any]:
    """AWS's published Fargate task event, STOPPED, on the template's cluster, as the dispatcher
    launches it (startedBy as request_for sets it); ``detail`` overrides fields."""
    event: dict[str, Any] = json.loads(
        (FIXTURES / "ecs_task_state_change_fargate_running.json").read_text())
    started_by = request_for(Launch(launch_id="f" * 40, bundle_ids=["b1"],
                                    task_definition="longjobs-worker:3")).started_by
    template = yaml_parse(TEMPLATE.read_text())
    event["detail"].update({
        "clusterArn": resolve_sample({"Fn::GetAtt": ["Cluster", "Arn"]}, template),
        "lastStatus": "STOPPED", "desiredStatus": "STOPPED", "stopCode": "EssentialContainerExited",
        "group": "family:longjobs-worker", "startedBy": started_by,
        "taskDefinitionArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/longjobs-worker:3",
        **detail})
    return event


def routed(event: dict[str, Any]) -> bool:
    """The rule's verdict on an event, by moto's EventBridge pattern matcher (moto does not
    implement the TestEventPattern API itself), and the same by test_infra's own matcher."""
    from moto.events.models import EventPattern

    template = yaml_parse(TEMPLATE.read_text())
    pattern = resolve_sample(template["Resources"]["TaskStoppedRule"]["Properties"]
                             ["EventPattern"], template)
    verdict = EventPattern.load(json.dumps(pattern)).matches_event(event)
    assert matches(pattern, event) is verdict
    return bool(verdict)


@pytest.mark.parametrize(("detail", "expected"), [
    ({}, True),
    ({"taskDefinitionArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/longjobs-worker:9"},
     True),  # a later revision (`longjobs deploy`): the same family
    ({"lastStatus": "RUNNING"}, False),
    ({"group": "family:other-worker",
      "taskDefinitionArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/other-worker:1"},
     False),  # another family, in this cluster
    ({"group": "family:longjobs-worker-2"}, False),  # a family whose name only starts alike
    ({"startedBy": "ecs-svc/2770844949256052681"}, False),  # a service's task
    ({"startedBy": "someone"}, False),  # started by hand
    ({"clusterArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/other"}, False),
])
def test_stop_rule_takes_this_stacks_tasks_only(detail: dict[str, Any], expected: bool) -> None:
    assert routed(fixture_event(**detail)) is expected


def test_stop_rule_ignores_a_task_without_started_by() -> None:
    """A task run without startedBy (the field is then absent from the event)."""
    event = fixture_event()
    del event["detail"]["startedBy"]
    assert routed(event) is False


# ------------------------------------------------------------------------------------- names


def test_no_generated_name_outgrows_its_limit_for_a_128_character_stack(
        expanded: dict[str, Any]) -> None:
    """A schedule name is 1-64 characters (AWS::Scheduler::Schedule), an EventBridge rule's
    1-64: for the longest stack name, each is left for CloudFormation to generate, or what the
    template gives renders within the limit."""
    limits = {"AWS::Scheduler::Schedule": 64, "AWS::Events::Rule": 64}
    checked = 0
    for name, resource in expanded["Resources"].items():
        if resource["Type"] not in limits:
            continue
        checked += 1
        given = Rendering(expanded, {}, stack_name=STACK_128).value(
            copy.deepcopy(resource["Properties"])).get("Name")
        assert given is None or (len(given) <= limits[resource["Type"]]
                                 and re.fullmatch(r"[0-9a-zA-Z-_.]+", given)), (name, given)
    assert checked == 3  # the schedule, the task-stopped rule, the job-failed rule
    (schedule,) = [r["Properties"] for r in expanded["Resources"].values()
                   if r["Type"] == "AWS::Scheduler::Schedule"]
    assert "Name" not in schedule
