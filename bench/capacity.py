"""DynamoDB capacity per job and the hottest partition key, from a recorded run.

Run: .venv/bin/python bench/capacity.py [N_JOBS] [--rate JOBS_PER_SECOND]
Runs N small jobs end to end as ``bench/api_calls.py`` does (moto's server behind the recording
proxy, nothing leaves this machine), the proxy keeping each DynamoDB write's items before and
after and each read's sizes; then replays them through DynamoDB's capacity rules
(:mod:`dispatcher.testing.capacity`) and prints WCU and RCU per job, and the WCU/s of the
hottest partition key of the table and of each index at the given admission rate, the last line
``capacity: hottest partition = X WCU/s at R jobs/s``. The same run is also counted as if the
status index were keyed as before sharding (one partition per state, projection ALL).
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

import boto3

from dispatcher import settings
from dispatcher.aws.dynamodb.model import key_schema
from dispatcher.handlers import on_task_event
from dispatcher.local.provision import provision
from dispatcher.ports.record import INDEX_ATTRIBUTES
from dispatcher.testing.capacity import IndexSpec, model, report, specs, unsharded
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
    parser.add_argument("jobs", type=int, nargs="?", default=300)
    parser.add_argument("--rate", type=float, default=1000.0, help="admitted jobs per second")
    parser.add_argument("--tasks", type=int, default=2, help="LONGJOBS_MAX_RUNNING_TASKS")
    parser.add_argument("--payload-bytes", type=int, default=1000,
                        help="padding in each job's payload")
    args = parser.parse_args()
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                 "POWERTOOLS_LOG_LEVEL": "WARNING"}.items():
        os.environ.setdefault(k, v)
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    with start_moto() as moto, AwsProxy(moto.url, capture_items=True) as proxy:
        moto.pin_ecs_tasks()
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        os.environ.update(provision(proxy.url))
        env = {**os.environ, "LONGJOBS_MAX_RUNNING_TASKS": str(args.tasks),
               "LONGJOBS_TASK_CONCURRENCY": "20", "LONGJOBS_TICK_SECONDS": "900"}
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
                      "LONGJOBS_HEARTBEAT_SECONDS": "30", "LONGJOBS_ASSIGN_WAIT_SECONDS": "5"}
        jobs = small_jobs(args.jobs, seconds=0)
        for job in jobs:
            job["payload"]["pad"] = "x" * args.payload_bytes
        api_calls_end_to_end(proxy, stages.tick, jobs,
                             wave=args.jobs, runner_env=runner_env, list_tasks=list_tasks,
                             on_stopped=on_stopped)
        calls = proxy.recorded()
    indexes = specs(key_schema(), INDEX_ATTRIBUTES)
    before = model(calls, args.jobs, [IndexSpec("by_status", "status_key", "status_at", "ALL")],
                   partition=unsharded)
    now = model(calls, args.jobs, indexes)
    print(f"{args.jobs} small jobs ({args.payload_bytes} bytes of payload padding), "
          f"{args.tasks} tasks, {len(calls)} calls recorded")
    print(f"as before sharding (one partition per state, projection ALL): "
          f"{report(before, args.rate)[-1].removeprefix('capacity: ')}")
    print("\n".join(report(now, args.rate)))


if __name__ == "__main__":
    main()
