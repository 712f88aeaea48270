"""The batch the model plays, and what it did: its :class:`Shape` (the jobs, the tasks, the
model's parameters, the faults) and the :class:`BatchRun` it records, with the constants of the
world it runs in (the stack's settings, Lambda's limits)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from dispatcher.domain import message
from dispatcher.domain.costs import TaskBill
from dispatcher.domain.jobs import Job
from dispatcher.domain.stops import StopCode
from dispatcher.simulation.aws_model import Latencies
from dispatcher.simulation.faults import Faults
from dispatcher.simulation.task_model import TaskRun
from dispatcher.stages.tick import TickReport
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable

T0 = 1_700_000_000.0
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/000000000000/longjobs-jobs"
ENV = {
    "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
    "LONGJOBS_QUEUE_URL": QUEUE_URL,
    "LONGJOBS_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/000000000000/longjobs-dlq",
    "LONGJOBS_TABLE": "longjobs-jobs", "LONGJOBS_CLUSTER": "longjobs",
    "LONGJOBS_TASK_FAMILY": "longjobs-worker", "LONGJOBS_CONTAINER": "worker",
    "LONGJOBS_SUBNETS": "subnet-00000000", "LONGJOBS_SECURITY_GROUPS": "sg-00000000000000000",
    "LONGJOBS_LOG_LEVEL": "WARNING",
}
LAMBDA_TIMEOUT = 900.0  # the tick's Lambda: 15 minutes, AWS's maximum
EXIT_TO_EVENT = 5.0  # a task's exit to its stop event reaching the handler (assumed)
# A stop event whose handler failed is delivered again this much later, at most twice (the
# task-event function's EventInvokeConfig: MaximumRetryAttempts 2): "by default Lambda attempts
# to run it two more times, with a one-minute wait between the first two attempts, and two
# minutes between the second and third attempts"
# (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html).
EVENT_RETRIES = (60.0, 120.0)
EXITED = (str(StopCode.ESSENTIAL_CONTAINER_EXITED), "Essential container in task exited")
# The loop's events that touch only tasks: a tick under way runs them up to its time.
TASK_EVENTS = ("task", "kill", "sigterm")


@dataclass
class Shape:
    """The batch and the model's parameters."""

    jobs: int = 200_000
    seconds: float = 2.0  # each job's mean length
    jitter: float = 0.1  # each job is seconds x U(1 - jitter, 1 + jitter)
    tasks: int = 60
    concurrency: int = 20
    start: tuple[float, float] = (30.0, 60.0)  # Fargate's start latency
    tick_interval: float = 60.0  # the schedule: rate(1 minute)
    latencies: Latencies = field(default_factory=Latencies)
    settings: dict[str, str] = field(default_factory=dict)  # LONGJOBS_* overrides
    urgent_at: float | None = None  # a high-priority job submitted this long into the batch
    # A job of another tenant (the batch's jobs have none), sent this long into the batch to
    # the normal queue, behind what is left of the batch's backlog.
    tenant_at: float | None = None
    # Tenants and their weights (``longjobs tenants set T --weight W``): the batch's jobs are
    # theirs in turn (job i is the (i mod n)-th's), so their backlogs come interleaved.
    tenants: tuple[tuple[str, float], ...] = ()
    # A rate limit every job takes one token of (``uses``): its key, its rate as ``longjobs
    # limits set`` takes it (``100/min``) and its burst.
    limit: tuple[str, str, float] | None = None
    # A steady stream instead of a batch: the jobs are sent at this many a second from T0 on.
    rate: float | None = None
    seed: int = 1
    faults: Faults = field(default_factory=Faults)  # none by default

    @property
    def floor(self) -> float:
        """The work over the slots, plus one mean start."""
        return self.jobs * self.seconds / (self.tasks * self.concurrency) \
            + sum(self.start) / 2


@dataclass
class BatchRun:
    """What the batch did, in virtual seconds from the end of enqueueing."""

    drain: float = 0.0
    ticks: list[tuple[float, float, TickReport]] = field(default_factory=list)  # start, end
    skipped_ticks: int = 0
    tasks: list[TaskRun] = field(default_factory=list)
    jobs_run: int = 0
    calls: dict[str, Counter[str]] = field(default_factory=dict)
    admitted_at: list[float] = field(default_factory=list)
    urgent_started: float | None = None
    tenant_started: float | None = None  # the other tenant's job (Shape.tenant_at)
    crashed_ticks: list[float] = field(default_factory=list)  # when a tick's Lambda died
    failed_ticks: list[str] = field(default_factory=list)  # a tick that raised: its error
    failed_events: int = 0  # stop events whose handler raised (delivered again, or lost)
    failed_runners: int = 0  # runners that failed themselves (RUNNER_FAILED_EXIT)
    runner_errors: list[str] = field(default_factory=list)  # what each of them raised
    reclaimed: int = 0  # tasks that got a Spot reclaim's SIGTERM
    # Each tenant's job-seconds run, by the virtual second they ended in (from T0), and when
    # its last job started (Shape.tenants).
    tenant_work: dict[str, dict[int, float]] = field(default_factory=dict)
    tenant_last_start: dict[str, float] = field(default_factory=dict)
    # Each stopped task's bill as its stop event told it (dispatcher.domain.costs): what the
    # jobs' costs must add up to.
    bills: dict[str, TaskBill] = field(default_factory=dict)
    # Each rate limit grant the dispatcher's launches took (Shape.limit): (when, tokens), and
    # each job's start (virtual seconds from T0).
    grants: list[tuple[float, float]] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)


def synthetic_body(shape: Shape) -> Callable[[int], str]:
    """Message ``i`` of a synthetic backlog: a job of the batch, as the producer sends it."""
    mark = "j0000000"
    template = message.JobMessage.model_validate({
        "kind": "seed.call", "job_id": mark, "payload": {"seconds": shape.seconds},
        "estimated_seconds": shape.seconds, "schema_version": message.SCHEMA_VERSION,
    }).model_dump_json(exclude_none=True, exclude={"priority"})
    return lambda i: template.replace(mark, f"b{i:07d}")


def seconds_of(job: Job) -> float:
    payload = job.payload if isinstance(job.payload, dict) else json.loads(job.payload or "{}")
    return float(payload.get("seconds", 1.0))


def job_states(table: MemoryTable) -> Counter[str]:
    return Counter(str(r.record_job(rec).state) for pk, rec in table.snapshot().items()
                   if pk.startswith("JOB#"))
