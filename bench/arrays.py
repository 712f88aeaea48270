"""An array job of 100,000 children end to end on the twins: the dispatcher's calls per child,
its peak RSS, how soon the parent is decided after the last child ends, and how soon a job that
depends on the array (a merge) is launched after that.

Run: .venv/bin/python bench/arrays.py [N_CHILDREN] [--max-tasks T]
One message makes the array; each tick (a minute apart on the twins' clock) records children
through the admission pipeline, launches their bundles and settles the parent; a runner stand-in
runs every launched bundle to its end between ticks (as ``tests/twins/test_array_jobs.py``
does), each child once. The dispatcher's table and queue calls are counted by API
(``dispatcher.simulation.aws_model``'s wrappers over the same twins); the runner's are not (they are
a bundle's claim, heartbeats and grouped results, as for any job), nor are the dependents
function's (the table's stream, delivered after each tick and each runner pass: one end, the
parent's, releases the merge). The last line is the headline.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import Counter
from pathlib import Path

# The runner stand-in is the twins tests' (tests/twins/test_array_jobs.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dispatcher.domain.jobs import JobState
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.simulation.aws_model import Calls, ItemTimes, Latencies, ModelQueue, ModelTable
from dispatcher.simulation.virtual_time import VirtualClock
from dispatcher.store import Store
from dispatcher.wiring import pipeline
from tests.twins import Twins
from tests.twins.test_array_jobs import run_launched


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("children", nargs="?", type=int, default=100_000)
    ap.add_argument("--max-tasks", type=int, default=60)
    args = ap.parse_args()
    t = Twins()
    calls = Calls(VirtualClock(0.0), Latencies())
    table = ModelTable(t.table, calls, ItemTimes())
    store = Store(table, clock=t.clock)
    queue = ModelQueue(t.queue, calls)
    stages = pipeline.build(t.config(LONGJOBS_MAX_RUNNING_TASKS=str(args.max_tasks),
                                     LONGJOBS_TASK_CONCURRENCY="20"),
                            queue=queue, store=store, launcher=t.launcher, clock=t.clock,
                            pacer=LaunchPacer.simulated())
    client = t.client()
    client.submit("k", {"day": "2026-12-01"}, job_id="nightly", array_size=args.children,
                  estimated_seconds=2)
    client.submit("merge", {}, job_id="merge", depends_on=["nightly"], estimated_seconds=2)
    started = time.process_time()
    ran: Counter[str] = Counter()
    ticks = last_end_tick = 0
    decided_tick = merge_tick = None
    while merge_tick is None and ticks < 10_000:
        stages.tick.tick()
        ticks += 1
        t.flow()  # the parent's end, if this tick decided it, releases the merge
        parent, merge = t.job("nightly"), t.job("merge")
        if decided_tick is None and parent is not None and parent.state == JobState.SUCCEEDED:
            decided_tick = ticks
        if merge is not None and merge.bundle_id and (b := t.bundle(merge.bundle_id)) \
                and b.task_arn:
            merge_tick = ticks
            break
        if run_launched(t, ran=ran):
            last_end_tick = ticks
        t.clock.advance(60)
    cpu = time.process_time() - started
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ran.pop("merge", None)
    if len(ran) != args.children or set(ran.values()) != {1}:
        raise SystemExit("a child ran twice or never")
    total = sum(calls.counts.values())
    print(f"children: {args.children}, ticks: {ticks}, each child ran once")
    print("dispatcher calls by API:", dict(sorted(calls.counts.items())))
    print(f"dispatcher calls per child: {total / args.children:.3f}")
    print(f"parent SUCCEEDED in the tick after the last child ended: "
          f"{decided_tick is not None and decided_tick == last_end_tick + 1}")
    print(f"merge (depends on the array) launched by tick {merge_tick}: "
          f"{(merge_tick or 0) - last_end_tick} ticks (60 s apart) after the last child ended")
    print(f"CPU {cpu:.1f} s, peak RSS {rss_mb:.0f} MiB (this process: twins, dispatcher, runner)")
    print(f"arrays: calls/child = {total / args.children:.3f}")


if __name__ == "__main__":
    main()
