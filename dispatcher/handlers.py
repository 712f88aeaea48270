"""Lambda entry points. Names are part of the public contract (the SAM template points here).

Both read the settings, wire the AWS adapters to the stages (:mod:`dispatcher.wiring`), act, and
publish their metrics. Their import closure holds no CLI, local mode or test support.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from dispatcher import settings
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.task_events import Ignored, parse
from dispatcher.logs import logger
from dispatcher.ops import metrics
from dispatcher.ports.queue import Backlog
from dispatcher.stages.rerun import Reruns, StopOutcome, StopResult
from dispatcher.wiring import pipeline


def dispatch(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The scheduled tick (EventBridge Scheduler, every minute, reserved concurrency 1)."""
    try:
        cfg = settings.load("dispatcher")
        stages = pipeline.for_aws(cfg)
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        decision = stages.tick.tick(remaining)
    except LongjobsError as exc:
        # One readable line first; re-raising marks the invocation failed (the Errors metric
        # and its alarm), and the next scheduled tick starts over from the table.
        logger.error("tick failed", extra={"reason": exc.reason, "error": type(exc).__name__})
        raise
    # TickCompleted is the heartbeat the "dispatcher stopped" alarm watches (missing = breach).
    # The dashboard's figures cost reads: a GetQueueAttributes per priority's queue and an index
    # query per active bundle state (nothing per job). The tick's work is done and written by
    # now, so a read refused here (a throttle) costs the figures of this tick, not the tick.
    backlogs: dict[str, Backlog] = {}
    by_revision: dict[str, int] | None = None
    try:
        backlogs = metrics.backlogs_by_priority(stages.queues)
        by_revision = metrics.tasks_by_revision(stages.store.active_bundles())
    except Exception as exc:  # any failure: the figures are best effort, the tick is not
        logger.warning("tick figures not read", extra={"error": type(exc).__name__,
                                                       "reason": str(exc)[:500]})
    metrics.publish_tick(decision, backlog=metrics.total_backlog(backlogs.values())
                         if backlogs else None,
                         running_tasks=decision.active_bundles + decision.launch.bundles_launched,
                         queue=cfg.queue_url, namespace=cfg.metrics_namespace or None,
                         backlogs=backlogs or None, running_by_revision=by_revision)
    return decision.as_dict()


def on_task_event(event: dict[str, Any], container: str, reruns: Reruns) -> StopOutcome | Ignored:
    """Parse, filter, act. A malformed event is logged and dropped (retrying cannot fix it);
    a lost one is caught by the tick's reconciliation."""
    stop = parse(event, container)
    if isinstance(stop, Ignored):
        if stop.malformed:
            logger.error("malformed task event ignored", extra={"reason": stop.reason})
        return stop
    outcome = reruns.on_stop(stop)
    # A stop already settled (by the tick's reconciliation, an earlier delivery, a relaunch)
    # is the normal life of a task, not news: debug. Any other is what the handler did.
    log = logger.debug if outcome.result == StopResult.IGNORED else logger.info
    log("task stopped", extra=outcome.as_dict())
    return outcome


def task_event(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """ECS "Task State Change" events from EventBridge: reruns of tasks that stopped early."""
    try:
        cfg = settings.load("dispatcher")
        outcome = on_task_event(event, cfg.container, pipeline.for_aws(cfg).reruns)
    except LongjobsError as exc:
        # One readable line. Re-raising fails the invocation: Lambda retries an asynchronous
        # event twice (the function's MaximumRetryAttempts, then its dead-letter queue), and
        # the tick's reconciliation catches up with whatever a stop event did not do.
        # https://docs.aws.amazon.com/lambda/latest/dg/invocation-retries.html
        logger.error("task event failed", extra={"reason": exc.reason,
                                                 "error": type(exc).__name__})
        raise
    if isinstance(outcome, Ignored):
        return {"result": "ignored", "reason": outcome.reason}
    metrics.publish_stop(outcome, queue=cfg.queue_url, namespace=cfg.metrics_namespace or None)
    return outcome.as_dict()


def publish_job_events(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The job table's stream (an event source mapping with ReportBatchItemFailures): the job
    state-change events of a batch of records, to EventBridge. A record whose events were not
    sent is reported, and the batch is read again from it (events published after it go out
    again: consumers drop what they saw by its sequence). An error that is not the events'
    (settings, the bus missing) fails the whole batch: the mapping bisects it and retries,
    then sends what still fails to the on-failure queue."""
    cfg = settings.load("events")
    failed = pipeline.publish_stream(cfg, list(event.get("Records", [])))
    if failed:
        logger.warning("job events not published; their records are read again",
                       extra={"records": len(failed), "first": failed[0]})
    return {"batchItemFailures": [{"itemIdentifier": position} for position in failed]}


def release_dependents(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The job table's stream, the writes that end a job with waiters (the mapping's filter):
    the jobs waiting for those are released or cancelled (dispatcher/stages/dependents.py).
    A failure (settings, the table refusing) fails the batch: the mapping bisects it and
    retries it; each release is conditional, so what a retry repeats does nothing more."""
    cfg = settings.load("dispatcher")
    stats = pipeline.release_stream(cfg, list(event.get("Records", [])))
    if stats.released or stats.dependents_cancelled or stats.links_missing:
        logger.info("dependents", extra=asdict(stats))
    return asdict(stats)
