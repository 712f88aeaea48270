"""Offline checks of infra/template.yaml and of the deploy path.

The template and the code are written separately, so these tests keep them honest: the template
must lint clean (cfn-lint, checkov), expand with the SAM translator, point at handlers that exist,
set the environment the config module reads, declare the table the pynamodb models use, and route
exactly the ECS events the task-event handler expects. The deploy's copy of a revision is tested
on moto in ``tests/contract/test_deployed_revision_on_ecs.py``.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from samtranslator.parser.parser import Parser
from samtranslator.public.exceptions import InvalidDocumentException
from samtranslator.translator.translator import Translator

from dispatcher import settings
from dispatcher.aws.dynamodb.model import key_schema
from dispatcher.domain.pacing import split_tasks

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "infra" / "template.yaml"
REGION = "us-east-1"
ACCOUNT = "123456789012"
CLUSTER_ARN = f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/longjobs-Cluster-abc"
STACK_NAME = "longjobs-prod"  # what ``Ref AWS::StackName`` gives in these samples

# Values for the parameters that have no default, as `sam deploy --guided` would ask for them.
SAMPLE_PARAMETERS: dict[str, Any] = {
    "Image": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/longjobs-worker:1",
    "Subnets": ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"],
    "SecurityGroups": ["sg-0123456789abcdef0"],
    "ProducerRoleArns": [f"arn:aws:iam::{ACCOUNT}:role/producer"],
}

# Where the checkov test looks for the tool (it is kept out of the project venv: it pins its own
# versions of boto3 and friends). `make tools` or CI creates .venv-tools.
CHECKOV_ENV = "LONGJOBS_CHECKOV"
CHECKOV_DEFAULT = ROOT / ".venv-tools" / "bin" / "checkov"


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == kind}


def functions(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return resources(template, "AWS::Serverless::Function")


def function_env(template: dict[str, Any], name: str) -> dict[str, Any]:
    """A function's environment as deployed: Globals merged with the function's own."""
    shared = template.get("Globals", {}).get("Function", {}).get("Environment", {})
    own = template["Resources"][name]["Properties"].get("Environment", {})
    return {**shared.get("Variables", {}), **own.get("Variables", {})}


def resolve(value: Any, template: dict[str, Any]) -> Any:
    """Evaluate the intrinsics the template uses in env values, with sample deployed values.

    Parameters resolve to their default (or SAMPLE_PARAMETERS); resources to plausible physical
    ids, so the config module can parse what a real deployment would hand it.
    """
    if isinstance(value, list):
        return [resolve(v, template) for v in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        name = value["Ref"]
        params = template.get("Parameters", {})
        if name in params:
            return SAMPLE_PARAMETERS.get(name, params[name].get("Default"))
        if name == "AWS::Region":
            return REGION
        if name == "AWS::StackName":
            return STACK_NAME
        kind = template["Resources"][name]["Type"]
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/longjobs-{name}"
        return f"longjobs-{name}"
    if "Fn::GetAtt" in value:
        name, attr = value["Fn::GetAtt"]
        if (name, attr) == ("Cluster", "Arn"):
            return CLUSTER_ARN
        return f"arn:aws:{name}:{attr}"
    if "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return sep.join(str(p) for p in resolve(parts, template))
    if "Fn::Sub" in value:
        raise AssertionError("resolve() does not evaluate Fn::Sub; extend it if the env needs it")
    return {k: resolve(v, template) for k, v in value.items()}


# --------------------------------------------------------------------------------------- linters


def test_cfn_lint_reports_nothing() -> None:
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    assert cfn_lint.exists(), f"cfn-lint is a dev dependency; expected it at {cfn_lint}"
    proc = subprocess.run([str(cfn_lint), str(TEMPLATE)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, f"cfn-lint found problems:\n{proc.stdout}{proc.stderr}"


def checkov_binary() -> Path | None:
    configured = os.environ.get(CHECKOV_ENV)
    path = Path(configured) if configured else CHECKOV_DEFAULT
    return path if path.exists() else None


def test_checkov_reports_no_failed_checks() -> None:
    checkov = checkov_binary()
    if checkov is None:
        pytest.skip(f"checkov not installed: set {CHECKOV_ENV} or create {CHECKOV_DEFAULT} "
                    "(python -m venv .venv-tools && .venv-tools/bin/pip install checkov)")
    # --skip-download: stay offline (no guideline download from the Prisma Cloud API).
    proc = subprocess.run(
        [str(checkov), "--file", str(TEMPLATE), "--framework", "cloudformation",
         "--skip-download", "--quiet", "--compact", "--output", "json"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "BC_API_KEY": ""},
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"checkov did not produce a report (rc={proc.returncode}):\n"
                    f"{proc.stdout}\n{proc.stderr}")
    summary = report["summary"]
    failed = [f"{c['check_id']} {c['resource']}: {c['check_name']}"
              for c in report.get("results", {}).get("failed_checks", [])]
    assert summary["parsing_errors"] == 0, proc.stdout
    assert summary["failed"] == 0, "\n".join(failed)
    assert summary["passed"] > 0, "checkov ran no checks; is the framework right?"
    assert proc.returncode == 0, proc.stderr


def test_every_checkov_suppression_is_justified(template: dict[str, Any]) -> None:
    for name, resource in template["Resources"].items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert skip.get("id", "").startswith("CKV"), f"{name}: malformed skip {skip}"
            assert len(skip.get("comment", "").strip()) >= 20, (
                f"{name}: suppression of {skip.get('id')} needs a justification comment")


# -------------------------------------------------------------------------------- SAM transform


def sam_expand(template: dict[str, Any]) -> dict[str, Any]:
    """The SAM transform, offline (test_permissions.py evaluates its policies too)."""
    sam = copy.deepcopy(template)
    # The translator only accepts code that is already uploaded; `sam build`/`package` does that
    # for the local CodeUri and the layer's ContentUri in a real deploy.
    for holder in [sam.get("Globals", {}).get("Function", {}),
                   *(f["Properties"] for f in functions(sam).values())]:
        if "CodeUri" in holder:
            holder["CodeUri"] = "s3://longjobs-artifacts/code.zip"
    for layer in resources(sam, "AWS::Serverless::LayerVersion").values():
        layer["Properties"]["ContentUri"] = "s3://longjobs-artifacts/layer.zip"
    old = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = REGION
    try:
        return Translator(managed_policy_map={}, sam_parser=Parser()).translate(
            sam, parameter_values={}, get_managed_policy_map=dict)
    except InvalidDocumentException as exc:
        pytest.fail("SAM transform failed: " + "; ".join(str(c) for c in exc.causes))
    finally:
        if old is None:
            del os.environ["AWS_DEFAULT_REGION"]
        else:
            os.environ["AWS_DEFAULT_REGION"] = old


def test_sam_transform_expands_offline(expanded: dict[str, Any]) -> None:
    kinds = {r["Type"] for r in expanded["Resources"].values()}
    assert not any(k.startswith("AWS::Serverless::") for k in kinds)
    assert {"AWS::Lambda::Function", "AWS::Lambda::EventInvokeConfig",
            "AWS::Scheduler::Schedule", "AWS::Events::Rule"} <= kinds


def test_dispatcher_runs_every_minute_one_at_a_time(
    template: dict[str, Any], expanded: dict[str, Any]
) -> None:
    res = expanded["Resources"]
    fn = res["DispatcherFunction"]["Properties"]
    assert fn["Handler"] == "dispatcher.handlers.dispatch"
    assert fn["Runtime"] == "python3.12"
    assert fn["ReservedConcurrentExecutions"] == 1
    # One tick at a time is what lets a tick take over a dead one's lease at once; no other
    # function of the stack may say it runs so (only the tick takes the lease).
    assert function_env(template, "DispatcherFunction")["LONGJOBS_TICK_ONE_AT_A_TIME"] == "true"
    for name, other in template["Resources"].items():
        if other["Type"] == "AWS::Serverless::Function" and name != "DispatcherFunction":
            assert function_env(template, name)["LONGJOBS_TICK_ONE_AT_A_TIME"] == "false", name
    # A tick drains until its reserve before the Timeout (Lambda's maximum); the HOLD on each
    # received message is longer than that reserve, so none is delivered twice meanwhile.
    reserve = float(function_env(template, "DispatcherFunction")["LONGJOBS_TICK_RESERVE_SECONDS"])
    assert 0 < reserve < fn["Timeout"] == 900
    invoke = res["DispatcherFunctionEventInvokeConfig"]["Properties"]
    assert invoke["MaximumRetryAttempts"] == 0
    assert invoke["MaximumEventAgeInSeconds"] == 60
    (schedule,) = [r["Properties"] for r in res.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    assert schedule["ScheduleExpression"] == "rate(1 minute)"
    assert schedule["Target"]["Arn"] == {"Fn::GetAtt": ["DispatcherFunction", "Arn"]}
    assert schedule["Target"]["RetryPolicy"]["MaximumRetryAttempts"] == 0


# ---------------------------------------------------------------------------------- consistency


def test_every_handler_is_importable(template: dict[str, Any]) -> None:
    handlers = {f["Properties"]["Handler"] for f in functions(template).values()}
    assert handlers == {"dispatcher.handlers.dispatch", "dispatcher.handlers.task_event",
                        "dispatcher.handlers.publish_job_events",
                        "dispatcher.handlers.release_dependents",
                        "dispatcher.console.lambda_entry.handler",
                        "dispatcher.console.token_scopes.handler"}
    for handler in sorted(handlers):
        module_name, _, attr = handler.rpartition(".")
        module = importlib.import_module(module_name)
        assert callable(getattr(module, attr, None)), f"{handler} is not a callable"


def allowed_env_names() -> set[str]:
    return {s.name for s in settings.SETTINGS}


# The team console function's own variables, set on that function alone: how the browser signs
# in (read by dispatcher/console/team.py), and that the console acts (LONGJOBS_CONSOLE_OPERATE,
# which the entry point does not read today: it is built to act).
CONSOLE_VARIABLES = {"LONGJOBS_CONSOLE_CLIENT_ID", "LONGJOBS_CONSOLE_AUTHORIZE_URL",
                     "LONGJOBS_CONSOLE_TOKEN_URL", "LONGJOBS_CONSOLE_LOGOUT_URL",
                     "LONGJOBS_CONSOLE_OPERATE"}


def test_function_env_is_what_the_config_module_reads(template: dict[str, Any]) -> None:
    for name in functions(template):
        known = allowed_env_names() | (CONSOLE_VARIABLES if name == "ConsoleFunction" else set())
        env = function_env(template, name)
        unknown = {k for k in env if k not in known and not k.startswith("POWERTOOLS_")}
        assert not unknown, f"{name} sets variables settings.py does not read: {sorted(unknown)}"
        missing = set(settings.required("dispatcher")) - set(env)
        assert not missing, f"{name} lacks required variables: {sorted(missing)}"


def test_function_env_loads_as_a_valid_config(template: dict[str, Any]) -> None:
    """What a deployment hands the functions (defaults, sample parameters) passes validation."""
    for name in functions(template):
        env = {k: str(resolve(v, template)) for k, v in function_env(template, name).items()}
        cfg = settings.load("dispatcher", env)
        assert cfg.cluster == CLUSTER_ARN
        assert cfg.subnets == tuple(SAMPLE_PARAMETERS["Subnets"])
        assert cfg.container == "worker"
        assert cfg.launcher == "ecs"
        assert [p.provider for p in cfg.capacity_strategy] == ["FARGATE_SPOT", "FARGATE"]


def test_the_default_strategy_puts_small_launches_on_spot(template: dict[str, Any]) -> None:
    """A RunTask call is placed by its own strategy, its ``base`` first
    (https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_CapacityProviderStrategyItem.html:
    "The weight value is taken into consideration after the base value, if defined, is
    satisfied"): an on-demand base would put every one-task launch on demand, and the
    dispatcher's launches are of one to ten tasks. So the default has none: its weights alone."""
    (name, *_) = functions(template)
    env = {k: str(resolve(v, template)) for k, v in function_env(template, name).items()}
    strategy = [(p.provider, p.weight, p.base)
                for p in settings.load("dispatcher", env).capacity_strategy]
    assert split_tasks(1, strategy) == {"FARGATE_SPOT": 1}
    assert split_tasks(10, strategy) == {"FARGATE_SPOT": 8, "FARGATE": 2}
    default = template["Resources"]["ClusterCapacityProviders"]["Properties"][
        "DefaultCapacityProviderStrategy"]
    assert all("Base" not in item for item in default)


def test_worker_env_is_what_the_runner_reads(template: dict[str, Any]) -> None:
    (task,) = resources(template, "AWS::ECS::TaskDefinition").values()
    (container,) = task["Properties"]["ContainerDefinitions"]
    assert container["Name"] == settings.Config().container
    assert container["Command"] == ["python", "-m", "job_runner"]
    assert container["StopTimeout"] == 120
    names = {e["Name"] for e in container.get("Environment", [])}
    known = allowed_env_names()
    assert {n for n in names if n not in known and not n.startswith("POWERTOOLS_")} == set()
    assert set(settings.required("runner")) <= names


def test_table_matches_the_pynamodb_models(template: dict[str, Any]) -> None:
    (table,) = resources(template, "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    (hash_key,) = [k["AttributeName"] for k in props["KeySchema"] if k["KeyType"] == "HASH"]
    assert [k for k in props["KeySchema"] if k["KeyType"] == "RANGE"] == []
    indexes = {}
    for gsi in props.get("GlobalSecondaryIndexes", []):
        keys = {k["KeyType"]: k["AttributeName"] for k in gsi["KeySchema"]}
        indexes[gsi["IndexName"]] = {"hash_key": keys["HASH"], "range_key": keys["RANGE"],
                                     "projection": gsi["Projection"]["ProjectionType"]}
    declared = {
        "hash_key": hash_key,
        "attributes": {a["AttributeName"]: a["AttributeType"]
                       for a in props["AttributeDefinitions"]},
        "indexes": indexes,
        "ttl_attribute": props["TimeToLiveSpecification"]["AttributeName"],
    }
    assert declared == key_schema()
    assert "LocalSecondaryIndexes" not in props
    assert props["TimeToLiveSpecification"]["Enabled"] is True
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["SSESpecification"]["SSEEnabled"] is True


# ------------------------------------------------------------------------------- event routing


def stopped_event(last_status: str = "STOPPED", cluster_arn: str = CLUSTER_ARN) -> dict[str, Any]:
    """An ECS Task State Change event as EventBridge delivers it (trimmed)."""
    return {
        "version": "0",
        "id": "3317b2af-7005-947d-b652-f55e762e571a",
        "detail-type": "ECS Task State Change",
        "source": "aws.ecs",
        "account": ACCOUNT,
        "time": "2024-01-01T00:00:00Z",
        "region": REGION,
        "resources": [f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/longjobs/0123456789abcdef"],
        "detail": {
            "clusterArn": cluster_arn,
            "taskArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/longjobs/0123456789abcdef",
            "taskDefinitionArn": f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/"
                                 "longjobs-worker:3",
            "lastStatus": last_status,
            "desiredStatus": "STOPPED",
            "stopCode": "EssentialContainerExited",
            "stoppedReason": "Essential container in task exited",
            "containers": [{"name": "worker", "exitCode": 0, "lastStatus": last_status}],
            "group": "family:longjobs-worker",
            "startedBy": "longjobs/0123456789abcdef01234567",
            "launchType": "FARGATE",
        },
    }


def matches(pattern: Any, event: Any) -> bool:
    """EventBridge matching for the subset the template uses: value lists, nested objects,
    prefix filters and ``{"exists": true}``."""
    if isinstance(pattern, dict):
        return isinstance(event, dict) and all(
            key in event and matches(sub, event[key]) for key, sub in pattern.items())
    if isinstance(pattern, list):
        if pattern == [{"exists": True}]:
            return True  # the key is there (checked above), whatever its value
        if any(isinstance(p, dict) and set(p) != {"prefix"} for p in pattern):
            raise AssertionError(f"the template now uses a content filter this matcher cannot "
                                 f"evaluate: {pattern}")
        values = event if isinstance(event, list) else [event]
        return any(isinstance(v, str) and v.startswith(p["prefix"]) if isinstance(p, dict)
                   else v == p for v in values for p in pattern)
    raise AssertionError(f"a pattern leaf must be a list of values, not {pattern!r}")


def test_event_rule_matches_stopped_tasks_of_this_cluster_only(template: dict[str, Any]) -> None:
    rule = template["Resources"]["TaskStoppedRule"]
    props = rule["Properties"]
    pattern = resolve(props["EventPattern"], template)
    assert matches(pattern, stopped_event())
    assert not matches(pattern, stopped_event("RUNNING"))
    assert not matches(pattern, stopped_event(cluster_arn=CLUSTER_ARN + "-other"))
    try:
        from moto.events.models import EventPattern
    except ImportError:  # pragma: no cover - moto is a dev dependency
        pass
    else:  # the same verdicts from an independent matcher
        moto_pattern = EventPattern.load(json.dumps(pattern))
        assert moto_pattern.matches_event(stopped_event())
        assert not moto_pattern.matches_event(stopped_event("RUNNING"))
    (target,) = props["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": ["TaskEventFunction", "Arn"]}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    assert "Arn" in target["DeadLetterConfig"]


# ----------------------------------------------------------------------------- template policy


def test_queue_settings(template: dict[str, Any]) -> None:
    queue = template["Resources"]["JobQueue"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    assert queue["MessageRetentionPeriod"] == 14 * 86400
    assert queue["MaximumMessageSize"] == 1024 * 1024
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["JobDeadLetterQueue", "Arn"]}
    (policy,) = [r["Properties"] for r in resources(template, "AWS::SQS::QueuePolicy").values()
                 if r["Properties"]["Queues"] == [{"Ref": "JobQueue"}]]
    allow = [s for s in policy["PolicyDocument"]["Statement"]
             if s["Effect"] == "Allow" and s["Action"] == "sqs:SendMessage"]
    assert [s["Principal"] for s in allow] == [{"AWS": {"Ref": "ProducerRoleArns"}}]


def policy_statements(expanded: dict[str, Any], role: str) -> list[dict[str, Any]]:
    props = expanded["Resources"][role]["Properties"]
    return [s for p in props.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_iam_is_least_privilege(expanded: dict[str, Any]) -> None:
    statements = policy_statements(expanded, "DispatcherFunctionRole")
    by_action = {a: s for s in statements for a in as_list(s["Action"])}

    run = by_action["ecs:RunTask"]
    assert run["Resource"] == {"Fn::Sub": "arn:${AWS::Partition}:ecs:${AWS::Region}:"
                                          "${AWS::AccountId}:task-definition/${TaskFamily}:*"}
    assert run["Condition"] == {"ArnEquals": {"ecs:cluster": {"Fn::GetAtt": ["Cluster", "Arn"]}}}
    for action in ("ecs:StopTask", "ecs:DescribeTasks"):
        assert "ecs:cluster" in by_action[action]["Condition"]["ArnEquals"]
    assert by_action["iam:PassRole"]["Resource"] == [
        {"Fn::GetAtt": ["WorkerTaskRole", "Arn"]}, {"Fn::GetAtt": ["WorkerExecutionRole", "Arn"]}]

    for role in ("DispatcherFunctionRole", "TaskEventFunctionRole", "WorkerTaskRole"):
        for statement in policy_statements(expanded, role):
            if statement["Resource"] == "*":
                # The actions ECS offers no resource-level permission for: describing, and
                # (the tick alone, re-deriving the deployment) registering a revision.
                wanted = [["ecs:DescribeTaskDefinition"]] + (
                    [["ecs:RegisterTaskDefinition"]] if role == "DispatcherFunctionRole" else [])
                assert as_list(statement["Action"]) in wanted, statement
            assert not any(a.endswith("*") for a in as_list(statement["Action"])), statement
    worker = policy_statements(expanded, "WorkerTaskRole")
    assert {a.split(":")[0] for s in worker for a in as_list(s["Action"])} == {"dynamodb"}


def test_task_event_role_can_relaunch_as_the_dispatcher_does(expanded: dict[str, Any]) -> None:
    """A rerun relaunches at once, so the task-event role needs the launch
    permissions (RunTask, tag on create, PassRole) with the same scoping
    as the dispatcher's. test_permissions.py checks them against recorded behaviour."""
    def launch_grants(role: str) -> dict[str, dict[str, Any]]:
        wanted = {"ecs:RunTask", "ecs:TagResource", "ecs:DescribeTaskDefinition", "iam:PassRole"}
        # The tick's re-derivation grants (tagging a revision it registers) are its own.
        return {a: {k: v for k, v in s.items() if k != "Sid"}
                for s in policy_statements(expanded, role)
                for a in as_list(s["Action"]) if a in wanted
                and s.get("Sid") != "TagRederivedRevisions"}

    task_event = launch_grants("TaskEventFunctionRole")
    # No DescribeTaskDefinition: it relaunches the stack's revision or the deployment's.
    assert set(task_event) == {"ecs:RunTask", "ecs:TagResource", "iam:PassRole"}
    dispatcher = launch_grants("DispatcherFunctionRole")
    assert task_event == {a: dispatcher[a] for a in task_event}
    assert task_event["ecs:TagResource"]["Condition"] == {
        "StringEquals": {"ecs:CreateAction": "RunTask"}}
    assert task_event["iam:PassRole"]["Condition"] == {
        "StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}


def queue_policies(template: dict[str, Any], queue: str) -> list[dict[str, Any]]:
    return [s for r in resources(template, "AWS::SQS::QueuePolicy").values()
            if {"Ref": queue} in r["Properties"]["Queues"]
            for s in r["Properties"]["PolicyDocument"]["Statement"]]


@pytest.mark.parametrize("queue", ["JobQueue", "HighJobQueue", "LowJobQueue",
                                   "JobDeadLetterQueue", "EventDeadLetterQueue"])
def test_every_queue_is_tls_only_and_retained(template: dict[str, Any], queue: str) -> None:
    """The dead-letter queues get the job queue's TLS-only deny, and no
    queue (with jobs or dead letters in it) is deleted with the stack or on replacement."""
    resource = template["Resources"][queue]
    assert resource["DeletionPolicy"] == "Retain"
    assert resource["UpdateReplacePolicy"] == "Retain"
    tls = [s for s in queue_policies(template, queue) if s["Effect"] == "Deny"
           and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}]
    assert len(tls) == 1, f"{queue} has no TLS-only deny"
    assert tls[0]["Principal"] == "*" and tls[0]["Action"] == "sqs:*"
    assert tls[0]["Resource"] == {"Fn::GetAtt": [queue, "Arn"]}


def test_scheduler_role_is_bound_to_this_account(expanded: dict[str, Any]) -> None:
    """The role the tick's schedule assumes takes the confused-deputy
    conditions of the EventBridge Scheduler guide (aws:SourceAccount, aws:SourceArn)."""
    res = expanded["Resources"]
    (schedule,) = [r["Properties"] for r in res.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    assert schedule["Target"]["RoleArn"] == {"Fn::GetAtt": ["DispatcherTickRole", "Arn"]}
    assert not any(name.endswith("TickRole") and name != "DispatcherTickRole" for name in res), (
        "SAM still generates a schedule role of its own")
    role = res["DispatcherTickRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert "schedule-group/default" in trust["Condition"]["ArnLike"]["aws:SourceArn"]["Fn::Sub"]
    (statement,) = policy_statements(expanded, "DispatcherTickRole")
    assert statement["Action"] == "lambda:InvokeFunction"
    assert statement["Resource"] == {"Fn::GetAtt": ["DispatcherFunction", "Arn"]}


def test_worker_container_runs_an_init_process(template: dict[str, Any]) -> None:
    """PID 1 forwards signals and reaps handlers' child processes."""
    (task,) = resources(template, "AWS::ECS::TaskDefinition").values()
    (container,) = task["Properties"]["ContainerDefinitions"]
    assert container["LinuxParameters"]["InitProcessEnabled"] is True


def test_a_worker_image_whose_handlers_declare_none_fails_its_build_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Right after it installs HANDLERS, the build runs job_runner.image_check, unless the
    handlers come from the stack's Handlers parameter: a package that declares no handler stops
    the build with one line naming the fix, not every job of the first task."""
    from importlib.metadata import EntryPoint

    from job_runner import image_check, kinds

    build, _ = dockerfile_stages()
    installs = next(n for n, i in enumerate(build) if "pip install -c" in i and "$HANDLERS" in i)
    check = build[installs + 2]  # after its ARG HANDLERS_BY_STACK
    assert build[installs + 1] == 'ARG HANDLERS_BY_STACK=""'
    assert check.startswith("RUN ") and 'python -m job_runner.image_check "$HANDLERS"' in check
    assert '[ -z "$HANDLERS_BY_STACK" ]' in check
    monkeypatch.setattr(kinds, "entry_points", lambda group: [])
    said = image_check.problem("my-jobs==1.4.0")
    assert said is not None and said.count("\n") == 0 and said.startswith(
        "error: my-jobs==1.4.0 declares no longjobs.handlers entry point: add")
    assert image_check.main(["my-jobs==1.4.0"]) == 1
    monkeypatch.setattr(kinds, "entry_points", lambda group: [
        EntryPoint("resize", "my_jobs:resize", "longjobs.handlers")])
    assert image_check.problem("my-jobs==1.4.0") is None
    assert image_check.main(["my-jobs==1.4.0"]) == 0


def dockerfile_stages() -> list[list[str]]:
    """The Dockerfile's instructions (comments and continuations folded), split per stage."""
    text = (ROOT / "infra" / "worker" / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    instructions = " ".join(lines).replace("\\ ", " ")
    stages: list[list[str]] = []
    for word in re.split(r"\s(?=(?:FROM|RUN|COPY|ENV|ARG|WORKDIR|USER|CMD|ENTRYPOINT)\s)",
                         instructions):
        if word.startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(word.strip())
    return stages


def test_worker_image_can_install_git_handlers_and_ships_without_git() -> None:
    """HANDLERS may be a git+https URL, so the build stage has git; the
    runtime stage only copies the installed environment (no git, no build tools)."""
    build, runtime = dockerfile_stages()
    assert build[0].startswith("FROM ") and build[0].endswith(" AS build")
    assert any("apt-get install" in i and " git" in i for i in build)
    assert any("\"$HANDLERS\"" in i and "pip install" in i for i in build)
    assert not any("git" in i for i in runtime), runtime
    assert not any("pip install" in i for i in runtime), runtime
    assert any(i.startswith("COPY --from=build /opt/venv") for i in runtime)
    assert runtime[-1] == 'CMD ["python", "-m", "job_runner"]'
    assert any(i.startswith("USER ") and "root" not in i for i in runtime)


def test_deploy_policy_grants_what_the_deploying_guide_lists(expanded: dict[str, Any]) -> None:
    """`longjobs deploy` needs what docs/deploying.md "Shipping new job code" lists; the template
    offers it as a managed policy for the CI role (test_permissions.py checks it in use)."""
    policy = expanded["Resources"]["DeployPolicy"]["Properties"]["PolicyDocument"]
    actions = {a for s in policy["Statement"] for a in as_list(s["Action"])}
    assert actions == {"ecs:DescribeTaskDefinition", "ecs:RegisterTaskDefinition",
                       "ecs:TagResource", "iam:PassRole", "dynamodb:GetItem", "dynamodb:PutItem"}
    guide = (ROOT / "docs" / "deploying.md").read_text()
    assert all(f"`{a}`" in guide for a in actions)
    assert "DeployPolicyArn" in expanded["Outputs"]


def test_alarms_cover_backlog_dead_letters_errors_and_silence(template: dict[str, Any]) -> None:
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()
              if "MetricName" in a["Properties"]]  # metric-math alarms: test_alarms.py
    metrics = {(a["Namespace"] if isinstance(a["Namespace"], str) else "custom",
                a["MetricName"]) for a in alarms}
    assert ("AWS/SQS", "ApproximateAgeOfOldestMessage") in metrics
    assert ("AWS/Lambda", "Errors") in metrics
    dlq_alarms = {a["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in alarms
                  if a["MetricName"] == "ApproximateNumberOfMessagesVisible"}
    assert dlq_alarms == {"JobDeadLetterQueue", "EventDeadLetterQueue",
                          "ScheduleDeadLetterQueue"}
    (heartbeat,) = [a for a in alarms if a["MetricName"] == "TickCompleted"]
    assert heartbeat["Namespace"] == {"Ref": "MetricsNamespace"}
    assert heartbeat["TreatMissingData"] == "breaching"
    assert heartbeat["ComparisonOperator"] == "LessThanThreshold"


def test_outputs_give_clients_what_they_need(template: dict[str, Any]) -> None:
    assert {"QueueUrl", "HighQueueUrl", "LowQueueUrl", "DeadLetterQueueUrl", "TableName",
            "ClusterArn", "TaskFamily", "DashboardUrl"} <= set(template["Outputs"])


# ---------------------------------------------------------------------- one queue per priority

PRIORITY_QUEUES = {"high": "HighJobQueue", "normal": "JobQueue", "low": "LowJobQueue"}


def _renamed(value: Any, old: str, new: str) -> Any:
    """``value`` with every reference to resource ``old`` pointed at ``new``."""
    return json.loads(json.dumps(value).replace(f'"{old}"', f'"{new}"'))


@pytest.mark.parametrize("queue", ["HighJobQueue", "LowJobQueue"])
def test_priority_queues_are_the_job_queues_twins(template: dict[str, Any], queue: str) -> None:
    """Each priority's queue has the job queue's properties (encryption,
    retention, size, visibility, redrive to the same dead-letter queue) and policy (producers
    may send, nobody else, TLS only), and is retained like it."""
    res = template["Resources"]
    job, other = res["JobQueue"], res[queue]
    assert other["Properties"] == job["Properties"]
    assert other["Properties"]["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["JobDeadLetterQueue", "Arn"]}
    for key in ("DeletionPolicy", "UpdateReplacePolicy"):
        assert other[key] == job[key] == "Retain"
    assert [s["id"] for s in other["Metadata"]["checkov"]["skip"]] == ["CKV_AWS_27"]
    assert queue_policies(template, queue) == _renamed(queue_policies(template, "JobQueue"),
                                                       "JobQueue", queue)


def test_both_functions_get_every_priority_queue(template: dict[str, Any]) -> None:
    variables = {"LONGJOBS_QUEUE_URL": "JobQueue", "LONGJOBS_HIGH_QUEUE_URL": "HighJobQueue",
                 "LONGJOBS_LOW_QUEUE_URL": "LowJobQueue"}
    for name in functions(template):
        env = function_env(template, name)
        assert {v: env.get(v) for v in variables} == {v: {"Ref": q} for v, q in variables.items()}
        cfg = settings.load("dispatcher", {k: str(resolve(v, template)) for k, v in env.items()})
        assert cfg.high_queue_url.endswith("/longjobs-HighJobQueue")
        assert cfg.low_queue_url.endswith("/longjobs-LowJobQueue")
    outputs = template["Outputs"]
    assert {k: outputs[k]["Value"] for k in ("QueueUrl", "HighQueueUrl", "LowQueueUrl")} == {
        "QueueUrl": {"Ref": "JobQueue"}, "HighQueueUrl": {"Ref": "HighJobQueue"},
        "LowQueueUrl": {"Ref": "LowJobQueue"}}


def test_dispatcher_drains_every_priority_queue(expanded: dict[str, Any]) -> None:
    statements = policy_statements(expanded, "DispatcherFunctionRole")
    (drain,) = [s for s in statements if "sqs:ReceiveMessage" in as_list(s["Action"])]
    assert set(as_list(drain["Action"])) >= {"sqs:ReceiveMessage", "sqs:DeleteMessage",
                                             "sqs:ChangeMessageVisibility",
                                             "sqs:GetQueueAttributes"}
    assert as_list(drain["Resource"]) == [{"Fn::GetAtt": [q, "Arn"]}
                                          for q in ("JobQueue", "HighJobQueue", "LowJobQueue")]
    # Nothing else in the stack reads the job queues.
    for role in ("TaskEventFunctionRole", "WorkerTaskRole"):
        assert not any(a.startswith("sqs:Receive") for s in policy_statements(expanded, role)
                       for a in as_list(s["Action"]))


def test_every_priority_queue_has_an_age_alarm(template: dict[str, Any]) -> None:
    alarms = [a["Properties"] for a in resources(template, "AWS::CloudWatch::Alarm").values()
              if a["Properties"].get("MetricName") == "ApproximateAgeOfOldestMessage"]
    watched = {a["Dimensions"][0]["Value"]["Fn::GetAtt"][0] for a in alarms}
    assert watched == set(PRIORITY_QUEUES.values())
    assert all(a["Threshold"] == {"Ref": "QueueAgeAlarmSeconds"} for a in alarms)


def test_local_queues_have_the_templates_shape(template: dict[str, Any]) -> None:
    """Local mode and tests provision the same queue shape the stack creates."""
    from dispatcher.local.provision import DLQ_ATTRIBUTES, MAX_RECEIVE_COUNT, QUEUE_ATTRIBUTES

    queues = resources(template, "AWS::SQS::Queue")
    job = queues["JobQueue"]["Properties"]
    assert {k: str(job[k]) for k in QUEUE_ATTRIBUTES} == QUEUE_ATTRIBUTES
    assert job["RedrivePolicy"]["maxReceiveCount"] == MAX_RECEIVE_COUNT
    dlq = queues["JobDeadLetterQueue"]["Properties"]
    assert {k: str(dlq[k]) for k in DLQ_ATTRIBUTES} == DLQ_ATTRIBUTES
