"""Lambda entry points. Names are part of the public contract (the SAM template points here)."""

from __future__ import annotations

from typing import Any

from dispatcher import settings, wiring
from dispatcher.domain.errors import LongjobsError
from dispatcher.logs import logger
from dispatcher.ops import metrics


def dispatch(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The scheduled tick (EventBridge Scheduler, every minute, reserved concurrency 1)."""
    try:
        cfg = settings.load("dispatcher")
        dispatcher = wiring.dispatcher(cfg)
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        decision = dispatcher.tick(remaining)
    except LongjobsError as exc:
        # A readable line in the logs (and the Errors metric) instead of a stack trace.
        logger.error("tick failed", extra={"reason": exc.reason, "error": type(exc).__name__})
        raise
    # TickCompleted is the heartbeat the "dispatcher stopped" alarm watches (missing = breach).
    metrics.publish_tick(decision, backlog=dispatcher.queue.backlog(),
                         running_tasks=decision.active_bundles + decision.launch.bundles_launched,
                         queue=cfg.queue_url, namespace=cfg.metrics_namespace or None)
    return decision.as_dict()


def task_event(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """ECS "Task State Change" events from EventBridge: reruns of tasks that stopped early."""
    from dispatcher.aws.ecs_events import handle

    cfg = settings.load("dispatcher")
    outcome = handle(event, cfg)
    metrics.publish_stop(outcome, queue=cfg.queue_url, namespace=cfg.metrics_namespace or None)
    return outcome
