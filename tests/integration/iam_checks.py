"""The IAM side of the permission checks: requests as the authorizations AWS performs for them,
and a small evaluator of identity policies.

:func:`authorizations` maps one request the recording proxy saw to what IAM checks for it (the
action, the resource ARN, the condition keys with static values, including the implicit ones:
``ecs:TagResource`` for tags on RunTask/RegisterTaskDefinition, ``iam:PassRole`` for the task
definition's roles, one item action per transaction item, ``events:PutEvents`` on each bus a
PutEvents' entries name, ``iam:PassRole`` of a schedule's execution role); :func:`allowed`
is IAM's verdict for a list of policy statements of ``infra/template.yaml`` (after the SAM
transform), with the template's intrinsics resolved to the values of the moto environment the
components run in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from dispatcher.local.provision import Names
from dispatcher.testing.proxy import RecordedCall

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's account
NAMES = Names()
CLUSTER_ARN = f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{NAMES.cluster}"
TABLE_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{NAMES.table}"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{NAMES.queue}"
# The queues of priorities high and low (HighJobQueue, LowJobQueue), created by the scenario.
HIGH_QUEUE = f"{NAMES.queue}-high"
LOW_QUEUE = f"{NAMES.queue}-low"
TASK_ROLE = f"arn:aws:iam::{ACCOUNT}:role/longjobs-WorkerTaskRole-abc"
EXECUTION_ROLE = f"arn:aws:iam::{ACCOUNT}:role/longjobs-WorkerExecutionRole-abc"
ECS_TASKS = "ecs-tasks.amazonaws.com"
WORKER_LOG_GROUP = "longjobs-WorkerLogGroup-abc"
# The bus the publisher sends to (the stack's EventBus parameter), created by the scenario.
EVENT_BUS = "longjobs-job-events"
# What local mode provisions for the recurring schedules: the schedule group (the stack's
# ScheduleGroup), the role the schedules send with (SchedulerRole) and their dead-letter queue
# (ScheduleDeadLetterQueue).
SCHEDULE_GROUP = NAMES.prefix
SCHEDULER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/longjobs-scheduler"
SCHEDULE_DLQ = "longjobs-schedules-dlq"
SCHEDULER = "scheduler.amazonaws.com"

# What the template's intrinsics resolve to in the moto environment the components run in.
# The stack's name (the alarms' names begin with it: the AlarmNamePrefix output).
STACK_NAME = "longjobs"
ALARM_PREFIX = f"{STACK_NAME}-longjobs-"
REFS = {"AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::Partition": "aws",
        "AWS::StackName": STACK_NAME,
        "TaskFamily": NAMES.family, "Cluster": NAMES.cluster, "JobTable": NAMES.table,
        "EventBus": EVENT_BUS, "ScheduleGroup": SCHEDULE_GROUP}
ATTRS = {"Cluster.Arn": CLUSTER_ARN, "JobTable.Arn": TABLE_ARN, "JobQueue.Arn": QUEUE_ARN,
         "HighJobQueue.Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{HIGH_QUEUE}",
         "LowJobQueue.Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{LOW_QUEUE}",
         "WorkerTaskRole.Arn": TASK_ROLE, "WorkerExecutionRole.Arn": EXECUTION_ROLE,
         "EventDeadLetterQueue.Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:longjobs-events-dlq",
         "JobDeadLetterQueue.Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{NAMES.dlq}",
         "WorkerLogGroup.Arn": f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{WORKER_LOG_GROUP}:*",
         "ScheduleGroup.Arn":
             f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule-group/{SCHEDULE_GROUP}",
         "SchedulerRole.Arn": SCHEDULER_ROLE,
         "ScheduleDeadLetterQueue.Arn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{SCHEDULE_DLQ}"}


# ------------------------------------------------------------------------------ the evaluator


@dataclass(frozen=True)
class Auth:
    """One authorization AWS performs for a request: action, resource, request context."""

    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()
    operation: str = ""

    def __str__(self) -> str:
        ctx = "".join(f" {k}={v}" for k, v in self.context)
        return f"{self.action} on {self.resource}{ctx} (from {self.operation})"


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def resolve(value: Any) -> Any:
    """Evaluate Ref / Fn::GetAtt / Fn::Sub with the fake deployed values above."""
    if isinstance(value, list):
        return [resolve(v) for v in value]
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return REFS[value["Ref"]]
    if "Fn::GetAtt" in value:
        return ATTRS[".".join(value["Fn::GetAtt"])]
    if "Fn::Sub" in value:
        text = value["Fn::Sub"]
        assert isinstance(text, str), f"only the one-argument Fn::Sub is supported: {value}"
        return re.sub(r"\$\{([^}]+)\}",
                      lambda m: ATTRS[m.group(1)] if "." in m.group(1) else REFS[m.group(1)],
                      text)
    return {k: resolve(v) for k, v in value.items()}


_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda actual, wanted: actual == wanted,
    "StringLike": fnmatchcase,
    "ArnEquals": lambda actual, wanted: actual == wanted,
    "ArnLike": fnmatchcase,
    "Bool": lambda actual, wanted: actual.lower() == str(wanted).lower(),
    # One value per key in the requests modelled here (a single item's partition key).
    "ForAllValues:StringEquals": lambda actual, wanted: actual == wanted,
}


def conditions_hold(condition: dict[str, Any], context: dict[str, str]) -> bool:
    """All operators and keys must hold; a key the request does not carry fails its test."""
    for operator, tests in resolve(condition).items():
        if operator not in _OPERATORS:
            raise AssertionError(f"the template uses condition operator {operator}, which "
                                 "this evaluator does not model: add it to _OPERATORS")
        for key, wanted in tests.items():
            actual = context.get(key)
            if actual is None or not any(_OPERATORS[operator](actual, w) for w in as_list(wanted)):
                return False
    return True


def matches(statement: dict[str, Any], auth: Auth, action: str | None = None) -> bool:
    actions = [action] if action else as_list(statement["Action"])
    return (any(fnmatchcase(auth.action.lower(), a.lower()) for a in actions)
            and any(fnmatchcase(auth.resource, r) for r in as_list(resolve(statement["Resource"])))
            and conditions_hold(statement.get("Condition", {}), dict(auth.context)))


def allowed(statements: list[dict[str, Any]], auth: Auth) -> bool:
    """IAM's verdict for identity policies alone: an explicit Deny wins, else any Allow."""
    if any(s["Effect"] == "Deny" and matches(s, auth) for s in statements):
        return False
    return any(s["Effect"] == "Allow" and matches(s, auth) for s in statements)


# ---------------------------------------------------------------------- requests -> IAM actions

# IAM authorizes each item of a transaction with the item's own action.
_ITEM_ACTIONS = {"Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem",
                 "ConditionCheck": "ConditionCheckItem", "Get": "GetItem"}
# Batch SQS operations are authorized as their single-message actions.
_SQS_ACTIONS = {"SendMessageBatch": "SendMessage", "DeleteMessageBatch": "DeleteMessage",
                "ChangeMessageVisibilityBatch": "ChangeMessageVisibility"}


def _queue_arn(target: dict[str, Any]) -> str:
    if "QueueUrl" in target:
        account, name = str(target["QueueUrl"]).rstrip("/").split("/")[-2:]
        return f"arn:aws:sqs:{REGION}:{account}:{name}"
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{target.get('QueueName', '*')}"


def _table_arn(table: str, index: str | None = None) -> str:
    arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"
    return f"{arn}/index/{index}" if index else arn


def _cluster(target: dict[str, Any]) -> tuple[str, str]:
    """(name, ARN) of the request's cluster."""
    cluster = str(target.get("cluster") or "default")
    name = cluster.rsplit("/", 1)[-1]
    return name, f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/{name}"


def _task_arn(task: str, cluster_name: str) -> str:
    return task if task.startswith("arn:") else (
        f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/{cluster_name}/{task}")


def _task_definition_arn(td: str) -> str:
    return td if td.startswith("arn:") else (
        f"arn:aws:ecs:{REGION}:{ACCOUNT}:task-definition/{td}")


def _pass_roles(roles: list[Any], operation: str) -> list[Auth]:
    return [Auth("iam:PassRole", str(r), (("iam:PassedToService", ECS_TASKS),), operation)
            for r in roles if r]


def authorizations(call: RecordedCall,
                   task_definition_roles: Callable[[str], list[str]]) -> list[Auth]:
    """The IAM authorizations AWS performs for one recorded request."""
    service, op = call.operation.split(".", 1)
    t = call.target
    if service == "dynamodb":
        if "TransactItems" in t:
            return [Auth(f"dynamodb:{_ITEM_ACTIONS[kind]}", _table_arn(table),
                         operation=call.operation) for kind, table in t["TransactItems"]]
        if "RequestItems" in t:
            return [Auth(f"dynamodb:{op}", _table_arn(table), operation=call.operation)
                    for table in t["RequestItems"]]
        leading = (("dynamodb:LeadingKeys", str(t["pk"])),) if t.get("pk") else ()
        return [Auth(f"dynamodb:{op}", _table_arn(t["TableName"], t.get("IndexName")),
                     leading, operation=call.operation)]
    if service == "sqs":
        return [Auth(f"sqs:{_SQS_ACTIONS.get(op, op)}", _queue_arn(t), operation=call.operation)]
    if service == "ecs":
        name, cluster_arn = _cluster(t)
        in_cluster = (("ecs:cluster", cluster_arn),)
        if op == "RunTask":
            td = str(t["taskDefinition"])
            auths = [Auth("ecs:RunTask", _task_definition_arn(td), in_cluster, call.operation)]
            if t.get("tags"):
                auths.append(Auth("ecs:TagResource", _task_arn("new-task", name),
                                  (("ecs:CreateAction", "RunTask"),), call.operation))
            overrides = t.get("overrides", {})
            roles = task_definition_roles(td)
            roles = [overrides.get("taskRoleArn") or roles[0],
                     overrides.get("executionRoleArn") or roles[1]]
            return auths + _pass_roles(roles, call.operation)
        if op in ("DescribeTasks", "StopTask"):
            tasks = t.get("tasks") or [t.get("task")]
            return [Auth(f"ecs:{op}", _task_arn(str(task), name), in_cluster, call.operation)
                    for task in tasks]
        if op == "RegisterTaskDefinition":
            auths = [Auth("ecs:RegisterTaskDefinition", "*", operation=call.operation)]
            if t.get("tags"):
                auths.append(Auth("ecs:TagResource",
                                  _task_definition_arn(f"{t['family']}:new-revision"),
                                  (("ecs:CreateAction", "RegisterTaskDefinition"),),
                                  call.operation))
            return auths + _pass_roles([t.get("taskRoleArn"), t.get("executionRoleArn")],
                                       call.operation)
        if op == "DescribeTaskDefinition":
            return [Auth("ecs:DescribeTaskDefinition", "*", operation=call.operation)]
    if service == "logs" and "logGroupName" in t:
        # A log group's actions are authorized on its ARN with the trailing ":*", the form
        # GetAtt returns ("Log group" in https://docs.aws.amazon.com/AmazonCloudWatch/latest/
        # logs/iam-access-control-overview-cwl.html; tagging actions aside).
        return [Auth(f"logs:{op}",
                     f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{t['logGroupName']}:*",
                     operation=call.operation)]
    if service == "events" and op == "PutEvents":
        # Authorized on each bus the entries name, as its ARN (resource type "event-bus":
        # arn:${Partition}:events:${Region}:${Account}:event-bus/${EventBusName}; PutEvents
        # requires it: https://docs.aws.amazon.com/service-authorization/latest/reference/
        # list_amazoneventbridge.html). An entry names a bus by name or ARN, or none: the
        # default bus (EventBusName in https://docs.aws.amazon.com/eventbridge/latest/
        # APIReference/API_PutEventsRequestEntry.html).
        return [Auth("events:PutEvents", bus if bus.startswith("arn:") else
                     f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{bus}",
                     operation=call.operation)
                for bus in t.get("EventBusNames", ["default"])]
    if service == "cloudwatch" and op == "DescribeAlarms":
        # Authorized on the alarms it names (resource type "alarm":
        # arn:${Partition}:cloudwatch:${Region}:${Account}:alarm:${AlarmName}, "Actions,
        # resources, and condition keys for Amazon CloudWatch",
        # https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazoncloudwatch.html):
        # those of its prefix, as a name pattern. Asked for with none, every alarm ("*").
        prefix = t.get("AlarmNamePrefix")
        return [Auth("cloudwatch:DescribeAlarms",
                     f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm:{prefix}*" if prefix else "*",
                     operation=call.operation)]
    if service == "scheduler" and op in _SCHEDULE_ACTIONS:
        return _schedule_authorizations(op, t, call.operation)
    # Anything else: the same-named action on every resource; only a "*" grant allows it.
    return [Auth(f"{service}:{op}", "*", operation=call.operation)]


# EventBridge Scheduler ("Actions, resources, and condition keys for Amazon EventBridge
# Scheduler", https://docs.aws.amazon.com/service-authorization/latest/reference/
# list_amazoneventbridgescheduler.html): a schedule's actions act on the schedule,
# arn:${Partition}:scheduler:${Region}:${Account}:schedule/${GroupName}/${ScheduleName} (a
# request without GroupName is in the group "default"); CreateSchedule and UpdateSchedule also
# authorize iam:PassRole of the target's execution role, with iam:PassedToService =
# scheduler.amazonaws.com. ListSchedules has no resource type ("*").
_SCHEDULE_ACTIONS = {"CreateSchedule", "GetSchedule", "UpdateSchedule", "DeleteSchedule",
                     "ListSchedules"}


def _schedule_authorizations(op: str, target: dict[str, Any], operation: str) -> list[Auth]:
    if op == "ListSchedules":
        return [Auth("scheduler:ListSchedules", "*", operation=operation)]
    group = target.get("GroupName") or "default"
    auths = [Auth(f"scheduler:{op}",
                  f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/{group}/{target['Name']}",
                  operation=operation)]
    if op in ("CreateSchedule", "UpdateSchedule"):
        role = target.get("Target", {}).get("RoleArn")
        if role:
            auths.append(Auth("iam:PassRole", str(role), (("iam:PassedToService", SCHEDULER),),
                              operation))
    return auths
