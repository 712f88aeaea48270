"""``longjobs demo``: a nightly-batch burst against a fresh local environment, checked at the end.

What it shows, in one run: admission holding a burst in SQS (``max_running_tasks`` is low),
small jobs bundled and long ones alone, a task SIGKILLed mid-job and rerun from its checkpoint
without spending a retry, a deploy mid-run that running tasks never notice, a poison job failing
after its attempts, a malformed message rejected and a duplicate absorbed.

The verdict is computed, not assumed: the job table AND the handlers' own execution log
(``demo_handlers``, written by the task processes themselves) must agree that every good job
succeeded exactly once. Extra checks (the kill, the deploy, bundling) also gate the exit code.
Everything random comes from ``--seed``; the kill and the deploy are triggered by the killed
job's checkpoints, not by wall-clock time, so a slower machine sees the same story.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from dispatcher.aws.dynamodb import open_store
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.local.environment import LocalEnv
from dispatcher.local.provision import Names, register_task_definition
from dispatcher.local.view import Say, Snapshot, View, make_view
from dispatcher.ops.client import JobClient
from dispatcher.ports.store import OperatorStore
from dispatcher.ports.store.records import record_rejection
from dispatcher.stages.rerun import StopOutcome

HANDLERS = ("demo.sleep=dispatcher.local.demo_handlers:sleep,"
            "demo.steps=dispatcher.local.demo_handlers:steps,"
            "demo.poison=dispatcher.local.demo_handlers:poison")
# moto's SQS slows with queue depth (~170 ms a call at 500 deep), so the burst goes in waves:
# the next wave is sent when the backlog drops under REFILL_BELOW. Admission still holds work.
WAVE = 100
REFILL_BELOW = 50
POISON_ATTEMPTS = 3


@dataclass
class Script:
    """The whole scenario, derived from the seed before anything runs."""

    small: list[dict[str, Any]]
    long: list[dict[str, Any]]
    poison: dict[str, Any]
    kill_job: str
    deploy_at: int  # checkpoint step of kill_job at which the new revision is registered
    kill_at: int  # checkpoint step of kill_job at which its task is SIGKILLed

    @property
    def good(self) -> list[str]:
        return [j["job_id"] for j in self.long + self.small]


def make_script(small: int, long: int, seed: int, long_seconds: tuple[int, int]) -> Script:
    rng = random.Random(seed)
    smalls: list[dict[str, Any]] = []
    for i in range(small):
        seconds = round(rng.uniform(0.05, 0.5), 3)
        smalls.append({"kind": "demo.sleep", "job_id": f"small-{i:04d}",
                       "payload": {"seconds": seconds}, "estimated_seconds": seconds})
    longs: list[dict[str, Any]] = []
    for i in range(max(1, long)):
        steps = rng.randint(*long_seconds)
        longs.append({"kind": "demo.steps", "job_id": f"long-{i}", "max_attempts": 2,
                      "payload": {"steps": steps, "step_seconds": 1.0},
                      "estimated_seconds": float(steps)})
    target = max(longs, key=lambda j: int(j["payload"]["steps"]))
    steps = int(target["payload"]["steps"])
    kill_at = rng.randint(max(2, steps * 2 // 5), max(2, steps // 2))
    deploy_at = max(1, kill_at - rng.randint(2, 4))
    poison: dict[str, Any] = {"kind": "demo.poison", "job_id": "poison", "payload": {},
                              "max_attempts": POISON_ATTEMPTS, "estimated_seconds": 0.1}
    return Script(smalls, longs, poison, target["job_id"], deploy_at, kill_at)


@dataclass
class Scenario:
    """Drives the run from the demo's thread: feeds waves, deploys, kills, measures."""

    env: LocalEnv
    plan: Script
    view: View
    started: float = field(default_factory=time.monotonic)
    waves: list[list[dict[str, Any]]] = field(default_factory=list)
    submitted: int = 0
    duplicate_sent: bool = False
    deployed: dict[str, Any] = field(default_factory=dict)
    killed: dict[str, Any] = field(default_factory=dict)
    held: int = 0  # deepest backlog seen while every task slot was taken

    def __post_init__(self) -> None:
        self.store = open_store(self.env.cfg.table)
        self.client = JobClient()
        p = self.plan
        first = [*p.long, p.poison, *p.small[:WAVE]]  # long jobs first: they are the long pole
        self.waves = [first] + [p.small[i:i + WAVE] for i in range(WAVE, len(p.small), WAVE)]

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def submit_burst(self) -> None:
        self._send_wave()
        sqs = boto3.client("sqs", endpoint_url=self.env.endpoint)
        sqs.send_message(QueueUrl=self.env.cfg.queue_url, MessageBody='{"kind": "oops"')
        self.submitted += 1
        total = len(self.plan.good) + 1
        self.event(f"burst: {len(self.plan.small)} small jobs, {len(self.plan.long)} long "
                   f"jobs, 1 poison job ({total} jobs) + 1 malformed message; "
                   f"max {self.env.cfg.max_running_tasks} running tasks; sent in waves "
                   f"of {WAVE} as the backlog drains")

    def _send_wave(self) -> None:
        wave = self.waves.pop(0)
        self.client.submit_many(wave)
        self.submitted += len(wave)

    def snapshot(self) -> Snapshot:
        backlog = self.env.stages.queue.backlog()
        counts = {s: self.store.count_jobs(JobState(s)) for s in ("SUCCEEDED", "FAILED")}
        decisions = list(self.env.decisions)  # the dispatcher's own decision records
        return Snapshot(
            elapsed=self.elapsed(), submitted=self.submitted,
            backlog=backlog.visible + backlog.in_flight,
            admitted=sum(d.intake.admitted for d in decisions),
            running_tasks=len(self.env.launcher.running()), succeeded=counts["SUCCEEDED"],
            failed=counts["FAILED"], reruns=reruns(self.env),
            revision=decisions[-1].task_definition or "" if decisions else "",
            bundles=sum(d.new_bundles for d in decisions), tasks=len(self.env.launcher.tasks))

    def event(self, text: str) -> None:
        self.view.event(f"[{self.elapsed():5.1f}s] {text}")

    def act(self, snap: Snapshot) -> None:
        if snap.running_tasks >= self.env.cfg.max_running_tasks:
            self.held = max(self.held, snap.backlog)
        if self.waves and snap.backlog < REFILL_BELOW:
            self._send_wave()
        if not self.duplicate_sent and self.store.get_job("small-0000") is not None:
            original = self.plan.small[0]
            self.client.submit(original["kind"], original["payload"], job_id="small-0000",
                               estimated_seconds=original["estimated_seconds"])
            self.duplicate_sent = True
            self.submitted += 1
            self.event("a producer retry re-sends small-0000, already admitted")
        if not self.killed:
            self._deploy_then_kill()

    def _deploy_then_kill(self) -> None:
        job = self.store.get_job(self.plan.kill_job)
        step = int((job.checkpoint or {}).get("step", 0)) if job else 0
        if not self.deployed and step >= self.plan.deploy_at:
            old = self.env.launcher.resolve_task_definition()
            ecs = boto3.client("ecs", endpoint_url=self.env.endpoint)
            arn = register_task_definition(ecs, Names(family=self.env.cfg.task_family),
                                           image="longjobs-worker:v2",
                                           env={"LONGJOBS_TABLE": self.env.cfg.table})
            new = arn.rsplit("/", 1)[-1]
            self.deployed = {"old": old, "new": new, "at": time.time(), "step": step,
                             "elapsed": self.elapsed()}
            self.event(f"deploy: registered {new} ({old} was current); running tasks "
                       "keep theirs, new bundles get the new one")
        if self.deployed and job is not None and step >= self.plan.kill_at and job.bundle_id:
            bundle = self.store.get_bundle(job.bundle_id)
            if bundle and bundle.task_arn and bundle.task_arn in self.env.launcher.running():
                self.env.launcher.kill(bundle.task_arn)
                self.killed = {"task": bundle.task_arn, "step": step, "at": time.time()}
                self.event(f"SIGKILL task {bundle.task_arn[-8:]} ({self.plan.kill_job}, "
                           f"checkpoint step {step}): simulated host loss")

    def finished(self, snap: Snapshot) -> bool:
        expected = len(self.plan.good) + 1  # + the poison job
        return (not self.waves and self.duplicate_sent and bool(self.killed)
                and snap.succeeded + snap.failed >= expected)




def reruns(env: LocalEnv) -> int:
    return sum(1 for e in list(env.events) if isinstance(e, StopOutcome) and e.rerun)


def run(*, small: int = 500, long: int = 4, seed: int = 1, max_running: int = 6,
        bundle_jobs: int = 25, long_seconds: tuple[int, int] = (20, 40),
        timeout: float = 165.0, say: Say | None = None) -> tuple[bool, str]:
    """Run the scenario; return (every invariant held, the verdict line).

    ``say`` captures plain output (tests); without it a terminal gets the live table.
    """
    plan = make_script(small, long, seed, long_seconds)
    workdir = Path(tempfile.mkdtemp(prefix="longjobs-demo-"))
    log = workdir / "executions.jsonl"
    settings = {"LONGJOBS_HANDLERS": HANDLERS, "LONGJOBS_DEMO_LOG": str(log),
                "LONGJOBS_MAX_RUNNING_TASKS": str(max_running),
                "LONGJOBS_BUNDLE_MAX_JOBS": str(bundle_jobs), "LONGJOBS_SMALL_JOB_SECONDS": "5",
                "LONGJOBS_HEARTBEAT_SECONDS": "5", "LONGJOBS_FLUSH_SECONDS": "1",
                "LONGJOBS_LAUNCH_BACKOFF_SECONDS": "1"}
    view = make_view(say)
    try:
        with _quiet_info_logs(), LocalEnv(settings=settings, tick_seconds=1.0,
                                          output=subprocess.DEVNULL) as env:
            scenario = Scenario(env, plan, view)
            with view:
                scenario.submit_burst()
                deadline = time.monotonic() + timeout
                snap = scenario.snapshot()
                while time.monotonic() < deadline and not scenario.finished(snap):
                    scenario.act(snap)
                    time.sleep(0.25 if scenario.deployed and not scenario.killed else 0.5)
                    snap = scenario.snapshot()
                    view.update(snap)
                _settle(env)
                view.update(scenario.snapshot(), force=True)
            ok, line, rows = verdict(scenario, _read_log(log))
            view.summary("longjobs demo: summary", rows)
            return ok, line
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def _quiet_info_logs() -> Iterator[None]:
    """The dispatcher's INFO records (one JSON decision per tick, one per task exit) would bury
    the demo's own output; warnings still show. Levels are restored for whoever runs next."""
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
               if n == "longjobs" or n.startswith("longjobs.")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _settle(env: LocalEnv, seconds: float = 15.0) -> None:
    """Let the last tasks exit on their own, so their exits are handled before the verdict."""
    end = time.monotonic() + seconds
    while env.launcher.running() and time.monotonic() < end:
        time.sleep(0.2)


def _read_log(path: Path) -> list[dict[str, Any]]:
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


def verdict(s: Scenario, records: list[dict[str, Any]]) -> tuple[bool, str, list[tuple[str, str]]]:
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
    tasks = Counter(t.request.task_definition for t in list(env.launcher.tasks.values()))
    per_rev = Counter(r.get("revision", "?") for r in records
                      if r.get("event") == "done" and str(r["job_id"]).startswith("small-"))
    rows = [("jobs", f"{len(ids)}: {len(plan.small)} small (0.05-0.5 s), {len(plan.long)} long "
                     f"(checkpoint every second), 1 poison; + 1 duplicate, 1 malformed message"),
            ("admission", f"max {env.cfg.max_running_tasks} running tasks; up to {s.held} "
                          "messages held in SQS while every slot was taken"),
            ("bundling", f"{len(small_bundles)} bundles for {len(plan.small)} small jobs "
                         f"(avg {len(plan.small) / max(1, len(small_bundles)):.0f} jobs each); "
                         f"{len(plan.long)} long jobs, {'each' if alone else 'NOT'} alone in "
                         "its bundle"),
            ("tasks started", _fmt(tasks))]

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
        elif revs == [old] and job.history and job.history[0].get("started_at", 0) < \
                s.deployed.get("at", 0) < job.history[0].get("ended_at", 0):
            kept += 1  # running across the deploy, finished on the revision it started on
    if len(plan.long) > 1:
        checks["tasks running at the deploy finished on the old revision"] = kept >= 1
    rows.append(("deploy", f"{old} -> {new} at {s.deployed.get('elapsed', 0):.1f} s; "
                           f"{kept} running long job(s) finished on {old}; small jobs per "
                           f"revision: {_fmt(per_rev)}"))
    if poison is not None:
        rows.append(("poison", f"{poison.state} after {poison.attempts} attempts: "
                               f"{poison.reason}"))
    rows += [("rejected", f"{k}: {r}") for k, r in rejected]
    rows.append(("duplicate", f"small-0000 sent twice: {absorbed} de-duplicated at intake, "
                              f"ran {done['small-0000']} time(s)"))
    stuck = sum(d.reconcile.stuck_stopped for d in list(env.decisions))
    rows.append(("reconciliation", f"{stuck} silent task(s) stopped (heartbeat every "
                                   f"{env.cfg.heartbeat_seconds} s)"))
    rows.append(("execution log", f"{sum(done.values())} done records for {len(plan.good)} good "
                                  f"jobs, {len(duplicate_runs)} ran twice"))
    failed = [name for name, held in checks.items() if not held]
    rows.append(("checks", f"all {len(checks)} held" if not failed
                 else "FAILED: " + "; ".join(failed)))
    line = (f"demo: {len(plan.good)} jobs, {len(once)} succeeded exactly once, "
            f"{1 if failed_ok else 0} failed as expected, {len(rejected)} rejected, "
            f"{len(lost)} lost, {len(duplicate_runs)} duplicate runs")
    return not failed, line, rows


def _fmt(counts: Counter[str]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
