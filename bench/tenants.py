"""Tenants' shares of the task slots, in virtual time: the reference batch's scale (60 tasks x 20
jobs at once, jobs of ~2 s), its jobs split among tenants of weights 3:2:1
(``longjobs tenants set T --weight W``), their backlogs interleaved on the queue, all of them
saturating: the production tick, runners and stores on the twins behind the model of AWS
(:class:`dispatcher.simulation.batch_model.BatchModel`, as ``bench/seed_scale.py``).

What each tenant got is its jobs' run seconds (every task is of one size and one tenant: its
jobs' run time is its share of the slots' time) over the window in which every tenant still had
work waiting: from the start to the first moment one of them had started its last job. The share
error of a tenant is how far its part of that is from its weight's part, as a fraction of the
weight's part; the worst of the three is the headline.

Prints each tenant's weight, run seconds and share against its target, the window, the drain,
calls per job, and last ``tenants: worst share error = X%``.

Run: .venv/bin/python bench/tenants.py [--jobs N] [--weights 3,2,1]
"""

from __future__ import annotations

import argparse
import time

from dispatcher.simulation.batch_model import BatchModel
from dispatcher.simulation.batch_shape import BatchRun, Shape


def shares(out: BatchRun, weights: dict[str, float]) -> tuple[float, dict[str, float]]:
    """The window's end (seconds from the start) and each tenant's run seconds within it."""
    end = min(out.tenant_last_start.get(t, 0.0) for t in weights)
    return end, {t: sum(s for second, s in out.tenant_work.get(t, {}).items() if second <= end)
                 for t in weights}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000,
                        help="all tenants' jobs together (the default: the reference batch)")
    parser.add_argument("--weights", default="3,2,1", help="the tenants' weights, in turn")
    parser.add_argument("--seconds", type=float, default=2.0, help="each job's mean length")
    parser.add_argument("--tasks", type=int, default=60, help="LONGJOBS_MAX_RUNNING_TASKS")
    args = parser.parse_args()
    weights = {f"t{n}": float(w) for n, w in enumerate(args.weights.split(","))}
    shape = Shape(jobs=args.jobs, seconds=args.seconds, tasks=args.tasks,
                  tenants=tuple(weights.items()))
    print(f"tenants: {shape.jobs} jobs of {shape.seconds:g} s in turn for "
          + ", ".join(f"{t} (weight {w:g})" for t, w in weights.items())
          + f"; {shape.tasks} tasks x {shape.concurrency}", flush=True)
    t0 = time.monotonic()
    model = BatchModel(shape)
    out = model.run()
    end, got = shares(out, weights)
    total, weight = sum(got.values()), sum(weights.values())
    errors = {}
    for t, w in weights.items():
        target = w / weight
        part = got[t] / total if total else 0.0
        errors[t] = abs(part - target) / target
        print(f"  {t}: weight {w:g}, {got[t]:,.0f} job-seconds in the window = {part:.1%} "
              f"of them (its weight's {target:.1%}): error {errors[t]:.1%}")
    calls = sum(sum(c.values()) for c in out.calls.values()) / max(1, out.jobs_run)
    print(f"window: the first {end:.0f} s (until a tenant had started its last job); drain "
          f"{out.drain:.0f} s; {out.jobs_run:,} jobs run; {calls:.3f} calls per job; "
          f"{time.monotonic() - t0:.0f} s wall")
    print(f"tenants: worst share error = {100 * max(errors.values()):.1f}%")


if __name__ == "__main__":
    main()
