"""Create the queue, dead-letter queue, table, cluster and task definition on an endpoint.

Local mode, tests and benchmarks create the same resources the SAM template does, with the same
key schema (from the pynamodb model) and the same names, so local runs exercise the real shapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dispatcher.aws.clients import endpoint_client
from dispatcher.aws.dynamodb.model import create_table

DEFAULT_REGION = "us-east-1"
# The job queue's shape, as infra/template.yaml declares it (a test keeps the two equal).
QUEUE_ATTRIBUTES = {
    "VisibilityTimeout": "300",  # longer than a tick: no redelivery while a tick records
    "MessageRetentionPeriod": "1209600",  # 14 days
    "MaximumMessageSize": "1048576",  # 1 MiB
}
DLQ_ATTRIBUTES = {"MessageRetentionPeriod": "1209600"}
MAX_RECEIVE_COUNT = 5


@dataclass(frozen=True)
class Names:
    prefix: str = "longjobs"
    family: str = "longjobs-worker"
    container: str = "worker"

    @property
    def queue(self) -> str:
        return f"{self.prefix}-jobs"

    @property
    def high_queue(self) -> str:
        return f"{self.prefix}-jobs-high"

    @property
    def low_queue(self) -> str:
        return f"{self.prefix}-jobs-low"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}-jobs-dlq"

    @property
    def schedule_dlq(self) -> str:
        return f"{self.prefix}-schedules-dlq"

    @property
    def schedule_group(self) -> str:
        return self.prefix

    @property
    def scheduler_role(self) -> str:
        return f"{self.prefix}-scheduler"

    @property
    def table(self) -> str:
        return f"{self.prefix}-jobs"

    @property
    def cluster(self) -> str:
        return f"{self.prefix}-cluster"


def register_task_definition(ecs: Any, names: Names, image: str = "longjobs-worker:local",
                             env: dict[str, str] | None = None) -> str:
    resp = ecs.register_task_definition(
        family=names.family, networkMode="awsvpc", requiresCompatibilities=["FARGATE"],
        cpu="256", memory="512",
        containerDefinitions=[{
            "name": names.container, "image": image, "essential": True,
            "command": ["python", "-m", "job_runner"], "stopTimeout": 120,
            # moto needs a container-level memory (real Fargate accepts task-level only).
            "memory": 512,
            "environment": [{"name": k, "value": v} for k, v in sorted((env or {}).items())],
        }])
    return str(resp["taskDefinition"]["taskDefinitionArn"])


def provision(endpoint: str | None, names: Names | None = None,
              region: str = DEFAULT_REGION, *, sqs_endpoint: str | None = None) -> dict[str, str]:
    """Create everything; return the LONGJOBS_* environment a dispatcher and clients need.

    The queues go to ``sqs_endpoint`` when one is given (an emulator for deep queues, which
    clients then reach through ``AWS_ENDPOINT_URL_SQS``), everything else to ``endpoint``.
    """
    names = names or Names()
    sqs = endpoint_client("sqs", sqs_endpoint or endpoint, region)
    dlq_url = sqs.create_queue(QueueName=names.dlq, Attributes=DLQ_ATTRIBUTES)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    # One queue per priority, all redriving to the one dead-letter queue (as the template).
    queue_url, high_url, low_url = (sqs.create_queue(QueueName=name, Attributes={
        **QUEUE_ATTRIBUTES,
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn,
                                     "maxReceiveCount": str(MAX_RECEIVE_COUNT)}),
    })["QueueUrl"] for name in (names.queue, names.high_queue, names.low_queue))

    create_table(names.table, region, endpoint)
    # The schedule group, the queue of fires Scheduler could not deliver and the role it
    # sends with (the emulator checks no role; the ARN is the shape AWS's takes).
    schedule_dlq = sqs.create_queue(QueueName=names.schedule_dlq,
                                    Attributes=DLQ_ATTRIBUTES)["QueueUrl"]
    schedule_dlq_arn = sqs.get_queue_attributes(QueueUrl=schedule_dlq, AttributeNames=[
        "QueueArn"])["Attributes"]["QueueArn"]
    endpoint_client("scheduler", endpoint, region).create_schedule_group(
        Name=names.schedule_group)
    account = schedule_dlq_arn.split(":")[4]

    ecs = endpoint_client("ecs", endpoint, region)
    ecs.create_cluster(clusterName=names.cluster,
                       capacityProviders=["FARGATE", "FARGATE_SPOT"])
    env = {"LONGJOBS_TABLE": names.table}
    register_task_definition(ecs, names, env=env)
    ec2 = endpoint_client("ec2", endpoint, region)
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    return {
        "LONGJOBS_QUEUE_URL": queue_url,
        "LONGJOBS_HIGH_QUEUE_URL": high_url,
        "LONGJOBS_LOW_QUEUE_URL": low_url,
        "LONGJOBS_DLQ_URL": dlq_url,
        "LONGJOBS_TABLE": names.table,
        "LONGJOBS_CLUSTER": names.cluster,
        "LONGJOBS_TASK_FAMILY": names.family,
        "LONGJOBS_CONTAINER": names.container,
        "LONGJOBS_SUBNETS": subnet,
        "LONGJOBS_SECURITY_GROUPS": "sg-00000000000000000",
        "LONGJOBS_SCHEDULE_GROUP": names.schedule_group,
        "LONGJOBS_SCHEDULER_ROLE_ARN": f"arn:aws:iam::{account}:role/{names.scheduler_role}",
        "LONGJOBS_SCHEDULE_DLQ_ARN": schedule_dlq_arn,
    }
