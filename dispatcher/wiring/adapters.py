"""The AWS adapters the settings name, built in one place for every caller.

The Lambda handlers (through :func:`dispatcher.wiring.pipeline.for_aws`), the producer client,
``top``, the dry run, ``deploy`` and the job runner all get their queues, table and ECS clients
here, so the rules (which URL serves which priority, which endpoint and retry policy a client
has) exist once. This module builds no stages: the job runner imports it without the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dispatcher.aws import clients, job_stream
from dispatcher.aws.cloudwatch_logs import CloudWatchJobLogs
from dispatcher.aws.dynamodb import DynamoTable
from dispatcher.aws.ecs import CapacityShare, EcsLauncher, EcsTarget
from dispatcher.aws.ecs_revisions import EcsTaskDefinitions
from dispatcher.aws.eventbridge import EventBridgeSink
from dispatcher.aws.scheduler import EventBridgeScheduleBook
from dispatcher.aws.sqs import SqsQueue
from dispatcher.domain.errors import ConfigError
from dispatcher.domain.job_events import TableChange
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.files.task_output import TaskOutputLogs
from dispatcher.ports.event_sink import EventSink
from dispatcher.ports.job_logs import JobLogs
from dispatcher.ports.launcher import Launcher
from dispatcher.ports.queue import Queue
from dispatcher.ports.schedule_book import ScheduleBook
from dispatcher.ports.task_definitions import TaskDefinitions
from dispatcher.settings import Config
from dispatcher.store import Store
from dispatcher.store.base import DEFAULT_RETENTION_DAYS

if TYPE_CHECKING:
    from dispatcher.ports.alarm_board import AlarmBoard


def client(service: str, cfg: Config, *, retries: int = 4) -> Any:
    """A boto3 client on the settings' endpoint and region (``AWS_ENDPOINT_URL``,
    ``AWS_REGION``); ``retries`` counts every attempt of a call, the first included."""
    return clients.endpoint_client(service, cfg.endpoint_url, cfg.region, retries=retries)


def open_store(table: str, region: str | None = None, host: str | None = None,
               clock: Callable[[], float] | None = None, *,
               retention_days: float = DEFAULT_RETENTION_DAYS) -> Store:
    """The full Store on a DynamoDB table (``host``: an endpoint URL, e.g. moto's)."""
    return Store(DynamoTable(table, region, host), clock, retention_days=retention_days)


def store(cfg: Config) -> Store:
    """The job table ``LONGJOBS_TABLE`` names, with every role's policy."""
    return open_store(cfg.table, region=cfg.region, host=cfg.endpoint_url,
                      retention_days=cfg.retention_days)


def queues(cfg: Config) -> dict[Priority, Queue]:
    """Every priority's queue: ``LONGJOBS_QUEUE_URL`` serves normal, and high and low unless
    ``LONGJOBS_HIGH_QUEUE_URL``/``LONGJOBS_LOW_QUEUE_URL`` name their own. Levels on one URL
    share one object, so a reader can tell a level without a queue of its own (``is``)."""
    sqs = client("sqs", cfg)
    by_url: dict[str, Queue] = {cfg.queue_url: SqsQueue(sqs, cfg.queue_url)}
    urls = {Priority.HIGH: cfg.high_queue_url, Priority.LOW: cfg.low_queue_url}
    out: dict[Priority, Queue] = {}
    for priority in PRIORITY_ORDER:
        url = urls.get(priority) or cfg.queue_url
        if url not in by_url:
            by_url[url] = SqsQueue(sqs, url)
        out[priority] = by_url[url]
    return out


def dead_letters(cfg: Config) -> Queue | None:
    """The dead-letter queue ``LONGJOBS_DLQ_URL`` names, if it is set."""
    return SqsQueue(client("sqs", cfg), cfg.dlq_url) if cfg.dlq_url else None


def schedule_book(cfg: Config) -> ScheduleBook:
    """The stack's schedule group in EventBridge Scheduler (``LONGJOBS_SCHEDULE_GROUP``), its
    schedules sent to the job queues with ``LONGJOBS_SCHEDULER_ROLE_ARN``."""
    missing = [name for name, value in (("LONGJOBS_SCHEDULE_GROUP", cfg.schedule_group),
                                        ("LONGJOBS_SCHEDULER_ROLE_ARN", cfg.scheduler_role_arn))
               if not value]
    if missing:
        raise ConfigError(f"{' and '.join(missing)} not set: schedules need the stack's "
                          "schedule group and scheduler role (its ScheduleGroupName and "
                          "SchedulerRoleArn outputs; `longjobs local` exports them)")
    sqs = client("sqs", cfg)
    urls = {Priority.NORMAL: cfg.queue_url, Priority.HIGH: cfg.high_queue_url or cfg.queue_url,
            Priority.LOW: cfg.low_queue_url or cfg.queue_url}
    arns: dict[str, str] = {}

    def queue_arn(priority: str) -> str:
        url = urls[Priority(priority)]
        if url not in arns:  # one GetQueueAttributes per queue: its ARN, partition included
            arns[url] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
                "Attributes"]["QueueArn"]
        return arns[url]

    return EventBridgeScheduleBook(client("scheduler", cfg), cfg.schedule_group,
                                   cfg.scheduler_role_arn, cfg.schedule_dlq_arn, queue_arn)


def ecs_target(cfg: Config) -> EcsTarget:
    """Where and how tasks run: cluster, family, container, network, capacity strategy."""
    return EcsTarget(cfg.cluster, cfg.task_family, cfg.container, tuple(cfg.subnets),
                     tuple(cfg.security_groups), cfg.assign_public_ip,
                     tuple(CapacityShare(p.provider, p.weight, p.base)
                           for p in cfg.capacity_strategy))


def launcher(cfg: Config) -> Launcher:
    """ECS, as the settings name it. Local tasks are local mode's to launch: it passes its
    own launcher to :func:`dispatcher.wiring.pipeline.for_aws`."""
    if cfg.launcher == "local":
        raise ConfigError("LONGJOBS_LAUNCHER=local runs tasks as local processes: only local "
                          "mode (longjobs local / longjobs demo) can launch them")
    # One attempt per call: the launcher retries RunTask itself, with the same clientToken.
    return EcsLauncher(client("ecs", cfg, retries=1), ecs_target(cfg))


def task_definitions(cfg: Config) -> TaskDefinitions:
    """The worker family's task definitions on ECS (copies for deploys and re-derivations)."""
    return EcsTaskDefinitions(client("ecs", cfg, retries=1), ecs_target(cfg))


def job_logs(cfg: Config) -> JobLogs:
    """Where operators read a job's own lines: local mode's task output file
    (``LONGJOBS_LOCAL_LOG``), else CloudWatch Logs, the group and stream prefix read from the
    worker's task definition (``LONGJOBS_TASK_FAMILY``, or the revision a run was on)."""
    if cfg.local_log:
        return TaskOutputLogs(cfg.local_log)
    return CloudWatchJobLogs(client("logs", cfg), client("ecs", cfg), container=cfg.container,
                             task_family=cfg.task_family, region=cfg.region)


def alarm_board(cfg: Config) -> AlarmBoard | None:
    """The stack's alarms, by the prefix of their names (LONGJOBS_ALARM_PREFIX); None without
    one (local mode, a stack deployed before its alarms were named so). Imported here, not
    with this module: only the console reads alarms, and the functions' cold start imports
    this module (tests/integration/test_lambda_package.py counts what it imports)."""
    from dispatcher.aws.cloudwatch_alarms import CloudWatchAlarmBoard

    if not cfg.alarm_prefix:
        return None
    return CloudWatchAlarmBoard(client("cloudwatch", cfg), cfg.alarm_prefix)


def event_sink(cfg: Config, records: Sequence[Mapping[str, Any]] = ()) -> EventSink:
    """PutEvents on the bus ``LONGJOBS_EVENT_BUS`` names (the job state-change events), each
    event naming the job table the stream ``records`` come from."""
    table = job_stream.table_arn(records)
    return EventBridgeSink(client("events", cfg), cfg.event_bus,
                           resources=[table] if table else [])


def stream_changes(records: list[dict[str, Any]]) -> list[TableChange]:
    """A DynamoDB stream batch (a Lambda event's ``Records``) as the job table's changes."""
    return job_stream.changes(records)
