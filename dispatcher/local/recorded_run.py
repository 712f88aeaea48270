"""One end-to-end run on a moto server of its own, for the benchmarks that count its calls.

``bench/api_calls.py`` (calls per job) and ``bench/capacity.py`` (DynamoDB capacity per job)
measure the same run: moto's server behind the recording proxy, the local provisioning, the
real tick, runner and task-event handler
(:func:`~dispatcher.testing.workload.api_calls_end_to_end`). Nothing leaves this machine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import boto3

from dispatcher import settings
from dispatcher.handlers import on_task_event
from dispatcher.local.environment import DUMMY_CREDENTIALS
from dispatcher.local.provision import provision
from dispatcher.testing.moto import start_moto
from dispatcher.testing.proxy import AwsProxy, RecordedCall
from dispatcher.testing.workload import DEMO_HANDLERS, api_calls_end_to_end, stopped_event
from dispatcher.wiring import pipeline

__all__ = ["record_end_to_end"]

# Local mode's dummy credentials and region, and the tick's records kept quiet; a caller's own
# values are kept.
_LOCAL_ENV = {**DUMMY_CREDENTIALS, "POWERTOOLS_LOG_LEVEL": "WARNING"}


def record_end_to_end(jobs: list[dict[str, Any]], *, wave: int, tasks: int,
                      concurrency: int = 20, capture_items: bool = False,
                      dispatcher_env: Mapping[str, str] | None = None,
                      runner_env: Mapping[str, str] | None = None,
                      idle_ticks: int = 0) -> list[RecordedCall]:
    """Run ``jobs`` end to end, ``wave`` sent at once, each wave in ``tasks`` bundles of
    ``concurrency`` jobs at once; return every AWS call the proxy recorded, by component.

    ``capture_items`` keeps each DynamoDB write's items (the capacity model's input);
    ``dispatcher_env`` and ``runner_env`` add settings to the tick's and the runner's;
    ``idle_ticks``: ticks made after the run, with nothing left to do, recorded as the
    component ``idle``.
    This process's environment is set for the run (endpoint, provisioned names), as local
    mode sets it: a benchmark's process runs one.
    """
    for k, v in _LOCAL_ENV.items():
        os.environ.setdefault(k, v)
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    with start_moto() as moto, AwsProxy(moto.url, capture_items=capture_items) as proxy:
        moto.pin_ecs_tasks()
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        os.environ.update(provision(proxy.url))
        env = {**os.environ, "LONGJOBS_MAX_RUNNING_TASKS": str(tasks),
               "LONGJOBS_TASK_CONCURRENCY": str(concurrency), **(dispatcher_env or {})}
        cfg = settings.load("dispatcher", env)
        stages = pipeline.for_aws(cfg)
        ecs = boto3.client("ecs", endpoint_url=moto.url)  # outside the proxy: not counted

        def list_tasks() -> list[str]:
            return [a for page in ecs.get_paginator("list_tasks").paginate(cluster=cfg.cluster)
                    for a in page["taskArns"]]

        def on_stopped(arn: str) -> Any:
            return on_task_event(stopped_event(arn, cfg.container), cfg.container,
                                 stages.reruns)

        runner = {**env, "LONGJOBS_HANDLERS": DEMO_HANDLERS, "LONGJOBS_FLUSH_SECONDS": "30",
                  "LONGJOBS_ASSIGN_WAIT_SECONDS": "5", **(runner_env or {})}
        api_calls_end_to_end(proxy, stages.tick, jobs, wave=wave, runner_env=runner,
                             list_tasks=list_tasks, on_stopped=on_stopped)
        with proxy.recording("idle"):
            for _ in range(idle_ticks):
                stages.tick.tick()
        return proxy.recorded()
