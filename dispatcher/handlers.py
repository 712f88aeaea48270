"""Lambda entry points. Names are part of the public contract (the SAM template points here)."""

from __future__ import annotations

from typing import Any

from dispatcher import config, factory
from dispatcher.exceptions import LongjobsError
from dispatcher.logs import logger


def dispatch(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The scheduled tick (EventBridge Scheduler, every minute, reserved concurrency 1)."""
    try:
        cfg = config.load("dispatcher")
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        return factory.dispatcher(cfg).tick(remaining).as_dict()
    except LongjobsError as exc:
        # A readable line in the logs (and the Errors metric) instead of a stack trace.
        logger.error("tick failed", extra={"reason": exc.reason, "error": type(exc).__name__})
        raise


def task_event(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """ECS "Task State Change" events from EventBridge: reruns of tasks that stopped early."""
    from dispatcher.events import handle

    return handle(event, config.load("dispatcher"))
