"""The dispatcher's metrics, in CloudWatch Embedded Metric Format (EMF) on stdout.

Lambda ships stdout to CloudWatch Logs, which turns EMF lines into metrics: publishing makes no
PutMetricData call and waits on nothing. Some figures cost reads, though (the backlog is a
GetQueueAttributes per queue, the tasks by revision an index query per active state): the
handler reads them after the tick's work, and a failed read drops those figures, not the tick.

The lines are built with powertools' EMF provider
(``AmazonCloudWatchEMFProvider``) one instance per line, so nothing is shared between calls and
no Lambda context is needed (tests and local mode call these functions directly).

Namespace: ``LONGJOBS_METRICS_NAMESPACE``, else ``POWERTOOLS_METRICS_NAMESPACE`` (what the SAM
template sets), else ``longjobs``. Dimensions: ``service`` (``POWERTOOLS_SERVICE_NAME``, default
``longjobs``; the SAM template sets the stack's name, so two stacks in one account and namespace
keep their metrics, alarms and dashboards apart) and ``Queue`` (the name of the job queue,
LONGJOBS_QUEUE_URL's last segment, also for the metrics of the other priorities' queues: it names
the deployment); all three are read through :mod:`dispatcher.settings`. The stack's dashboard and
alarms (``infra/template.yaml``) watch these names: ``tests/integration/test_dashboard.py`` and
``tests/integration/test_alarms.py`` fail when either side renames one. Plus:

- ``LaunchFailures`` is published twice: the total with (service, Queue), and one line per
  reason with (service, Queue, Reason); the reason is its first word as in the decision record
  (``RESOURCE:MEMORY``, ``Capacity``, ...). Alarm on the total, graph by reason. Every Spot
  failure that was relaunched on on-demand FARGATE at once is also one ``SpotFallbacks``, so
  the failures nobody recovered are LaunchFailures - SpotFallbacks (what the alarm watches).
- ``TickCompleted`` = 1 is on a line of its own with the single dimension (service): the
  heartbeat an alarm on missing data watches, independent of the queue's name.
- A task stop (the task-event handler, and the tick for the stops its reconciliation settles)
  publishes ``JobsSucceeded`` and ``JobsFailed`` with (service, Queue) for a normal finish;
  for an early stop ``Reruns`` (jobs put back), ``JobsFailed``, ``BundlesRerun`` (1 when the
  bundle goes back to be relaunched), ``TasksNeverStarted`` (1 when the task stopped before
  its runner claimed the bundle: no job ran on it, as with an image that does not pull),
  ``SpotFallbacks`` and ``LaunchFailures`` (of the immediate relaunch), per (service, Queue,
  StopClass) and in total per (service, Queue), from one line with two dimension sets.
- ``Backlog`` is the total in SQS over the priorities' queues with (service, Queue), and one
  line per priority queue with (service, Queue, Priority) when the tick passes ``backlogs``
  (a level without a queue of its own is counted in ``normal``'s).
- ``RunningTasks`` is the total with (service, Queue), and one line per task-definition
  revision (``family:revision``) with (service, Queue, TaskDefinition) when the tick passes
  ``running_by_revision``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import (
    AmazonCloudWatchEMFProvider,
)

from dispatcher import settings
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.ports.queue import Backlog, Queue
from dispatcher.stages.rerun import StopOutcome, StopResult
from dispatcher.stages.tick import TickReport
from dispatcher.store.values import JobOutcomes

DEFAULT_NAMESPACE = "longjobs"
DEFAULT_SERVICE = "longjobs"
Metric = tuple[str, MetricUnit, float]


def _settings() -> settings.Config:
    """The environment's settings (the ``metrics`` role requires none, it validates them)."""
    return settings.load("metrics")


def default_namespace() -> str:
    """``LONGJOBS_METRICS_NAMESPACE``, else ``POWERTOOLS_METRICS_NAMESPACE``, else ``longjobs``
    (the fallbacks are resolved in :mod:`dispatcher.settings`)."""
    return _settings().metrics_namespace or DEFAULT_NAMESPACE


def service() -> str:
    return _settings().service_name or DEFAULT_SERVICE


def queue_name(queue_url: str | None = None) -> str:
    """The queue's name, the last segment of its URL (what CloudWatch's AWS/SQS metrics use);
    a name is returned as it is. The ``Queue`` dimension of every metric."""
    url = queue_url if queue_url is not None else _settings().queue_url
    return url.rstrip("/").rsplit("/", 1)[-1] or "unknown"


def backlogs_by_priority(queues: Mapping[Priority, Queue]) -> dict[str, Backlog]:
    """The backlog of each priority that has a queue of its own (one GetQueueAttributes per
    queue). A level served by the normal queue is left out: its messages are in normal's."""
    normal = queues.get(Priority.NORMAL)
    return {str(p): queues[p].backlog() for p in PRIORITY_ORDER
            if p in queues and (p == Priority.NORMAL or queues[p] is not normal)}


def total_backlog(backlogs: Iterable[Backlog]) -> Backlog:
    parts = list(backlogs)
    return Backlog(sum(b.visible for b in parts), sum(b.in_flight for b in parts),
                   sum(b.delayed for b in parts))


def tasks_by_revision(bundles: Iterable[Bundle]) -> dict[str, int]:
    """Active bundles (one task each) by the revision they were launched on; a bundle being
    launched has none yet (``unknown``)."""
    return dict(sorted(Counter(b.task_definition or "unknown" for b in bundles).items()))


def _in_sqs(backlog: Backlog) -> int:
    """Everything still in SQS: waiting, being received, delayed."""
    return backlog.visible + backlog.in_flight + backlog.delayed


def emf(metrics: list[Metric], dimensions: dict[str, str], *, namespace: str | None = None,
        totals: dict[str, str] | None = None) -> dict[str, Any]:
    """One EMF object: ``metrics`` under ``dimensions`` (and also under ``totals`` if given)."""
    provider = AmazonCloudWatchEMFProvider(namespace=namespace or default_namespace(),
                                           service=service())
    provider.add_dimension("service", service())
    for name, value in dimensions.items():
        provider.add_dimension(name, value)
    if totals:
        provider.add_dimensions(**totals)
    for name, unit, number in metrics:
        provider.add_metric(name=name, unit=unit, value=number)
    return dict(provider.serialize_metric_set())


def _print(blobs: list[dict[str, Any]]) -> None:
    if is_metrics_disabled():  # POWERTOOLS_METRICS_DISABLED / POWERTOOLS_DEV, as powertools does
        return
    for blob in blobs:
        print(json.dumps(blob, separators=(",", ":")), flush=True)


def tick_blobs(decision: TickReport, *, backlog: Backlog | None, running_tasks: int,
               queue: str | None = None, namespace: str | None = None,
               now: float | None = None, backlogs: Mapping[str, Backlog] | None = None,
               running_by_revision: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """The EMF objects of one tick: the tick's metrics, the heartbeat, one per failure reason,
    then one per priority queue (``backlogs``), one per revision (``running_by_revision``), and
    one per task stop its reconciliation handled (a stop whose event was lost counts too).
    Metrics whose value is unknown this tick are left out rather than sent as 0."""
    t = time.time() if now is None else now
    dims = {"Queue": queue_name(queue or None)}
    intake, launch = decision.intake, decision.launch
    failures = sum(launch.failures.values())
    metrics: list[Metric] = [
        ("JobsAdmitted", MetricUnit.Count, intake.admitted),
        ("JobsRejected", MetricUnit.Count, intake.rejected),
        ("JobsDeduplicated", MetricUnit.Count, intake.duplicates),
        ("BundlesLaunched", MetricUnit.Count, launch.bundles_launched),
        ("LaunchFailures", MetricUnit.Count, failures),
        ("SpotFallbacks", MetricUnit.Count, launch.spot_fallbacks),
        ("RunningTasks", MetricUnit.Count, running_tasks),
        ("TickDurationMs", MetricUnit.Milliseconds, decision.elapsed_ms),
    ]
    if backlog is not None:  # everything still in SQS: waiting, being received, delayed
        metrics.append(("Backlog", MetricUnit.Count, _in_sqs(backlog)))
    oldest = intake.oldest_sent_at
    if oldest is not None:  # known only when the tick received something
        age = max(0.0, t - oldest)
        metrics.append(("OldestMessageAgeSeconds", MetricUnit.Seconds, age))
        if intake.admitted:  # enqueue -> recorded and launched, for the oldest admitted work
            metrics.append(("DispatchLagSeconds", MetricUnit.Seconds, age))
    blobs = [emf(metrics, dims, namespace=namespace),
             emf([("TickCompleted", MetricUnit.Count, 1)], {}, namespace=namespace)]
    for reason, count in sorted(launch.failures.items()):
        blobs.append(emf([("LaunchFailures", MetricUnit.Count, count)],
                         {**dims, "Reason": (reason or "unknown")[:250]}, namespace=namespace))
    for priority, b in (backlogs or {}).items():
        blobs.append(emf([("Backlog", MetricUnit.Count, _in_sqs(b))],
                         {**dims, "Priority": priority}, namespace=namespace))
    for revision, count in sorted((running_by_revision or {}).items()):
        blobs.append(emf([("RunningTasks", MetricUnit.Count, count)],
                         {**dims, "TaskDefinition": revision[:250]}, namespace=namespace))
    for outcome in decision.reconcile.outcomes:
        blob = stop_blob(outcome, queue=queue, namespace=namespace)
        if blob:
            blobs.append(blob)
        blobs += cost_blobs(outcome, namespace=namespace)  # a bill reconciliation settled
    return blobs


def publish_tick(decision: TickReport, *, backlog: Backlog | None, running_tasks: int,
                 queue: str | None = None, namespace: str | None = None,
                 backlogs: Mapping[str, Backlog] | None = None,
                 running_by_revision: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Print the tick's EMF lines (see :func:`tick_blobs`); return the main one."""
    blobs = tick_blobs(decision, backlog=backlog, running_tasks=running_tasks, queue=queue,
                       namespace=namespace, backlogs=backlogs,
                       running_by_revision=running_by_revision)
    _print(blobs)
    return blobs[0]


def stop_blob(outcome: StopOutcome, *, queue: str | None = None,
              namespace: str | None = None) -> dict[str, Any]:
    """The EMF object of one handled task stop (``Reruns.on_stop``'s outcome); ``{}`` for an
    ignored event (stale, duplicate, not ours), which changed nothing."""
    dims = {"Queue": queue_name(queue or None)}
    if outcome.result == StopResult.FINISHED:  # a task that ended normally: its results
        last = outcome.finished or JobOutcomes()
        return emf([("JobsSucceeded", MetricUnit.Count, last.succeeded + outcome.succeeded_before),
                    ("JobsFailed", MetricUnit.Count, last.failed + outcome.failed_before)],
                   dims, namespace=namespace)
    if outcome.result == StopResult.IGNORED or outcome.stop_class is None:
        return {}
    # The follow-ons the task ran before its last bundle ended their jobs (JobsSucceeded
    # only then: a task stopped early reports its last bundle's successes nowhere).
    before = [("JobsSucceeded", MetricUnit.Count, outcome.succeeded_before)] \
        if outcome.succeeded_before else []
    return emf([("Reruns", MetricUnit.Count, len(outcome.rerun)),
                ("JobsFailed", MetricUnit.Count, len(outcome.failed) + outcome.failed_before),
                *before,
                ("BundlesRerun", MetricUnit.Count, 1 if outcome.rerun else 0),
                ("TasksNeverStarted", MetricUnit.Count, 1 if outcome.never_started else 0),
                ("SpotFallbacks", MetricUnit.Count, outcome.spot_fallbacks),
                ("LaunchFailures", MetricUnit.Count, outcome.launch_failures)],
               {**dims, "StopClass": str(outcome.stop_class)}, namespace=namespace,
               totals={"service": service(), **dims})


# The dimension of each group's JobCost, by the group's kind (dispatcher.domain.costs.groups_of).
COST_DIMENSIONS = {"kind": "Kind", "tenant": "Tenant", "label": "Label"}


def cost_blobs(outcome: StopOutcome, *, namespace: str | None = None) -> list[dict[str, Any]]:
    """The EMF objects of a stop that settled its task's bill: ``JobCost`` (dollars) for the
    stack (dimension ``service`` alone: what the daily budget's alarm sums over a day), and
    each group's share under ``Kind``, ``Tenant`` or ``Label`` (``key=value``): the daily
    spend per kind, per tenant and per label, from the cost the stop computed."""
    s = outcome.settlement
    if s is None:
        return []
    blobs = [emf([("JobCost", MetricUnit.NoUnit, s.cost)], {}, namespace=namespace)]
    for group, (_, _, dollars) in sorted(s.group_costs().items()):
        dimension, _, value = group.partition(":")
        blobs.append(emf([("JobCost", MetricUnit.NoUnit, dollars)],
                         {COST_DIMENSIONS.get(dimension, "Label"): value},
                         namespace=namespace))
    return blobs


def publish_stop(outcome: StopOutcome, *, queue: str | None = None,
                 namespace: str | None = None) -> dict[str, Any]:
    """Print the stop's EMF lines, if any (its jobs' outcomes, its bill's cost); return the
    first (``{}`` when nothing was printed)."""
    blob = stop_blob(outcome, queue=queue, namespace=namespace)
    blobs = [b for b in [blob, *cost_blobs(outcome, namespace=namespace)] if b]
    _print(blobs)
    return blobs[0] if blobs else {}
