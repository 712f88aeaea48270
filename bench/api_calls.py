"""AWS API calls per small job, end to end: producer + dispatcher (ticks and task events) +
runner, by API and component.

Run: .venv/bin/python bench/api_calls.py [N_JOBS] [--wave W] [--tasks T]
Starts moto's server behind the counting proxy; nothing leaves this machine. The producer sends
in waves of W (moto's SQS slows with queue depth); each wave is admitted into T bundles, and
each bundle's jobs run through the real runner (``job_runner.worker.Worker``, in this process)
before the next wave; each task's exit goes to the task-event handler as ECS would send it.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

import boto3

from dispatcher import settings
from dispatcher.handlers import on_task_event
from dispatcher.local.provision import provision
from dispatcher.testing.moto import start_moto
from dispatcher.testing.proxy import AwsProxy
from dispatcher.testing.workload import (
    DEMO_HANDLERS,
    api_calls_end_to_end,
    small_jobs,
    stopped_event,
)
from dispatcher.wiring import pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", type=int, nargs="?", default=500)
    parser.add_argument("--wave", type=int, default=500, help="jobs sent at once")
    parser.add_argument("--tasks", type=int, default=2, help="LONGJOBS_MAX_RUNNING_TASKS")
    parser.add_argument("--concurrency", type=int, default=20, help="LONGJOBS_TASK_CONCURRENCY")
    args = parser.parse_args()
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                 "POWERTOOLS_LOG_LEVEL": "WARNING"}.items():
        os.environ.setdefault(k, v)
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    with start_moto() as moto, AwsProxy(moto.url) as proxy:
        moto.pin_ecs_tasks()
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        os.environ.update(provision(proxy.url))
        env = {**os.environ, "LONGJOBS_MAX_RUNNING_TASKS": str(args.tasks),
               "LONGJOBS_TASK_CONCURRENCY": str(args.concurrency)}
        cfg = settings.load("dispatcher", env)
        stages = pipeline.for_aws(cfg)
        ecs = boto3.client("ecs", endpoint_url=moto.url)  # outside the proxy: not counted

        def list_tasks() -> list[str]:
            return [a for page in ecs.get_paginator("list_tasks").paginate(cluster=cfg.cluster)
                    for a in page["taskArns"]]

        def on_stopped(arn: str) -> Any:
            return on_task_event(stopped_event(arn, cfg.container), cfg.container,
                                 stages.reruns)

        runner_env = {**env, "LONGJOBS_HANDLERS": DEMO_HANDLERS, "LONGJOBS_FLUSH_SECONDS": "30",
                      "LONGJOBS_ASSIGN_WAIT_SECONDS": "5"}
        counts = api_calls_end_to_end(proxy, stages.tick,
                                      small_jobs(args.jobs, seconds=0), wave=args.wave,
                                      runner_env=runner_env, list_tasks=list_tasks,
                                      on_stopped=on_stopped)
    print(f"{args.jobs} small jobs, waves of {args.wave}, {args.tasks} tasks a wave, "
          f"{args.concurrency} jobs at once per task")
    print(counts.table())
    print(f"calls per job: {counts.per_job():.3f} end to end (producer "
          f"{counts.per_job('producer'):.3f}, dispatcher {counts.per_job('dispatcher'):.3f}, "
          f"runner {counts.per_job('runner'):.3f})")


if __name__ == "__main__":
    main()
