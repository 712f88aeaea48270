"""Job handlers the runner tests register with LONGJOBS_HANDLERS. Each run appends a line to
$LONGJOBS_TEST_LOG, an independent record of executions (so "ran once" is checked, not assumed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from collections import Counter
from typing import Any

from dispatcher.domain.errors import Interrupted
from job_runner import JobContext


def _record(ctx: JobContext, event: str, **extra: Any) -> None:
    path = os.environ.get("LONGJOBS_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"job_id": ctx.job_id, "attempt": ctx.attempt, "event": event,
                                "pid": os.getpid(), **extra}) + "\n")


def echo(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    _record(ctx, "run")
    return {"echo": payload}


def measure(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """What the payload's strings hold, by field: their length and characters (not the
    strings, which may be larger than a result may be)."""
    _record(ctx, "run")
    return {k: {"length": len(v), "characters": sorted(set(v))}
            for k, v in payload.items() if isinstance(v, str)}


def fail(payload: dict[str, Any], ctx: JobContext) -> None:
    _record(ctx, "run")
    raise ValueError("poison: this job always fails")


def steps(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A long job in steps, checkpointing each, resuming from the last checkpoint."""
    start = (ctx.last_checkpoint or {}).get("step", 0)
    _record(ctx, "run", resumed_from=start)
    for step in range(start, payload.get("steps", 10)):
        time.sleep(payload.get("step_seconds", 0.5))
        ctx.checkpoint({"step": step + 1})
        ctx.raise_if_cancelled()
    return {"steps_done": payload.get("steps", 10), "resumed_from": start}


def sleepy(payload: dict[str, Any], ctx: JobContext) -> None:
    _record(ctx, "run")
    for _ in range(int(payload.get("seconds", 30) * 10)):
        if ctx.cancelled():
            ctx.raise_if_cancelled()
        time.sleep(0.1)


def spell(payload: dict[str, Any], ctx: JobContext) -> None:
    """Sleeps, recording its start and its end (whether two runs overlapped is read from
    them)."""
    _record(ctx, "run", at=time.time())
    time.sleep(float(payload.get("seconds", 3)))
    _record(ctx, "done", at=time.time())


def halfway(payload: dict[str, Any], ctx: JobContext) -> None:
    """Says it is half done, then waits to be cancelled (or for its payload's seconds)."""
    _record(ctx, "run")
    time.sleep(0.5)  # a rate to count an ETA from
    ctx.progress(1, 2, "halfway there")
    ctx.wait(float(payload.get("seconds", 60)))
    ctx.raise_if_cancelled()


def acquirer(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Takes ``n`` tokens of rate limit ``key`` one at a time (``ctx.acquire``) and says when
    each was granted."""
    _record(ctx, "run")
    granted = []
    for _ in range(int(payload.get("n", 1))):
        ctx.acquire(str(payload.get("key", "api")), 1, timeout=60.0)
        granted.append(time.time())
    return {"granted": granted}


def suicide(payload: dict[str, Any], ctx: JobContext) -> None:
    """A hostile handler: kills its own process, as a segfault or the OOM killer would."""
    _record(ctx, "run")
    os.kill(os.getpid(), signal.SIGKILL)


def exit_zero(payload: dict[str, Any], ctx: JobContext) -> None:
    """A hostile handler: ends the process with a clean exit code, mid-bundle."""
    _record(ctx, "run")
    os._exit(0)


def stubborn(payload: dict[str, Any], ctx: JobContext) -> None:
    """A hostile handler: ignores its cancellation (timeout, cancel, SIGTERM) and sleeps on."""
    _record(ctx, "run", at=time.time())
    time.sleep(payload.get("seconds", 30))
    _record(ctx, "finished", at=time.time())


_barriers: dict[str, threading.Barrier] = {}
_barriers_lock = threading.Lock()
_arrived: Counter[str] = Counter()  # touched on the event loop's thread only


def meet(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Concurrency-aware: returns once ``party`` jobs of its ``group`` run at once in this
    process; fails (BrokenBarrierError) if they never do within ``wait`` seconds."""
    with _barriers_lock:
        barrier = _barriers.setdefault(payload["group"], threading.Barrier(
            payload["party"], timeout=payload.get("wait", 30)))
    barrier.wait()
    _record(ctx, "met", thread=threading.current_thread().name)
    return {"met": payload["party"]}


async def ameet(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Async and concurrency-aware: returns once ``party`` jobs of its ``group`` have arrived on
    this process's event loop; fails if they never do within ``wait`` seconds."""
    group = payload["group"]
    _arrived[group] += 1
    loop = asyncio.get_running_loop()
    give_up = loop.time() + payload.get("wait", 30)
    while _arrived[group] < payload["party"]:
        if loop.time() > give_up:
            raise TimeoutError(f"only {_arrived[group]} of {payload['party']} arrived")
        await asyncio.sleep(0.01)
    _record(ctx, "met", thread=threading.current_thread().name, loop=id(loop))
    return {"met": payload["party"]}


def interrupts(payload: dict[str, Any], ctx: JobContext) -> None:
    """Gives itself back on every run, unasked (no cancel, no SIGTERM)."""
    _record(ctx, "run")
    raise Interrupted("upstream unavailable")


def once_broken(payload: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Fails its first run (after a log line), succeeds on the next: a job an operator
    retries. Which run it is, is kept in the file the payload names."""
    marker = payload["marker"]
    print(f"run for {ctx.job_id}: " + ("again" if os.path.exists(marker) else "first"))
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("tried")
        raise RuntimeError("the upstream service said 503; retry me")
    return {"fixed": True}


def hostile_text(payload: dict[str, Any], ctx: JobContext) -> None:
    """Logs and fails with whatever its payload's ``text`` holds (markup, script, links)."""
    print(f"log line: {payload['text']}")
    raise ValueError(payload["text"])
