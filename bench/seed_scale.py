"""The reference batch at its full scale, in virtual time: the production dispatcher on the twins
behind a model of AWS's latencies and limits.

The reference batch: 200,000 jobs of ~2 s, 60 tasks x 20 at once; its floor is
200,000 x 2 s / 1,200 = 333 s plus one Fargate start (30-60 s, 45 s mean). ``bench/nightly.py``
runs it scaled down through local mode with real runner processes; this runs it at full scale
with the real tick, admission, bundling, recording, launches, stop events and reconcile, and the
real store, on the in-memory twins, where each AWS call costs its modelled latency in virtual
time (:mod:`dispatcher.simulation.aws_model`, figures and sources there), Fargate's launch limits
are enforced (RunTask 20/s; 100 tasks at once and 20/s per capacity provider), each task starts
30-60 s after its RunTask and runs its bundle as the runner does, 20 jobs at once, writing
through the real runner store (:mod:`dispatcher.simulation.task_model`). The tick is one Lambda
invocation a minute with its 15 minutes.

Prints: drain time (end of enqueueing to the last job done), the floor, admitted jobs/s (peak
over one virtual second, and mean), launched tasks/s, the spread of the tasks' end times, the
ticks, calls per job by API and component, this process's peak RSS (the twins' state included),
what ran as the model's ledger judges it (jobs lost, jobs with two runs alive at once, jobs run
past their budget: :mod:`dispatcher.simulation.run_ledger`; any exits 1), and last
``seed: drain/floor = X.XX``. ``--backlog N``: one tick admitting from a backlog of N
messages instead (no tasks run), with its admission rate and the peak RSS it added.

Run: .venv/bin/python bench/seed_scale.py [--jobs N] [--seconds D] [--urgent-at 60]
[--tenant-at 120] [--faults [--crash-after WRITES]] (``--faults``: the last line reads ``seed
under faults: drain/floor = X.XX``; ``--tenant-at``: a job of another tenant, sent then behind
the batch's backlog, and when it started)
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from dispatcher.simulation.aws_model import Latencies, per_job
from dispatcher.simulation.batch_figures import start_latencies
from dispatcher.simulation.batch_model import BatchModel
from dispatcher.simulation.batch_shape import BatchRun, Shape
from dispatcher.simulation.faults import REFERENCE_CRASH_WRITES, Faults, TickCrash
from dispatcher.simulation.forgetful_table import KEEP_SECONDS

# The stack's promise for a high-priority job sent while every slot is busy: it starts within
# a minute (the tick's watch hands it to a running task).
URGENT_WITHIN = 60.0


def vm_kib(field: str = "VmHWM") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux: ``5`` to clear_refs); False if not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def rates(times: list[float]) -> tuple[float, float]:
    """(peak per 1-second bin, mean over first to last) of the events at ``times``."""
    if not times:
        return 0.0, 0.0
    peak = max(Counter(int(t) for t in times).values())
    span = max(times) - min(times)
    return float(peak), len(times) / span if span > 0 else float(len(times))


def fault_lines(shape: Shape, out: BatchRun, model: BatchModel) -> list[str]:
    """What the faults did (``--faults``)."""
    f = shape.faults
    killed = sum(t.killed_at is not None for t in out.tasks)
    lines = [f"faults: {len(out.tasks)} tasks: {out.reclaimed} got a Spot reclaim's SIGTERM "
             f"({f.reclaimed:.0%} drawn), {killed} killed while they ran (crashed "
             f"{f.killed:.0%} drawn, reclaimed and still running 2 min later, or their runner "
             f"failed: {out.failed_runners}"
             + (f", first: {out.runner_errors[0]}" if out.runner_errors else "")
             + f"); stop events twice {f.event_twice:.0%}, late "
             f"{f.event_late:.0%} (by {f.late_by:g} s), lost {f.event_lost:.0%}; "
             f"{out.failed_events} stop events failed in their handler (delivered again)"]
    throttled = {c: (calls.draws.throttled, calls.draws.failed)
                 for c, calls in model.calls.items() if calls.draws.throttled}
    if f.calls.any:
        lines.append(f"  calls: {f.calls.throttled:.0%} of the DynamoDB and ECS calls throttled "
                     f"(a retry again {f.calls.throttled_again:.0%}), latency p99 "
                     f"{f.calls.tail_p99:g}x its median; attempts throttled (calls that gave "
                     "up): " + (", ".join(f"{c} {n} ({g})" for c, (n, g) in throttled.items())
                                or "none"))
    if f.tick_crash is not None:
        crashed = ", ".join(f"+{t:.0f} s" for t in out.crashed_ticks) or "none"
        lines.append(f"  tick {f.tick_crash.tick + 1} set to die after "
                     f"{f.tick_crash.after_writes} writes; ticks died at: {crashed}; ticks "
                     f"that raised: {len(out.failed_ticks)}"
                     + (f" (first: {out.failed_ticks[0]})" if out.failed_ticks else ""))
    return lines


def partition_line(model: BatchModel) -> str:
    """What DynamoDB's limit of 1,000 WCU a second per partition key did to the run."""
    p = model.partitions
    return (f"partitions: hottest {p.hottest.key or '-'} took {p.hottest.wcu:,.0f} WCU in a "
            f"second (limit {p.limit:,.0f}); {p.throttled:,} write attempts throttled for a "
            f"key past it" + ("" if not p.throttled else ": the table's writes set the bound"))


def report(shape: Shape, out: BatchRun, wall: float) -> list[str]:
    n = shape.jobs
    lines = [f"drain: {out.drain:.1f} s (end of enqueueing to the last job done; "
             f"{out.jobs_run} jobs run)",
             f"floor: {shape.floor:.1f} s = {n} x {shape.seconds:g} s / ({shape.tasks} x "
             f"{shape.concurrency}) + {sum(shape.start) / 2:g} s mean start"]
    peak, mean = rates(out.admitted_at)
    if out.admitted_at:
        lines.append(f"admitted: {len(out.admitted_at)} jobs from +{out.admitted_at[0]:.1f} s "
                     f"to +{out.admitted_at[-1]:.1f} s: peak {peak:,.0f} jobs/s, mean "
                     f"{mean:,.0f} jobs/s")
    batch = [t for t in out.tasks if not t.urgent]
    launched = sorted(t.launched_at for t in batch)
    if launched:
        lpeak, lmean = rates(launched)
        lines.append(f"launched: {len(launched)} tasks from +{launched[0]:.1f} s to "
                     f"+{launched[-1]:.1f} s: peak {lpeak:.0f} tasks/s, mean {lmean:.1f} "
                     f"tasks/s")
    ends = sorted(t.ended_at for t in batch if t.ended_at is not None and t.jobs_run)
    if ends:
        spread = ends[-1] - ends[0]
        lines.append(f"task ends: first +{ends[0]:.1f} s, last +{ends[-1]:.1f} s: spread "
                     f"{spread:.1f} s = {100 * spread / max(out.drain, 1e-9):.1f} % of the "
                     f"drain ({len(ends)} tasks ran jobs)")
    for start, end, tick in out.ticks[:8]:
        lines.append(f"  tick at +{start:.0f} s: {end - start:.1f} s, received "
                     f"{tick.intake.received}, admitted {tick.intake.admitted}, "
                     f"{tick.intake.bundles_recorded} bundles, launched "
                     f"{tick.launch.bundles_launched} (paced {tick.launch.paced_seconds:.1f} s)"
                     + (f"; looked at the high queue {tick.handoff.looks}x while draining"
                        if tick.handoff.looks else "")
                     + (f"; handed {tick.handoff.handed} urgent" if tick.handoff.handed else ""))
    lines.append(f"ticks: {len(out.ticks)} run, {out.skipped_ticks} skipped (lease held)")
    if shape.urgent_at is not None:
        started = "never" if out.urgent_started is None else f"+{out.urgent_started:.1f} s"
        lines.append(f"urgent job: submitted at +{shape.urgent_at:g} s, started {started}")
    if shape.tenant_at is not None:
        started = "never" if out.tenant_started is None else f"+{out.tenant_started:.1f} s"
        lines.append(f"another tenant's job: sent at +{shape.tenant_at:g} s behind the batch, "
                     f"started {started}")
    total = sum(sum(c.values()) for c in out.calls.values())
    lines.append(f"AWS calls per job: {total / n:.3f} end to end ("
                 + ", ".join(f"{c} {sum(v.values()) / n:.3f}" for c, v in out.calls.items())
                 + ")")
    for c, v in out.calls.items():
        lines.append(f"  {c}: {per_job(v, n)}")
    lines.append(f"peak RSS (VmHWM) of this process (dispatcher, twins, model): "
                 f"{vm_kib() / 1024:.0f} MiB; wall {wall:.0f} s")
    under = " under faults" if shape.faults.any else ""
    lines.append(f"seed{under}: drain/floor = {out.drain / shape.floor:.2f}")
    return lines


def backlog(args: argparse.Namespace, shape: Shape) -> None:
    """One tick from a backlog of ``args.backlog`` messages (tasks are launched, never run)."""
    from dispatcher.simulation.jobless_table import JoblessTable

    model = BatchModel(shape, backlog=args.backlog, table=JoblessTable())
    base = vm_kib("VmRSS")
    reset = reset_peak()
    t0 = time.monotonic()
    start, end, tick = model.one_tick()
    wall = time.monotonic() - t0
    admitting = model.items.last_job_write - start
    print(f"backlog {args.backlog:,}: one tick of {end - start:.1f} s (virtual) admitted "
          f"{tick.intake.admitted:,} jobs in {tick.intake.bundles_recorded} bundles, recorded "
          f"within {admitting:.1f} s = {tick.intake.admitted / max(admitting, 1e-9):,.0f} "
          f"jobs/s; {tick.launch.bundles_launched} launched; wall {wall:.0f} s")
    print(f"backlog {args.backlog:,}: RSS before the tick {base / 1024:.0f} MiB, peak during it "
          f"{vm_kib() / 1024:.0f} MiB" + ("" if reset else " (VmHWM not resettable here)"))

def stream(shape: Shape, minutes: float) -> None:
    """A steady stream of ``shape.jobs`` jobs at ``shape.rate`` a second: the time from each
    job's sending to its first start, and what ran."""
    assert shape.rate
    print(f"stream: {shape.jobs:,} jobs of {shape.seconds:g} s at {shape.rate:g} a second "
          f"for {minutes:g} min, {shape.tasks} tasks x {shape.concurrency} "
          f"(pid {os.getpid()})", flush=True)
    t0 = time.monotonic()
    # An hour's 1.8 million jobs, not all at once: each forgotten 10 minutes after it ended.
    model = BatchModel(shape, forget_ended=KEEP_SECONDS)
    out = model.run()
    wall = time.monotonic() - t0
    waits = sorted(start_latencies(shape, model.sqs, model.ledger))
    busy = shape.rate * shape.seconds / (shape.tasks * shape.concurrency)
    verdict = model.verdict()
    launched = len(out.tasks)
    total = sum(sum(c.values()) for c in out.calls.values())
    if waits:
        print(f"send to start: p50 {waits[len(waits) // 2]:.1f} s, p90 "
              f"{waits[int(0.9 * len(waits))]:.1f} s, p99 {waits[int(0.99 * len(waits))]:.1f} s, "
              f"max {waits[-1]:.1f} s ({len(waits):,} jobs)")
    print(f"slots: the stream keeps {busy:.0%} of them busy on average; {launched:,} tasks "
          f"launched, {len(out.ticks)} ticks run, {out.skipped_ticks} skipped")
    print(f"AWS calls per job: {total / shape.jobs:.3f} end to end ("
          + ", ".join(f"{c} {sum(v.values()) / shape.jobs:.3f}" for c, v in out.calls.items())
          + ")")
    print(f"peak RSS (VmHWM) of this process: {vm_kib() / 1024:.0f} MiB; wall {wall:.0f} s")
    print(partition_line(model))
    print(f"runs: {verdict.line()}")
    p99 = waits[int(0.99 * len(waits))] if waits else float("inf")
    print(f"stream: send-to-start p99 = {p99:.1f} s")
    if not verdict.holds:
        raise SystemExit(1)


def cost_line(model: BatchModel) -> str:
    """What the batch's tasks cost, as their stops billed them (dispatcher/domain/costs.py):
    per 1,000 jobs, at the default prices, on the modelled capacity (four Spot tasks to one
    on demand, 0.25 vCPU and 0.5 GB each)."""
    bills = list(model.outcome.bills.values())
    prices = model.cfg.prices
    total = sum(b.cost(prices) for b in bills)
    spot = sum(b.spot for b in bills)
    billed = sum(b.seconds for b in bills)
    return (f"cost: ${1000 * total / model.shape.jobs:.6f} per 1,000 jobs (${total:.4f} for "
            f"{len(bills)} tasks, {spot} of them Spot, {billed / 3600:.1f} task-hours billed)")


def faults(args: argparse.Namespace) -> Faults:
    if not args.faults:
        return Faults()
    reference = Faults.reference()
    if args.crash_after is None:
        return reference
    crash = TickCrash(0, args.crash_after) if args.crash_after > 0 else None
    return replace(reference, tick_crash=crash)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=2.0, help="each job's mean length")
    parser.add_argument("--tasks", type=int, default=60, help="LONGJOBS_MAX_RUNNING_TASKS")
    parser.add_argument("--concurrency", type=int, default=20, help="jobs at once per task")
    parser.add_argument("--start", default="30-60", help="Fargate start latency, s (min-max)")
    parser.add_argument("--tick-interval", type=float, default=60.0)
    parser.add_argument("--latency-scale", type=float, default=1.0,
                        help="multiplies every modelled AWS latency")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a LONGJOBS_* setting of the dispatcher and runner")
    parser.add_argument("--urgent-at", type=float, default=None,
                        help="submit one high-priority job this many seconds into the batch")
    parser.add_argument("--tenant-at", type=float, default=None,
                        help="send one job of another tenant (the batch's have none) this many "
                        "seconds into the batch, behind its backlog")
    parser.add_argument("--faults", action="store_true",
                        help="under the reference faults (dispatcher/simulation/faults.py): "
                        "5 %% of the tasks reclaimed (SIGTERM, then the kill), 1 %% crashed, "
                        "5 %% of their stop events delivered twice, 5 %% late, 2 %% lost; 1 %% "
                        "of the calls throttled, latency p99 10x the median; the first tick's "
                        "Lambda killed mid-drain; and an urgent job sent 60 s in (--urgent-at)")
    parser.add_argument("--crash-after", type=int, default=None, metavar="WRITES",
                        help="with --faults: the first tick's Lambda dies after this many of "
                        f"its writes (default {REFERENCE_CRASH_WRITES:,}; 0: it does not die)")
    parser.add_argument("--rate", type=float, default=None, metavar="JOBS_PER_S",
                        help="instead of a batch: a steady stream of this many jobs a second "
                        "for --minutes; the last line is its p99 time from send to start")
    parser.add_argument("--minutes", type=float, default=60.0, help="with --rate")
    parser.add_argument("--backlog", type=int, default=None,
                        help="instead: one tick from a backlog of this many messages")
    args = parser.parse_args()
    low, _, high = args.start.partition("-")
    jobs = round(args.rate * args.minutes * 60) if args.rate else args.jobs
    shape = Shape(jobs=jobs, rate=args.rate, seconds=args.seconds, tasks=args.tasks,
                  concurrency=args.concurrency, start=(float(low), float(high or low)),
                  tick_interval=args.tick_interval,
                  latencies=Latencies().scaled(args.latency_scale),
                  settings=dict(s.split("=", 1) for s in args.set),
                  urgent_at=60.0 if args.faults and args.urgent_at is None else args.urgent_at,
                  tenant_at=args.tenant_at,
                  faults=faults(args))
    if args.backlog is not None:
        backlog(args, shape)
        return
    if shape.rate:
        stream(shape, args.minutes)
        return
    print(f"seed: {shape.jobs} jobs of {shape.seconds:g} s, {shape.tasks} tasks x "
          f"{shape.concurrency}, start {args.start} s, a tick every {shape.tick_interval:g} s "
          f"(pid {os.getpid()})", flush=True)
    t0 = time.monotonic()
    model = BatchModel(shape)
    out = model.run()
    lines = report(shape, out, time.monotonic() - t0)  # its peak RSS before the ledger's look
    if shape.faults.any:
        lines[-1:-1] = fault_lines(shape, out, model)
    lines.insert(-1, partition_line(model))
    lines.insert(-1, cost_line(model))
    verdict = model.verdict()
    # What ran, judged by the run's own ledger: a drain that lost or doubled a job is no figure.
    lines.insert(-1, f"runs: {verdict.line()}")
    late = shape.urgent_at is not None and (
        out.urgent_started is None or out.urgent_started - shape.urgent_at > URGENT_WITHIN)
    if late:
        lines.insert(-1, f"urgent job: not started within {URGENT_WITHIN:g} s of its sending")
    print("\n".join(lines))
    if not verdict.holds or late:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
