"""What an AWS request is, read from its HTTP form: the operation it calls, the region and
service it is signed for, and the fields that name what it acts on. The proxy
(:mod:`dispatcher.testing.proxy`) counts and records calls by these."""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from dispatcher.testing.item_changes import ItemChange, ReadSizes

_TARGET_SERVICES = {
    "DynamoDB_20120810": "dynamodb",
    "DynamoDBStreams_20120810": "dynamodbstreams",
    "AmazonSQS": "sqs",
    "AmazonEC2ContainerServiceV20141113": "ecs",
    "AWSEvents": "events",
}
_SCOPE = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/([^/,]+)/aws4_request")
# EventBridge Scheduler's REST paths: /schedules[/{Name}], /schedule-groups[/{Name}].
_SCHEDULE_PATH = re.compile(r"/schedules(?:/([^/]+))?/?")
_SCHEDULE_GROUP_PATH = re.compile(r"/schedule-groups(?:/([^/]+))?/?")
_SCHEDULER_VERBS = {"POST": "Create", "PUT": "Update", "GET": "Get", "DELETE": "Delete"}

# Request fields that name what a call acts on (kept by the proxy's recording); payloads,
# message bodies and item values are dropped so a recording stays small.
_TARGET_FIELDS = frozenset({
    "QueueUrl", "QueueName", "TableName", "IndexName",
    "cluster", "taskDefinition", "task", "tasks", "family", "taskRoleArn", "executionRoleArn",
    "resourceArn", "include", "logGroupName",
})


@dataclass(frozen=True)
class RecordedCall:
    """One AWS request made while a component label was set (see
    :meth:`dispatcher.testing.proxy.AwsProxy.recording`).

    ``target`` holds the request fields that name resources (queue URL, table and index names,
    cluster, task definition, task ARNs, roles, log group), plus: ``TransactItems`` as ``[kind,
    table]`` pairs (``Put``, ``Update``, ``Delete``, ``ConditionCheck``, ``Get``),
    ``RequestItems`` as the list of table names, ``pk`` the partition key of a single-item
    request, ``tags`` as the number of tags sent, the role ARNs of ``overrides``, and
    ``EventBusNames`` the buses (names or ARNs) a PutEvents' entries name; for EventBridge
    Scheduler's schedule requests, ``Name`` (from the path), ``GroupName`` (``None``: the
    default group) and the ``Target``'s ``Arn``, ``RoleArn`` and ``DeadLetterConfig``. With the
    proxy's ``capture_items``, a DynamoDB write keeps each item it named before and after
    (``items``) and a read the sizes of what it returned (``read``), for the capacity model
    (:mod:`dispatcher.testing.capacity`).
    """

    component: str
    operation: str  # service.Operation, as counted
    target: dict[str, Any]
    items: tuple[ItemChange, ...] = ()
    read: ReadSizes | None = None


def request_target(body: bytes, path: str, content_type: str) -> dict[str, Any]:
    """The resource-naming fields of a request (JSON body, or query/form parameters)."""
    params: dict[str, Any] = {}
    if "x-www-form-urlencoded" in content_type or not body:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
        if body:
            query.update(urllib.parse.parse_qs(body.decode("utf-8", "replace")))
        params = {k: v[0] for k, v in query.items()}
    else:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        params = parsed if isinstance(parsed, dict) else {}
    target = {k: v for k, v in params.items() if k in _TARGET_FIELDS}
    items = params.get("TransactItems")
    if isinstance(items, list):
        target["TransactItems"] = [[kind, spec.get("TableName")] for item in items
                                   if isinstance(item, dict)
                                   for kind, spec in item.items() if isinstance(spec, dict)]
    requests = params.get("RequestItems")
    if isinstance(requests, dict):
        target["RequestItems"] = sorted(requests)
    # A single-item request's partition key (the job table's hash key is ``pk``): what IAM's
    # ``dynamodb:LeadingKeys`` condition key compares.
    item = params.get("Key") or params.get("Item")
    if isinstance(item, dict) and isinstance(item.get("pk"), dict):
        target["pk"] = item["pk"].get("S")
    tags = params.get("tags")
    if isinstance(tags, list):
        target["tags"] = len(tags)
    overrides = params.get("overrides")
    if isinstance(overrides, dict):
        target["overrides"] = {k: v for k, v in overrides.items()
                               if k in ("taskRoleArn", "executionRoleArn")}
    # The buses PutEvents' entries name (each entry names its own; one without a name goes to
    # the account's default bus).
    entries = params.get("Entries")
    if isinstance(entries, list):
        target["EventBusNames"] = sorted({str(e.get("EventBusName") or "default")
                                          for e in entries if isinstance(e, dict)})
    target.update(_schedule_target(path, params))
    return target


def _schedule_target(path: str, params: dict[str, Any]) -> dict[str, Any]:
    """What an EventBridge Scheduler schedule request names (REST: the schedule's name is in
    the path; its group in the body, or the query of GetSchedule and DeleteSchedule
    (``groupName``) and of ListSchedules (``ScheduleGroup``); its target's ARN, role and
    dead-letter queue in the body of CreateSchedule and UpdateSchedule)."""
    match = _SCHEDULE_PATH.fullmatch(urllib.parse.urlsplit(path).path)
    if match is None:
        return {}
    out: dict[str, Any] = {"GroupName": params.get("GroupName") or params.get("groupName")
                           or params.get("ScheduleGroup")}
    if match.group(1):
        out["Name"] = urllib.parse.unquote(match.group(1))
    schedule_target = params.get("Target")
    if isinstance(schedule_target, dict):
        out["Target"] = {k: schedule_target[k] for k in ("Arn", "RoleArn", "DeadLetterConfig")
                         if k in schedule_target}
    return out


def request_scope(headers: list[tuple[str, str]]) -> tuple[str | None, str | None]:
    """(region, service) from the SigV4 credential scope, if the request is signed."""
    for name, value in headers:
        if name.lower() == "authorization" and (match := _SCOPE.search(value)):
            return match.group(1), match.group(2)
    return None, None


def request_operation(path: str, headers: list[tuple[str, str]], body: bytes,
                      method: str = "") -> str | None:
    """``service.Operation`` from X-Amz-Target (JSON protocols) or ``Action=`` (query), or,
    for EventBridge Scheduler (REST), from ``method`` and the path."""
    lowered = {name.lower(): value for name, value in headers}
    service = request_scope(headers)[1]
    target = lowered.get("x-amz-target")
    if target and "." in target:
        prefix, _, action = target.rpartition(".")
        return f"{_TARGET_SERVICES.get(prefix) or service or prefix.lower()}.{action}"
    params = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    if "x-www-form-urlencoded" in lowered.get("content-type", ""):
        params.update(urllib.parse.parse_qs(body.decode("utf-8", "replace")))
    if actions := params.get("Action"):
        return f"{service or 'unknown'}.{actions[0]}"
    if service == "scheduler":
        return _scheduler_operation(method, urllib.parse.urlsplit(path).path)
    return None


def _scheduler_operation(method: str, path: str) -> str | None:
    """EventBridge Scheduler speaks REST (rest-json): the operation is the method on the
    path (https://docs.aws.amazon.com/scheduler/latest/APIReference/API_Operations.html)."""
    for pattern, kind in ((_SCHEDULE_PATH, "Schedule"), (_SCHEDULE_GROUP_PATH, "ScheduleGroup")):
        match = pattern.fullmatch(path)
        if match is None:
            continue
        if not match.group(1):
            return f"scheduler.List{kind}s" if method == "GET" else None
        verb = _SCHEDULER_VERBS.get(method)
        if verb is None or (verb == "Update" and kind == "ScheduleGroup"):
            return None
        return f"scheduler.{verb}{kind}"
    return None
