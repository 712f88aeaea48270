"""What AWS does with a function's role on the function's behalf: grants no call of ours uses.

Some of a function's grants are used by AWS, not by the function's code, so no recorded call
shows them: Lambda reads a stream for the function's event source mapping, and sends what the
mapping or an asynchronous invocation gives up on to its destination or dead-letter queue, each
with the function's execution role. Each such use is listed here with the AWS document that
says so, and with what in ``infra/template.yaml`` makes AWS do it (the mapping's stream, its
on-failure destination, the function's dead-letter queue): the permission tests check these
authorizations beside the recorded ones (they must be allowed, and they exercise their grants),
and only while the template still configures what makes AWS perform them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.integration.iam_checks import ATTRS, TABLE_ARN, Auth

# A stream's ARN: the table's, then /stream/ and the stream's label (a timestamp).
STREAM_ARN = f"{TABLE_ARN}/stream/2026-01-01T00:00:00.000"
EVENT_DLQ_ARN = ATTRS["EventDeadLetterQueue.Arn"]

# The execution role reads the stream for the event source mapping.
READS_STREAM = ("https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/"
                "iam-policy-example-lamda-process-dynamodb-streams.html",)
# "Your execution role must have permissions for the destination: For SQS destinations:
# sqs:SendMessage".
MAPPING_ON_FAILURE = ("https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html",)
# SAM adds sqs:SendMessage on the dead-letter queue to the execution role "to give Lambda service
# access to the resource"; the Lambda guide's dead-letter queues, for what Lambda sends there.
ASYNC_DEAD_LETTERS = ("https://docs.aws.amazon.com/serverless-application-model/latest/"
                      "developerguide/sam-property-function-deadletterqueue.html",
                      "https://docs.aws.amazon.com/lambda/latest/dg/"
                      "invocation-async-retain-records.html#invocation-dlq")


@dataclass(frozen=True)
class OnBehalf:
    """One authorization AWS performs with ``component``'s role, and why."""

    component: str  # a label of the permission tests' components
    action: str
    resource: str  # as AWS names it in the request
    by: str  # what in AWS performs it
    docs: tuple[str, ...]  # the AWS documents that say so
    # What in the template makes AWS perform it: (resource, property path, the value there).
    configured_by: tuple[str, str, Any]

    def auth(self) -> Auth:
        return Auth(self.action, self.resource, operation=f"AWS for the function: {self.by}")


_STREAM = "the event source mapping reading the job table's stream"


def _stream_mapping(component: str, mapping: str) -> list[OnBehalf]:
    """What a function's mapping of the job table's stream does with its role: reads the
    stream, and sends the batches it gives up on to its on-failure destination."""
    return [
        *(OnBehalf(component, action, STREAM_ARN, _STREAM, READS_STREAM,
                   (mapping, "EventSourceArn", {"Fn::GetAtt": ["JobTable", "StreamArn"]}))
          for action in ("dynamodb:DescribeStream", "dynamodb:GetRecords",
                         "dynamodb:GetShardIterator", "dynamodb:ListStreams")),
        OnBehalf(component, "sqs:SendMessage", EVENT_DLQ_ARN,
                 "the event source mapping sending a batch it gave up on to its destination",
                 MAPPING_ON_FAILURE,
                 (mapping, "DestinationConfig.OnFailure.Destination",
                  {"Fn::GetAtt": ["EventDeadLetterQueue", "Arn"]})),
    ]


ON_BEHALF = [
    *_stream_mapping("dependents", "DependentsStreamMapping"),
    *_stream_mapping("job-events", "JobEventsStreamMapping"),
    OnBehalf("task-event", "sqs:SendMessage", EVENT_DLQ_ARN,
             "Lambda sending an asynchronous event it gave up on to the dead-letter queue",
             ASYNC_DEAD_LETTERS,
             ("TaskEventFunction", "DeadLetterQueue.TargetArn",
              {"Fn::GetAtt": ["EventDeadLetterQueue", "Arn"]})),
]
# The function each mapping invokes (whose role AWS uses for it).
MAPPED_FUNCTIONS = {"DependentsStreamMapping": "DependentsFunction",
                    "JobEventsStreamMapping": "JobEventsFunction"}


def on_behalf(component: str) -> list[Auth]:
    """What AWS performs with ``component``'s role."""
    return [o.auth() for o in ON_BEHALF if o.component == component]


def configured(template: dict[str, Any], entry: OnBehalf, function: str) -> bool:
    """Whether ``template`` makes AWS perform ``entry`` with ``function``'s role."""
    name, path, wanted = entry.configured_by
    resource = template["Resources"].get(name)
    if resource is None:
        return False
    if MAPPED_FUNCTIONS.get(name, name) != function or (
            name in MAPPED_FUNCTIONS
            and resource["Properties"].get("FunctionName") != {"Ref": function}):
        return False
    value: Any = resource["Properties"]
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return bool(value == wanted)
