"""The stack's side of the recurring schedules (`longjobs schedules`), checked offline and on moto.

Each schedule is an EventBridge Scheduler schedule in the stack's ``ScheduleGroup``, whose
target sends the job message to the job queue of its priority with ``SchedulerRole`` and keeps
what it could not deliver in ``ScheduleDeadLetterQueue``. The template is read after the SAM
transform, as CloudFormation receives it, and its policies evaluated by
:mod:`tests.integration.iam_checks` (intrinsics resolved to what local mode provisions):

* the role can be assumed by EventBridge Scheduler for this stack's group only (the
  confused-deputy conditions), and may send to the three job queues and the schedule
  dead-letter queue and do nothing else;
* the operator's grants reach this group's schedules only, ``ListSchedules`` aside (it has no
  resource type), and pass that role, to EventBridge Scheduler only;
* the job queues' policies let the role send (a principal of this account) while they still
  keep out another account's;
* the schedule requests, as the recording proxy sees them on moto, map to authorizations the
  OperatorPolicy allows, and what Scheduler then does with the role (send a fire to its queue,
  or to the dead-letter queue) is what the role allows;
* the dead-letter queue is kept, encrypted, TLS-only and alarmed, the group's name fits any
  stack name, and the outputs give the CLI its three settings.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.aws.clients import endpoint_client
from dispatcher.settings import OnAws
from dispatcher.testing.moto import MotoEndpoint
from dispatcher.testing.proxy import AwsProxy, RecordedCall
from tests.integration.iam_checks import (
    ACCOUNT,
    ATTRS,
    EXECUTION_ROLE,
    QUEUE_ARN,
    REGION,
    SCHEDULE_GROUP,
    SCHEDULER,
    SCHEDULER_ROLE,
    TASK_ROLE,
    Auth,
    allowed,
    as_list,
    authorizations,
    conditions_hold,
    matches,
    resolve,
)
from tests.integration.test_infra import policy_statements, queue_policies
from tests.integration.test_operator_permissions import PRODUCER, send_denied
from tests.integration.test_template_permissions import STACK_128, Rendering

JOB_QUEUES = ("JobQueue", "HighJobQueue", "LowJobQueue")
SCHEDULE_DLQ_ARN = ATTRS["ScheduleDeadLetterQueue.Arn"]
# Where the role may send: each job queue, and the schedule dead-letter queue.
SENDS = {ATTRS[f"{q}.Arn"] for q in (*JOB_QUEUES, "ScheduleDeadLetterQueue")}
GROUP_ARN = ATTRS["ScheduleGroup.Arn"]
OTHER_ACCOUNT = "210987654321"
LABEL = "schedule-operator"


def schedule_arn(name: str, group: str = SCHEDULE_GROUP) -> str:
    return f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/{group}/{name}"


def role_statements(expanded: dict[str, Any]) -> list[dict[str, Any]]:
    return policy_statements(expanded, "SchedulerRole")


def operator_statements(expanded: dict[str, Any]) -> list[dict[str, Any]]:
    return list(expanded["Resources"]["OperatorPolicy"]["Properties"]["PolicyDocument"]
                ["Statement"])


def denied(statements: list[dict[str, Any]], auths: list[Auth]) -> list[str]:
    return sorted({str(a) for a in auths if not allowed(statements, a)})


def grants(statements: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Every (action, resource) the Allow statements name, intrinsics resolved."""
    return {(action, resource) for s in statements if s["Effect"] == "Allow"
            for action in as_list(s["Action"]) for resource in as_list(resolve(s["Resource"]))}


# ------------------------------------------------------------------------------ the role


def test_only_this_stacks_schedule_group_can_assume_the_scheduler_role(
        expanded: dict[str, Any]) -> None:
    """The confused-deputy conditions of the Scheduler guide: aws:SourceAccount, and
    aws:SourceArn = the schedule's group (what Scheduler sends since 2023-09-07). Evaluated:
    this group's schedules may assume it; another group's (the account's default one, where
    the tick's schedule is), another account's, or a request without the keys may not."""
    role = expanded["Resources"]["SchedulerRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Effect"] == "Allow"
    assert trust["Principal"] == {"Service": SCHEDULER}
    assert trust["Action"] == "sts:AssumeRole"
    condition = trust["Condition"]
    assert condition == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                         "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["ScheduleGroup", "Arn"]}}}
    ours = {"aws:SourceAccount": ACCOUNT, "aws:SourceArn": GROUP_ARN}
    assert conditions_hold(condition, ours)
    default_group = GROUP_ARN.replace(f"schedule-group/{SCHEDULE_GROUP}", "schedule-group/default")
    for other in ({**ours, "aws:SourceArn": default_group},
                  {**ours, "aws:SourceArn": f"{GROUP_ARN}-other"},
                  {"aws:SourceAccount": OTHER_ACCOUNT,
                   "aws:SourceArn": GROUP_ARN.replace(ACCOUNT, OTHER_ACCOUNT)},
                  {"aws:SourceAccount": ACCOUNT}, {}):
        assert not conditions_hold(condition, other), other


def test_the_scheduler_role_may_send_to_the_job_queues_and_its_dead_letter_queue_only(
        expanded: dict[str, Any]) -> None:
    """Exactly sqs:SendMessage on the three job queues and the schedule dead-letter queue: a
    statement removed, an action or a resource added or widened, a managed policy attached or a
    policy of its own elsewhere in the template changes this set or the checks below."""
    role = expanded["Resources"]["SchedulerRole"]["Properties"]
    assert "ManagedPolicyArns" not in role and "PermissionsBoundary" not in role
    attached = [name for name, r in expanded["Resources"].items()
                if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy")
                and {"Ref": "SchedulerRole"} in r["Properties"].get("Roles", [])]
    assert attached == []
    statements = role_statements(expanded)
    assert all(s["Effect"] == "Allow" and "Condition" not in s for s in statements)
    assert grants(statements) == {("sqs:SendMessage", arn) for arn in SENDS}
    # Evaluated: each send is allowed, nothing near it is.
    for arn in SENDS:
        assert allowed(statements, Auth("sqs:SendMessage", arn))
    for action, arn in [
            ("sqs:SendMessage", ATTRS["JobDeadLetterQueue.Arn"]),
            ("sqs:SendMessage", ATTRS["EventDeadLetterQueue.Arn"]),
            ("sqs:SendMessage", f"arn:aws:sqs:{REGION}:{ACCOUNT}:another-queue"),
            ("sqs:ReceiveMessage", QUEUE_ARN), ("sqs:DeleteMessage", SCHEDULE_DLQ_ARN),
            ("sqs:PurgeQueue", QUEUE_ARN), ("sqs:SetQueueAttributes", QUEUE_ARN),
            ("lambda:InvokeFunction", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:x"),
            ("iam:PassRole", TASK_ROLE)]:
        assert not allowed(statements, Auth(action, arn)), (action, arn)


@pytest.mark.parametrize("sid", ["SendFiresToJobQueues", "KeepUndeliveredFires"])
def test_each_statement_of_the_scheduler_role_is_needed(expanded: dict[str, Any],
                                                        sid: str) -> None:
    statements = role_statements(expanded)
    assert sid in {s.get("Sid") for s in statements}
    rest = [s for s in statements if s.get("Sid") != sid]
    assert denied(rest, [Auth("sqs:SendMessage", arn) for arn in SENDS]), sid


# ------------------------------------------------------------------------------ the operator


def scheduler_grants(expanded: dict[str, Any]) -> list[dict[str, Any]]:
    """The OperatorPolicy's statements that name a scheduler action or iam:PassRole."""
    return [s for s in operator_statements(expanded)
            if any(a.startswith(("scheduler:", "iam:")) for a in as_list(s["Action"]))]


def test_the_operator_manages_the_schedules_of_this_group_only(expanded: dict[str, Any]) -> None:
    statements = operator_statements(expanded)
    actions = ("CreateSchedule", "GetSchedule", "UpdateSchedule", "DeleteSchedule")
    assert {a for s in scheduler_grants(expanded) for a in as_list(s["Action"])} == {
        *(f"scheduler:{a}" for a in actions), "scheduler:ListSchedules", "iam:PassRole"}
    for action in actions:
        assert allowed(statements, Auth(f"scheduler:{action}", schedule_arn("nightly")))
        for elsewhere in (schedule_arn("nightly", "default"),
                          schedule_arn("nightly", f"{SCHEDULE_GROUP}-other"),
                          schedule_arn("nightly").replace(ACCOUNT, OTHER_ACCOUNT)):
            assert not allowed(statements, Auth(f"scheduler:{action}", elsewhere)), elsewhere
    # ListSchedules has no resource type: it is authorized on "*" (and only "*" allows it).
    (listing,) = [s for s in statements if "scheduler:ListSchedules" in as_list(s["Action"])]
    assert as_list(listing["Action"]) == ["scheduler:ListSchedules"]
    assert listing["Resource"] == "*" and "Condition" not in listing
    # Nothing of the groups themselves, nor tags, nor another service's schedules.
    for action in ("CreateScheduleGroup", "DeleteScheduleGroup", "TagResource",
                   "UntagResource", "ListScheduleGroups"):
        assert not allowed(statements, Auth(f"scheduler:{action}", GROUP_ARN))
        assert not allowed(statements, Auth(f"scheduler:{action}", "*"))


def test_the_operator_passes_the_scheduler_role_to_eventbridge_scheduler_only(
        expanded: dict[str, Any]) -> None:
    statements = operator_statements(expanded)
    (passing,) = [s for s in statements if "iam:PassRole" in as_list(s["Action"])]
    assert passing["Resource"] == {"Fn::GetAtt": ["SchedulerRole", "Arn"]}
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": SCHEDULER}}

    def pass_role(role: str, service: str | None) -> Auth:
        context = (("iam:PassedToService", service),) if service else ()
        return Auth("iam:PassRole", role, context)

    assert allowed(statements, pass_role(SCHEDULER_ROLE, SCHEDULER))
    for auth in (pass_role(SCHEDULER_ROLE, "ecs-tasks.amazonaws.com"),
                 pass_role(SCHEDULER_ROLE, "lambda.amazonaws.com"),
                 pass_role(SCHEDULER_ROLE, None),
                 pass_role(TASK_ROLE, SCHEDULER), pass_role(EXECUTION_ROLE, SCHEDULER),
                 pass_role(f"arn:aws:iam::{ACCOUNT}:role/admin", SCHEDULER)):
        assert not allowed(statements, auth), auth


# ------------------------------------------------------------------------------ queue policies


@pytest.mark.parametrize("queue_policy", ["JobQueuePolicy", "HighJobQueuePolicy",
                                          "LowJobQueuePolicy", "ScheduleDeadLetterQueuePolicy"])
def test_the_queue_policies_let_the_scheduler_role_send(expanded: dict[str, Any],
                                                        queue_policy: str) -> None:
    """The job queues deny SendMessage to other accounts' principals that are not listed
    producers; the scheduler role is of this account (Scheduler calls SendMessage with a session
    of it), so no Deny applies and its identity policy is the grant. A role of that name in
    another account is still denied by the job queues."""
    role = f"arn:aws:iam::{ACCOUNT}:role/longjobs-prod-SchedulerRole-AbCdEf012345"
    assert not send_denied(expanded, queue_policy, role)
    if queue_policy != "ScheduleDeadLetterQueuePolicy":
        assert not send_denied(expanded, queue_policy, PRODUCER)
        assert send_denied(expanded, queue_policy, role.replace(ACCOUNT, OTHER_ACCOUNT))


# ------------------------------------------------------------------------------ recorded calls


@pytest.fixture(scope="module")
def recorded(moto_server: MotoEndpoint, proxy: AwsProxy) -> list[RecordedCall]:
    """The schedule requests the CLI's adapter (dispatcher/aws/scheduler.py) sends, one
    schedule per priority (each targets its job queue), sent through the recording proxy to
    moto: create, show, update, list, delete."""
    moto_server.reset()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                     "AWS_DEFAULT_REGION": REGION}.items():
            mp.setenv(k, v)
        scheduler = endpoint_client("scheduler", proxy.url, REGION)
        scheduler.create_schedule_group(Name=SCHEDULE_GROUP)
        proxy.clear_recorded()
        with proxy.recording(LABEL):
            for queue in JOB_QUEUES:
                name = f"nightly-{queue}"
                request = {"Name": name, "GroupName": SCHEDULE_GROUP,
                           "ScheduleExpression": "cron(0 3 * * ? *)",
                           "ScheduleExpressionTimezone": "UTC", "State": "ENABLED",
                           "FlexibleTimeWindow": {"Mode": "OFF"},
                           "Target": {"Arn": ATTRS[f"{queue}.Arn"], "RoleArn": SCHEDULER_ROLE,
                                      "Input": '{"job_id": "x-<aws.scheduler.scheduled-time>"}',
                                      "RetryPolicy": {"MaximumEventAgeInSeconds": 86400,
                                                      "MaximumRetryAttempts": 185},
                                      "DeadLetterConfig": {"Arn": SCHEDULE_DLQ_ARN}}}
                scheduler.create_schedule(**request)
                scheduler.get_schedule(Name=name, GroupName=SCHEDULE_GROUP)
                scheduler.update_schedule(**{**request, "State": "DISABLED"})
            scheduler.list_schedules(GroupName=SCHEDULE_GROUP)
            for queue in JOB_QUEUES:
                scheduler.delete_schedule(Name=f"nightly-{queue}", GroupName=SCHEDULE_GROUP)
        calls = [c for c in proxy.recorded() if c.component == LABEL]
        proxy.clear_recorded()
    return calls


def operator_auths(recorded: list[RecordedCall]) -> list[Auth]:
    def no_task_definitions(td: str) -> list[str]:
        raise AssertionError(f"a schedule request ran a task definition: {td}")

    return [a for c in recorded for a in authorizations(c, no_task_definitions)]


def test_the_proxy_records_what_iam_authorizes_schedule_requests_on(
        recorded: list[RecordedCall]) -> None:
    """Scheduler is a REST service: the proxy reads the operation from the method and path and
    keeps the schedule's name, group and target (ARN, role, dead-letter queue)."""
    assert [c.operation for c in recorded] == [
        *(op for _ in JOB_QUEUES for op in ("scheduler.CreateSchedule", "scheduler.GetSchedule",
                                             "scheduler.UpdateSchedule")),
        "scheduler.ListSchedules", *["scheduler.DeleteSchedule"] * len(JOB_QUEUES)]
    create = recorded[0]
    assert create.target == {
        "Name": "nightly-JobQueue", "GroupName": SCHEDULE_GROUP,
        "Target": {"Arn": QUEUE_ARN, "RoleArn": SCHEDULER_ROLE,
                   "DeadLetterConfig": {"Arn": SCHEDULE_DLQ_ARN}}}
    assert recorded[1].target == {"Name": "nightly-JobQueue", "GroupName": SCHEDULE_GROUP}
    assert recorded[9].target == {"GroupName": SCHEDULE_GROUP}
    assert {str(a) for a in operator_auths(recorded[:1])} == {
        str(Auth("scheduler:CreateSchedule", schedule_arn("nightly-JobQueue"),
                 operation="scheduler.CreateSchedule")),
        str(Auth("iam:PassRole", SCHEDULER_ROLE, (("iam:PassedToService", SCHEDULER),),
                 "scheduler.CreateSchedule"))}


def test_the_operator_policy_allows_every_schedule_request(
        expanded: dict[str, Any], recorded: list[RecordedCall]) -> None:
    """Every authorization of the recorded requests is allowed, and each scheduler grant of the
    policy is used by one; the same requests in another group, or passing another role, are
    denied."""
    statements = operator_statements(expanded)
    auths = operator_auths(recorded)
    assert denied(statements, auths) == []
    for statement in scheduler_grants(expanded):
        for action in as_list(statement["Action"]):
            assert any(matches(statement, a, action) for a in auths), (statement["Sid"], action)
    moved = [Auth(a.action, a.resource.replace(f"/{SCHEDULE_GROUP}/", "/default/"), a.context,
                  a.operation) for a in auths if a.action.startswith("scheduler:")
             and a.action != "scheduler:ListSchedules"]
    assert moved and not any(allowed(statements, a) for a in moved)
    other_role = [Auth(a.action, TASK_ROLE, a.context, a.operation) for a in auths
                  if a.action == "iam:PassRole"]
    assert other_role and not any(allowed(statements, a) for a in other_role)


def test_what_scheduler_does_with_the_role_is_what_the_role_allows(
        expanded: dict[str, Any], recorded: list[RecordedCall]) -> None:
    """A fire is SendMessage on the schedule's target queue and, given up on, SendMessage on
    its dead-letter queue, with the schedule's role (AWS does these, no recorded call shows
    them): each created schedule's are allowed, and together they use every grant of the
    role."""
    sends = [Auth("sqs:SendMessage", str(arn), operation=f"EventBridge Scheduler for {c.target}")
             for c in recorded if c.operation == "scheduler.CreateSchedule"
             for arn in (c.target["Target"]["Arn"], c.target["Target"]["DeadLetterConfig"]["Arn"])]
    assert all(c.target["Target"]["RoleArn"] == SCHEDULER_ROLE for c in recorded
               if "Target" in c.target)
    statements = role_statements(expanded)
    assert denied(statements, sends) == []
    assert {a.resource for a in sends} == SENDS == {r for _, r in grants(statements)}


# ------------------------------------------------------------------------------ the rest


def test_the_schedule_dead_letter_queue_is_kept_encrypted_tls_only_and_alarmed(
        template: dict[str, Any]) -> None:
    """Like the other dead-letter queues: retained with the stack, SQS managed encryption, 14
    days, a standard queue (Scheduler takes no FIFO dead-letter queue), TLS only, and an alarm
    on its first message that notifies the topic and shows on the dashboard."""
    queue = template["Resources"]["ScheduleDeadLetterQueue"]
    assert queue["DeletionPolicy"] == queue["UpdateReplacePolicy"] == "Retain"
    assert queue["Properties"] == {"SqsManagedSseEnabled": True,
                                   "MessageRetentionPeriod": 1209600}
    (tls,) = [s for s in queue_policies(template, "ScheduleDeadLetterQueue")
              if s["Effect"] == "Deny"]
    assert tls["Principal"] == "*" and tls["Action"] == "sqs:*"
    assert tls["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert tls["Resource"] == {"Fn::GetAtt": ["ScheduleDeadLetterQueue", "Arn"]}
    alarms = [r["Properties"] for r in template["Resources"].values()
              if r["Type"] == "AWS::CloudWatch::Alarm"
              and r["Properties"].get("Dimensions") == [
                  {"Name": "QueueName",
                   "Value": {"Fn::GetAtt": ["ScheduleDeadLetterQueue", "QueueName"]}}]]
    (alarm,) = alarms
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS",
                                                         "ApproximateNumberOfMessagesVisible")
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (0, "GreaterThanThreshold")
    body = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    assert "${ScheduleDeadLetterAlarm.Arn}" in body


def test_the_schedule_group_name_fits_any_stack_name(expanded: dict[str, Any]) -> None:
    """A schedule group's name is 1-64 characters of [0-9a-zA-Z-_.] and a stack's up to 128:
    the template leaves the name to CloudFormation, or what it gives fits for the longest stack
    name."""
    (name,) = [n for n, r in expanded["Resources"].items()
               if r["Type"] == "AWS::Scheduler::ScheduleGroup"]
    assert name == "ScheduleGroup"
    properties = copy.deepcopy(expanded["Resources"][name].get("Properties", {}))
    given = Rendering(expanded, {}, stack_name=STACK_128).value(properties).get("Name")
    assert given is None or (len(given) <= 64 and re.fullmatch(r"[0-9a-zA-Z-_.]+", given)), given


def test_the_outputs_give_the_cli_its_schedule_settings(expanded: dict[str, Any]) -> None:
    """Each client setting the stack provides that names its output has that output, and the
    three schedule settings' outputs are the group's name (the adapter's GroupName), the role's
    ARN and the dead-letter queue's ARN (a Target's RoleArn and DeadLetterConfig.Arn)."""
    outputs = expanded["Outputs"]
    named = {s.name: m.group(1) for s in settings.SETTINGS
             if s.on_aws is OnAws.STACK and "client" in s.roles
             and (m := re.search(r"the stack's (\w+) output", s.meaning))}
    assert {"LONGJOBS_SCHEDULE_GROUP", "LONGJOBS_SCHEDULER_ROLE_ARN",
            "LONGJOBS_SCHEDULE_DLQ_ARN"} <= set(named)
    assert [f"{v}: {o}" for v, o in named.items() if o not in outputs] == []
    wanted = {"ScheduleGroupName": {"Ref": "ScheduleGroup"},
              "SchedulerRoleArn": {"Fn::GetAtt": ["SchedulerRole", "Arn"]},
              "ScheduleDeadLetterQueueArn": {"Fn::GetAtt": ["ScheduleDeadLetterQueue", "Arn"]}}
    assert {k: outputs[k]["Value"] for k in wanted} == wanted
    for variable, output in named.items():
        if output in wanted:
            assert outputs[output]["Description"].startswith(f"{variable} - "), output
