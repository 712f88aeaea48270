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
from collections import Counter

from dispatcher.local.recorded_run import record_end_to_end
from dispatcher.testing.workload import CallCounts, small_jobs

# Ticks made after the run with nothing left to do: what an idle stack's schedule costs.
IDLE_TICKS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", type=int, nargs="?", default=500)
    parser.add_argument("--wave", type=int, default=500, help="jobs sent at once")
    parser.add_argument("--tasks", type=int, default=2, help="LONGJOBS_MAX_RUNNING_TASKS")
    parser.add_argument("--concurrency", type=int, default=20, help="LONGJOBS_TASK_CONCURRENCY")
    args = parser.parse_args()
    recorded = record_end_to_end(small_jobs(args.jobs, seconds=0), wave=args.wave,
                                 tasks=args.tasks, concurrency=args.concurrency,
                                 idle_ticks=IDLE_TICKS)
    calls = [c for c in recorded if c.component != "idle"]
    idle = Counter(c.operation for c in recorded if c.component == "idle")
    counts = CallCounts.of(args.jobs, calls)
    print(f"{args.jobs} small jobs, waves of {args.wave}, {args.tasks} tasks a wave, "
          f"{args.concurrency} jobs at once per task")
    print(counts.table())
    per_tick = sum(idle.values()) / IDLE_TICKS
    print(f"an idle tick (nothing queued, running or waiting): {per_tick:.0f} calls ("
          + ", ".join(f"{op} {n / IDLE_TICKS:g}" for op, n in sorted(idle.items()))
          + f"); at one tick a minute, {per_tick * 1440:,.0f} calls a day")
    print(f"calls per job: {counts.per_job():.3f} end to end (producer "
          f"{counts.per_job('producer'):.3f}, dispatcher {counts.per_job('dispatcher'):.3f}, "
          f"runner {counts.per_job('runner'):.3f})")


if __name__ == "__main__":
    main()
