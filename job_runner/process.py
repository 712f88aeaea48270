"""The runner's process, as ``python -m job_runner`` starts it in a task: its settings, its
task's ARN, its store and handlers, the :class:`job_runner.worker.Worker` that runs its bundle,
and its exit code (what the task-event handler reads: RUNNER_FAILED_EXIT when the runner failed
itself, not a job)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import urllib.request

from dispatcher import settings, versions
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.stops import RUNNER_FAILED_EXIT
from dispatcher.settings import Config
from dispatcher.wiring import adapters
from job_runner.joblog import HandlerOutput
from job_runner.kinds import HandlerRegistry
from job_runner.outcome import error_of
from job_runner.worker import Worker, log


def task_arn(cfg: Config | None = None) -> str:
    """ECS task metadata endpoint v4 (``$ECS_CONTAINER_METADATA_URI_V4/task``, ``TaskARN``);
    local mode sets LONGJOBS_TASK_ARN instead. Both are read through :mod:`dispatcher.settings`.
    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/task-metadata-endpoint-v4.html
    """
    cfg = settings.load("task") if cfg is None else cfg
    if cfg.task_arn:
        return cfg.task_arn
    base = cfg.ecs_metadata_uri
    if not base:
        raise LongjobsError("cannot find this task's ARN: neither ECS_CONTAINER_METADATA_URI_V4 "
                            "nor LONGJOBS_TASK_ARN is set")
    try:
        with urllib.request.urlopen(f"{base}/task", timeout=5) as resp:  # noqa: S310
            return str(json.loads(resp.read())["TaskARN"])
    except (OSError, ValueError, KeyError, TypeError) as exc:  # URLError and timeouts are
        # OSErrors; a body that is not JSON, or has no TaskARN, the others
        raise LongjobsError(f"cannot read this task's ARN from the ECS metadata endpoint "
                            f"{base}/task: {type(exc).__name__}: {exc}") from None


# What a worker image that registers no handler says at its start.
NO_HANDLERS = ("no job handler is registered in this image: build it with a handlers package "
               "that declares them ([project.entry-points.\"longjobs.handlers\"] kind = "
               "\"module:function\"; docker build --build-arg HANDLERS=...), or set the "
               "stack's Handlers parameter (LONGJOBS_HANDLERS=kind=module:function)")


def main() -> int:
    try:
        cfg = settings.load("runner")
        log.setLevel(cfg.log_level)
        # Modules of the runner log through the standard tree; give it the same JSON handler.
        tree = logging.getLogger("job_runner")
        tree.addHandler(log.registered_handler)
        tree.propagate = False
        # What handlers log or print becomes JSON lines of their job (job_runner.joblog).
        HandlerOutput(log.registered_handler, cfg.job_log_level).install()
        arn = task_arn(cfg)
        store = adapters.store(cfg)
        registry = HandlerRegistry.load(cfg.handlers)
    except LongjobsError as exc:
        print(f"job_runner: {exc}", file=sys.stderr)
        return 2
    # Which build this task runs, where an operator reads the task's log.
    log.info("job runner starting", extra={"task_arn": arn, **versions.running()})
    if not registry.kinds():
        # Every job of the bundle fails as an unknown kind, each saying so; this line says it
        # once, first, where the image's builder looks.
        log.error(NO_HANDLERS)
    worker = Worker(cfg, store, registry, arn)
    signal.signal(signal.SIGTERM, worker.on_sigterm)
    try:
        code = worker.run()
    except Exception as exc:
        # The runner failed itself (e.g. a write still refused after retries): its exit code
        # tells the stop handler that the running job is not to blame (infrastructure).
        print(f"job_runner: {error_of(exc)['traceback']}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(RUNNER_FAILED_EXIT)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # do not wait for a handler thread that ignored its cancellation
