"""Handlers of the demo. Each execution is appended to $LONGJOBS_DEMO_LOG, an independent record
the verdict checks against the job table ("exactly once" is counted, not assumed).

The records are written by the task processes themselves, one short O_APPEND write per line, so
they survive a SIGKILLed task and never depend on what the runner managed to store.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from job_runner import JobContext

# The map-reduce: an array (one message) and a reduce job that depends on its parent; this
# child fails its first attempt and succeeds on the retry.
MAP_JOB, REDUCE_JOB, FLAKY_CHILD = "mapreduce", "mapreduce-reduce", 7


def _record(ctx: JobContext, **extra: Any) -> None:
    path = os.environ.get("LONGJOBS_DEMO_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"job_id": ctx.job_id, "attempt": ctx.attempt,
                                "task": os.environ.get("LONGJOBS_TASK_ARN", "")[-8:],
                                "revision": os.environ.get("LONGJOBS_TASK_DEFINITION", ""),
                                "at": time.time(),
                                **extra}) + "\n")


def sleep(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    time.sleep(float(payload.get("seconds", 0.1)))
    _record(ctx, event="done")
    return {"slept": payload.get("seconds", 0.1)}


def steps(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    start = int((ctx.last_checkpoint or {}).get("step", 0))
    _record(ctx, event="start", resumed_from=start)
    total = int(payload.get("steps", 10))
    for step in range(start, total):
        time.sleep(float(payload.get("step_seconds", 1.0)))
        ctx.checkpoint({"step": step + 1})
        ctx.raise_if_cancelled()
    _record(ctx, event="done", resumed_from=start)
    return {"steps": total, "resumed_from": start}


def poison(payload: dict[str, Any], ctx: JobContext) -> None:
    _record(ctx, event="raise")
    raise RuntimeError("poison job: always raises")


def report(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A job of a kind with a limit across tasks: its start and end are logged, so the verdict
    can count how many ran at once."""
    _record(ctx, event="start")
    time.sleep(float(payload.get("seconds", 1.0)))
    _record(ctx, event="done")
    return {"slept": payload.get("seconds", 1.0)}


def mapper(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A child of the demo's array: child ``payload["flaky"]`` fails its first attempt (the
    runner retries it); each records its index as done."""
    if ctx.array_index == payload.get("flaky") and ctx.attempt == 1:
        _record(ctx, event="raise", index=ctx.array_index)
        raise RuntimeError("flaky map child: fails on its first attempt")
    time.sleep(float(payload.get("seconds", 0.05)))
    _record(ctx, event="done", index=ctx.array_index)
    return {"index": ctx.array_index}


def reducer(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Runs once the whole array has succeeded (it depends on the array's parent)."""
    _record(ctx, event="done")
    return {"reduced": True}
