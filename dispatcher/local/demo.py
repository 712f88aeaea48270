"""``longjobs demo``: a scripted run against a fresh local environment, checked at the end.

Verdict = the job table AND the handlers' own execution log agree: every good job succeeded
exactly once, the poison job failed after its attempts, the malformed message was rejected,
the duplicate was absorbed, nothing was lost.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import boto3

from dispatcher.client import JobClient
from dispatcher.job import TERMINAL_JOB_STATES, JobState
from dispatcher.local.environment import LocalEnv
from dispatcher.persistence.dynamodb import DynamoStore
from dispatcher.provision import Names, register_task_definition

HANDLERS = ("demo.sleep=dispatcher.local.demo_handlers:sleep,"
            "demo.steps=dispatcher.local.demo_handlers:steps,"
            "demo.poison=dispatcher.local.demo_handlers:poison")


def run(*, small: int = 120, long: int = 2, seed: int = 1, max_running: int = 4,
        timeout: float = 150.0, say: Any = print) -> tuple[bool, str]:
    rng = random.Random(seed)
    log = Path(tempfile.mkdtemp(prefix="longjobs-demo-")) / "executions.jsonl"
    os.environ["LONGJOBS_DEMO_LOG"] = str(log)
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    settings = {"LONGJOBS_HANDLERS": HANDLERS, "LONGJOBS_MAX_RUNNING_TASKS": str(max_running),
                "LONGJOBS_BUNDLE_MAX_JOBS": "25", "LONGJOBS_SMALL_JOB_SECONDS": "5",
                "LONGJOBS_HEARTBEAT_SECONDS": "2", "LONGJOBS_FLUSH_SECONDS": "1",
                "LONGJOBS_LAUNCH_BACKOFF_SECONDS": "1"}
    with LocalEnv(settings=settings, tick_seconds=1.0, output=subprocess.DEVNULL) as env:
        store = DynamoStore(env.cfg.table)
        client = JobClient()
        jobs: list[dict[str, Any]] = [{"kind": "demo.sleep", "job_id": f"small-{i:04d}",
                 "payload": {"seconds": round(rng.uniform(0.02, 0.1), 3)},
                 "estimated_seconds": 0.5} for i in range(small)]
        jobs += [{"kind": "demo.steps", "job_id": f"long-{i}", "max_attempts": 2,
                  "payload": {"steps": 8 + 2 * i, "step_seconds": 1.0}} for i in range(long)]
        jobs.append({"kind": "demo.poison", "job_id": "poison", "max_attempts": 2,
                     "estimated_seconds": 0.1, "payload": {}})
        client.submit_many(jobs)
        client.submit("demo.sleep", {"seconds": 0.01}, job_id="small-0000",
                      estimated_seconds=0.5)  # a producer retry: must not run twice
        sqs = boto3.client("sqs", endpoint_url=env.endpoint)
        sqs.send_message(QueueUrl=env.cfg.queue_url, MessageBody='{"kind": "oops"')
        say(f"submitted {len(jobs)} jobs + 1 duplicate + 1 malformed message; "
            f"max {max_running} running tasks")
        good: list[str] = [j["job_id"] for j in jobs if j["kind"] != "demo.poison"]
        killed = deployed = False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(1.0)
            done = _states(store, [j["job_id"] for j in jobs])
            say(_progress(env, done))
            long_job = store.get_job("long-0")
            if not killed and long_job and long_job.checkpoint and long_job.bundle_id:
                bundle = store.get_bundle(long_job.bundle_id)
                if bundle and bundle.task_arn and bundle.task_arn in env.launcher.running():
                    env.launcher.kill(bundle.task_arn)
                    killed = True
                    say(f"SIGKILL task {bundle.task_arn[-8:]} in the middle of long-0")
            if killed and not deployed:
                ecs = boto3.client("ecs", endpoint_url=env.endpoint)
                arn = register_task_definition(ecs, Names(), image="worker:v2",
                                               env={"LONGJOBS_TABLE": env.cfg.table})
                deployed = True
                say(f"deploy: registered {arn.rsplit('/', 1)[-1]}; running tasks keep theirs")
            if len(done) == len(jobs) and all(s in TERMINAL_JOB_STATES
                                              for s in done.values()):
                break
        return _verdict(store, jobs, good, log, say)


def _states(store: DynamoStore, ids: list[str]) -> dict[str, JobState]:
    out = {}
    for start in range(0, len(ids), 100):
        for job in store.get_jobs(ids[start:start + 100]):
            out[job.job_id] = job.state
    return out


def _progress(env: LocalEnv, done: dict[str, JobState]) -> str:
    c = Counter(str(s) for s in done.values())
    backlog = env.dispatcher.queue.backlog()
    return (f"backlog {backlog.visible + backlog.in_flight:4d} | admitted {len(done):4d} | "
            f"running tasks {len(env.launcher.running()):2d} | succeeded {c['SUCCEEDED']:4d} | "
            f"failed {c['FAILED']} | task exits {len(env.events)}")


def _verdict(store: DynamoStore, jobs: list[dict[str, Any]], good: list[str], log: Path,
             say: Any) -> tuple[bool, str]:
    states = _states(store, [j["job_id"] for j in jobs])
    lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    done = Counter(r["job_id"] for r in lines if r.get("event") == "done")
    succeeded_once = [j for j in good if states.get(j) == JobState.SUCCEEDED and done[j] == 1]
    duplicate_runs = sum(1 for j in good if done[j] > 1)
    lost = [j for j in good if j not in states]
    poison = store.get_job("poison")
    failed_ok = poison is not None and poison.state == JobState.FAILED
    rejected = sum(1 for _ in store_rejections(store))
    for j in ("long-0", "long-1"):
        job = store.get_job(j)
        if job:
            revs = [h.get("task_definition") for h in job.history]
            say(f"{j}: {job.state} attempts={job.attempts} infra_reruns={job.infra_attempts} "
                f"revisions={revs}")
    if poison is not None:
        say(f"poison: {poison.state} after {poison.attempts} attempts: {poison.reason}")
    line = (f"demo: {len(good)} jobs, {len(succeeded_once)} succeeded exactly once, "
            f"{1 if failed_ok else 0} failed as expected, {rejected} rejected, {len(lost)} lost, "
            f"{duplicate_runs} duplicate runs")
    ok = (len(succeeded_once) == len(good) and failed_ok and rejected == 1 and not lost
          and duplicate_runs == 0)
    return ok, line


def store_rejections(store: DynamoStore) -> list[str]:
    from dispatcher.persistence.models import Item

    return [i.pk for i in Item.by_status.query("JOB#REJECTED")]
