"""A rate limit shared by every task, in virtual time: 1,000 jobs of ~2 s that each take a token
of one key (``uses={"openai": 1}``) limited to 100/min with a burst of 20 (``longjobs limits set
openai --rate 100/min --burst 20``), 60 task slots: the production tick, runners and stores on
the twins behind the model of AWS (:class:`dispatcher.simulation.batch_model.BatchModel`, as
``bench/seed_scale.py``).

The bound: in any 60 s, at most rate x 60 s + burst = 120 tokens. Counted twice: the grants the
launches took (what the bucket promises), and the jobs' starts (what the limited service would
see of their calls at their start; a task's start time moves them). The floor of the drain is
the tokens past the burst at the rate ((1,000 - 20) / 100 per minute = 588 s) plus a job.

Prints the grants' and starts' most in any 60 s against the bound, the drain against its floor,
tasks started, calls per job, and last ``rate limits: most granted in any 60 s = X of Y``.

Run: .venv/bin/python bench/rate_limits.py [--jobs N] [--rate 100/min] [--burst 20]
"""

from __future__ import annotations

import argparse
import time

from dispatcher.domain import rate_limits
from dispatcher.simulation.batch_model import BatchModel
from dispatcher.simulation.batch_shape import Shape

WINDOW = 60.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rate", default="100/min")
    parser.add_argument("--burst", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=2.0, help="each job's mean length")
    parser.add_argument("--tasks", type=int, default=60, help="LONGJOBS_MAX_RUNNING_TASKS")
    args = parser.parse_args()
    per_second, _ = rate_limits.parse_rate(args.rate)
    bound = per_second * WINDOW + args.burst
    shape = Shape(jobs=args.jobs, seconds=args.seconds, tasks=args.tasks,
                  limit=("openai", args.rate, args.burst))
    print(f"rate limits: {shape.jobs} jobs of {shape.seconds:g} s, each a token of openai at "
          f"{args.rate}, burst {args.burst:g}; {shape.tasks} tasks x {shape.concurrency}",
          flush=True)
    t0 = time.monotonic()
    out = BatchModel(shape).run()
    granted = rate_limits.most_in_window(out.grants, WINDOW)
    started = rate_limits.most_in_window([(t, 1.0) for t in out.starts], WINDOW)
    floor = max(0.0, args.jobs - args.burst) / per_second + args.seconds
    calls = sum(sum(c.values()) for c in out.calls.values()) / max(1, out.jobs_run)
    print(f"  grants: {sum(n for _, n in out.grants):,.0f} tokens; most in any {WINDOW:.0f} s: "
          f"{granted:.0f} (bound {bound:.0f})")
    print(f"  starts: {len(out.starts):,} jobs; most in any {WINDOW:.0f} s: {started:.0f}")
    print(f"  drain {out.drain:.0f} s vs floor {floor:.0f} s ({out.drain / floor:.2f}); "
          f"{len(out.tasks)} tasks started; {out.jobs_run:,} jobs run; {calls:.3f} calls per "
          f"job; {time.monotonic() - t0:.0f} s wall")
    print(f"rate limits: most granted in any {WINDOW:.0f} s = {granted:.0f} of {bound:.0f}")


if __name__ == "__main__":
    main()
