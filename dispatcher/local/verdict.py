"""The demo's verdict: the job table and the handlers' own execution log must agree.

Every check is computed from what the run left behind (the table, the execution log the task
processes appended to, the dispatcher's decision records), never assumed from what the demo did.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from dispatcher.domain.arrays import child_id
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.local.demo_handlers import FLAKY_CHILD, MAP_JOB, REDUCE_JOB
from dispatcher.local.environment import LocalEnv
from dispatcher.store import OperatorStore, Store
from dispatcher.store.codec import record_rejection


class Run(Protocol):
    """What the verdict reads of a demo run (``dispatcher.local.demo.Scenario``)."""

    plan: Any
    store: Store
    env: LocalEnv
    held: int
    deployed: dict[str, Any]
    killed: dict[str, Any]
    urgent_sent: dict[str, Any]


def most_at_once(records: list[dict[str, Any]], prefix: str) -> int:
    """The most executions of jobs ``prefix*`` running at one time, from their own start and
    done records (a start without a done, e.g. a killed run, counts until the end)."""
    events = []
    for r in records:
        if str(r["job_id"]).startswith(prefix) and r.get("event") in ("start", "done"):
            events.append((float(r["at"]), 1 if r["event"] == "start" else -1))
    running = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start
        running += delta
        peak = max(peak, running)
    return peak


def overtook(records: list[dict[str, Any]], urgent: list[str], waiting: list[str]) -> bool:
    """The urgent jobs all finished before half of the normal jobs waiting when they were
    sent: in arrival order they would have finished after all of them."""
    done = {str(r["job_id"]): float(r["at"]) for r in records if r.get("event") == "done"}
    urgent_done = [done[j] for j in urgent if j in done]
    waiting_done = sorted(done[j] for j in waiting if j in done)
    if len(urgent_done) != len(urgent) or not waiting_done:
        return False
    return max(urgent_done) < waiting_done[len(waiting_done) // 2]

POISON_ATTEMPTS = 3


def read_log(path: Path) -> list[dict[str, Any]]:
    records = []
    with contextlib.suppress(FileNotFoundError):
        for raw in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                records.append(json.loads(raw))
    return records


def rejections(store: OperatorStore) -> list[tuple[str, str]]:
    """(key, reason) of every REJECTED record in the table."""
    out = []
    for item in store.list_jobs(JobState.REJECTED, limit=None):
        rej = record_rejection(item)
        out.append((rej.key, rej.reason))
    return out


def done_counts(records: list[dict[str, Any]]) -> Counter[str]:
    return Counter(r["job_id"] for r in records if r.get("event") == "done")


def verdict(s: Run, records: list[dict[str, Any]]) -> tuple[bool, str, list[tuple[str, str]]]:
    """The verdict line, the summary rows and whether every check held."""
    plan, store, env = s.plan, s.store, s.env
    ids = [*plan.good, "poison"]
    jobs = {j.job_id: j for i in range(0, len(ids), 100) for j in store.get_jobs(ids[i:i + 100])}
    done = done_counts(records)
    once = [j for j in plan.good if j in jobs and jobs[j].state == JobState.SUCCEEDED
            and done[j] == 1]
    duplicate_runs = [j for j in plan.good if done[j] > 1]
    lost = [j for j in ids if j not in jobs or jobs[j].state not in TERMINAL_JOB_STATES]
    poison = jobs.get("poison")
    raises = sum(1 for r in records if r["job_id"] == "poison" and r.get("event") == "raise")
    failed_ok = (poison is not None and poison.state == JobState.FAILED
                 and poison.attempts == POISON_ATTEMPTS == raises and done["poison"] == 0)
    rejected = rejections(store)
    absorbed = sum(d.intake.duplicates for d in list(env.decisions))
    checks = {"every good job succeeded exactly once (table and execution log)":
              len(once) == len(plan.good), "nothing lost": not lost,
              "no duplicate runs": not duplicate_runs,
              "poison job failed after its attempts": failed_ok,
              "the malformed message was rejected": len(rejected) == 1,
              "the duplicate was absorbed": absorbed >= 1 and done["small-0000"] == 1}

    small_bundles = {jobs[j["job_id"]].bundle_id for j in plan.small if j["job_id"] in jobs}
    alone = all((b := store.get_bundle(jobs[j["job_id"]].bundle_id or "")) is not None
                and b.job_ids == [j["job_id"]] for j in plan.long if j["job_id"] in jobs)
    checks["small jobs bundled"] = len(small_bundles) < max(2, len(plan.small))
    checks["long jobs alone"] = alone
    limit = int(env.cfg.kind_limits.get("demo.report", 0))
    peak = most_at_once(records, "report-")
    if plan.reports:
        checks[f"demo.report never ran more than {limit} at once"] = 1 <= peak <= limit
    waiting = s.urgent_sent.get("waiting", [])
    urgent_ids = [j["job_id"] for j in plan.urgent]
    if plan.urgent:
        checks["urgent jobs overtook the normal backlog"] = overtook(records, urgent_ids,
                                                                     waiting)
    tasks = Counter(t.request.task_definition for t in list(env.launcher.tasks.values()))
    per_rev = Counter(r.get("revision", "?") for r in records
                      if r.get("event") == "done" and str(r["job_id"]).startswith("small-"))
    rows = [("jobs", f"{len(ids)}: {len(plan.small)} small (0.05-0.5 s), {len(plan.long)} long "
                     f"(checkpoint every second), {len(plan.urgent)} urgent, "
                     f"{len(plan.reports)} demo.report (limited), 1 poison; + 1 duplicate, "
                     "1 malformed message"),
            ("admission", f"max {env.cfg.max_running_tasks} running tasks; up to {s.held} "
                          "messages held in SQS while every slot was taken"),
            ("bundling", f"{len(small_bundles)} bundles for {len(plan.small)} small jobs "
                         f"(avg {len(plan.small) / max(1, len(small_bundles)):.0f} jobs each); "
                         f"{len(plan.long)} long jobs, {'each' if alone else 'NOT'} alone in "
                         "its bundle"),
            ("tasks started", _fmt(tasks)),
            ("priority", f"{len(urgent_ids)} urgent jobs sent behind {len(waiting)} waiting "
                         "normal ones; all done before half of those: "
                         f"{overtook(records, urgent_ids, waiting)}"),
            ("kind limit", f"demo.report: at most {peak} of {len(plan.reports)} running at "
                           f"once (limit {limit})")]

    old, new = s.deployed.get("old"), s.deployed.get("new")
    kept = 0
    for spec in plan.long:
        job = jobs.get(spec["job_id"])
        if job is None:
            continue
        revs = [str(h.get("task_definition", "?")) for h in job.history]
        shown = " -> ".join(r.rsplit(":", 1)[-1] for r in revs)
        starts = [r for r in records if r["job_id"] == job.job_id and r.get("event") == "start"]
        resumed = [int(r.get("resumed_from", 0)) for r in starts]
        rows.append((job.job_id, f"{job.state} ({spec['payload']['steps']} steps), attempts "
                                 f"{job.attempts}, infra_attempts {job.infra_attempts}, "
                                 f"revision(s) {shown}, resumed_from {resumed}"))
        if job.job_id == plan.kill_job:
            delay = (starts[-1]["at"] - s.killed["at"]) if s.killed and len(starts) > 1 else -1
            checks["killed job resumed from its checkpoint"] = (
                len(starts) == 2 and resumed[-1] >= s.killed.get("step", 1) > 0)
            checks["rerun within seconds"] = 0 <= delay <= 15
            checks["the kill spent no retry (attempts 1, infra_attempts 1)"] = (
                job.attempts == 1 and job.infra_attempts == 1)
            checks["the rerun started on the new revision"] = revs == [old, new]
            if s.killed:
                rows.append(("kill", f"SIGKILL {s.killed['task'][-8:]} at checkpoint "
                                     f"{s.killed['step']}; rerun started {delay:.1f} s later, "
                                     f"resumed_from {resumed[-1]}"))
        elif revs == [old] and job.history and \
                s.deployed.get("at", 0) < job.history[0].get("ended_at", 0):
            # Launched before the deploy (its revision is the old one: a launch resolves the
            # current one), not done at the deploy (running, or still starting on a loaded
            # machine), and finished on the revision it was launched with.
            kept += 1
    if len(plan.long) > 1:
        checks["tasks running at the deploy finished on the old revision"] = kept >= 1
    rows.append(("deploy", f"{old} -> {new} at {s.deployed.get('elapsed', 0):.1f} s; "
                           f"{kept} running long job(s) finished on {old}; small jobs per "
                           f"revision: {_fmt(per_rev)}"))
    if poison is not None:
        # The reason usually counts the attempts itself ("failed after 3 attempts: ...").
        said = "attempts" in (poison.reason or "")
        rows.append(("poison", f"{poison.state}: {poison.reason}" if said else
                     f"{poison.state} after {poison.attempts} attempts: {poison.reason}"))
    rows += [("rejected", f"{k}: {r}") for k, r in rejected]
    rows.append(("duplicate", f"small-0000 sent twice, ran {done['small-0000']} time(s); "
                              f"{absorbed} duplicate deliveries de-duplicated at intake "
                              "(SQS redeliveries included)"))
    stuck = sum(d.reconcile.stuck_stopped for d in list(env.decisions))
    rows.append(("reconciliation", f"{stuck} silent task(s) stopped (heartbeat every "
                                   f"{env.cfg.heartbeat_seconds} s)"))
    array_runs = sum(n for j, n in done.items() if j.startswith(f"{MAP_JOB}:")
                     or j == REDUCE_JOB)
    sent = sum(done[j] for j in plan.good)
    rows.append(("execution log", f"{sum(done.values())} runs ended: {sent} of the "
                                  f"{len(plan.good)} jobs sent one by one, "
                                  f"{array_runs} of the array's children and its reduce; "
                                  f"{len(duplicate_runs)} job(s) ran twice"))
    if plan.map_size:
        held, row = map_reduce(store, records, plan.map_size)
        checks["the map-reduce: each child once, the flaky one after one failure, the reduce "
               "once after the last child"] = held
        rows.append(("map-reduce", row))
    failed = [name for name, held in checks.items() if not held]
    rows.append(("checks", f"all {len(checks)} held" if not failed
                 else f"{len(failed)} of {len(checks)} FAILED"))
    rows += [("  held" if held else "  FAILED", name) for name, held in checks.items()]
    line = (f"demo: {len(plan.good)} jobs, {len(once)} succeeded exactly once, "
            f"{1 if failed_ok else 0} failed as expected, {len(rejected)} rejected, "
            f"{len(lost)} lost, {len(duplicate_runs)} duplicate runs"
            + (f"; and an array of {plan.map_size} children with its reduce (the live table "
               "counts them, their parent too)" if plan.map_size else ""))
    return not failed, line, rows


def map_reduce(store: Store, records: list[dict[str, Any]], size: int) -> tuple[bool, str]:
    """The demo's array and its reduce, from the table and the execution log: every child
    succeeded and is recorded done once, the flaky child raised once first, the reduce ran
    once, after the last child's done record."""
    children = [child_id(MAP_JOB, i) for i in range(size)]
    jobs = {j.job_id: j for i in range(0, size, 100)
            for j in store.get_jobs(children[i:i + 100])}
    done = done_counts(records)
    ok = [c for c in children if c in jobs and jobs[c].state == JobState.SUCCEEDED
          and done[c] == 1]
    flaky = child_id(MAP_JOB, FLAKY_CHILD)
    raised = sum(1 for r in records if r["job_id"] == flaky and r.get("event") == "raise")
    parent, reduce_job = store.get_job(MAP_JOB), store.get_job(REDUCE_JOB)
    last_child = max((float(r["at"]) for r in records
                      if str(r["job_id"]).startswith(MAP_JOB + ":") and r.get("event") == "done"),
                     default=0.0)
    reduced = [float(r["at"]) for r in records
               if r["job_id"] == REDUCE_JOB and r.get("event") == "done"]
    held = (len(ok) == size and raised == 1 and parent is not None
            and parent.state == JobState.SUCCEEDED and reduce_job is not None
            and reduce_job.state == JobState.SUCCEEDED and len(reduced) == 1
            and reduced[0] > last_child)
    after = f"{reduced[0] - last_child:.1f} s after the last child" if reduced else "never"
    return held, (f"{MAP_JOB}: {len(ok)} of {size} children succeeded once from one message "
                  f"(child {FLAKY_CHILD} raised {raised} time(s) first), parent "
                  f"{parent.state if parent else '?'}; {REDUCE_JOB} ran {len(reduced)} "
                  f"time(s), {after}")


def _fmt(counts: Counter[str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
