"""``longjobs demo``: a nightly-batch burst against a fresh local environment, checked at the end.

What it shows, in one run: admission holding a burst in SQS (``max_running_tasks`` is low),
small jobs bundled and long ones alone, a task SIGKILLed mid-job and rerun from its checkpoint
without spending a retry, a deploy mid-run that running tasks never notice, a poison job failing
after its attempts, a malformed message rejected and a duplicate absorbed, urgent (high
priority) jobs overtaking the normal backlog, and a kind held to its limit across tasks.

The verdict is computed, not assumed: the job table AND the handlers' own execution log
(``demo_handlers``, written by the task processes themselves) must agree that every good job
succeeded exactly once. Extra checks (the kill, the deploy, bundling) also gate the exit code.
Everything random comes from ``--seed``; the kill and the deploy are triggered by the killed
job's checkpoints, not by wall-clock time, so a slower machine sees the same story.
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from dispatcher.domain.jobs import JobState
from dispatcher.local.demo_handlers import FLAKY_CHILD, MAP_JOB, REDUCE_JOB
from dispatcher.local.environment import LocalEnv
from dispatcher.local.provision import Names, register_task_definition
from dispatcher.local.verdict import POISON_ATTEMPTS, read_log, verdict
from dispatcher.local.view import DemoSnapshot, Say, View, make_view
from dispatcher.ops.client import JobClient
from dispatcher.stages.rerun import StopOutcome
from dispatcher.wiring.adapters import open_store

HANDLERS = ("demo.sleep=dispatcher.local.demo_handlers:sleep,"
            "demo.steps=dispatcher.local.demo_handlers:steps,"
            "demo.poison=dispatcher.local.demo_handlers:poison,"
            "demo.report=dispatcher.local.demo_handlers:report,"
            "demo.map=dispatcher.local.demo_handlers:mapper,"
            "demo.reduce=dispatcher.local.demo_handlers:reducer")

# A kind with a limit across tasks (LONGJOBS_KIND_LIMITS): never more running at once.
REPORT_LIMIT = 2
# moto's SQS slows with queue depth (~170 ms a call at 500 deep), so the burst goes in waves:
# the next wave is sent when the backlog drops under REFILL_BELOW. Admission still holds work.
WAVE = 100
REFILL_BELOW = 50


@dataclass
class Script:
    """The whole scenario, derived from the seed before anything runs."""

    small: list[dict[str, Any]]
    long: list[dict[str, Any]]
    poison: dict[str, Any]
    kill_job: str
    deploy_at: int  # checkpoint step of kill_job at which the new revision is registered
    kill_at: int  # checkpoint step of kill_job at which its task is SIGKILLed
    urgent: list[dict[str, Any]] = field(default_factory=list)  # priority high, sent late
    reports: list[dict[str, Any]] = field(default_factory=list)  # a kind with a limit
    map_size: int = 0  # the map-reduce's array (none when 0)

    @property
    def good(self) -> list[str]:
        return [j["job_id"] for j in self.long + self.small + self.urgent + self.reports]


def make_script(small: int, long: int, seed: int, long_seconds: tuple[int, int],
                map_size: int = 0) -> Script:
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
    urgent = [{"kind": "demo.sleep", "job_id": f"urgent-{i}", "priority": "high",
               "payload": {"seconds": 0.1}, "estimated_seconds": 0.1} for i in range(10)]
    # No estimate: each report runs alone, so the limit is held across tasks.
    reports = [{"kind": "demo.report", "job_id": f"report-{i}", "payload": {"seconds": 2.0}}
               for i in range(8)]
    return Script(smalls, longs, poison, target["job_id"], deploy_at, kill_at, urgent, reports,
                  map_size)


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
    urgent_sent: dict[str, Any] = field(default_factory=dict)  # when, and what waited then
    waves_sent: int = 0

    def __post_init__(self) -> None:
        self.store = open_store(self.env.cfg.table)
        self.client = JobClient()
        p = self.plan
        first = [*p.long, p.poison, *p.reports, *p.small[:WAVE]]  # the long pole first
        self.waves = [first] + [p.small[i:i + WAVE] for i in range(WAVE, len(p.small), WAVE)]

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def submit_burst(self) -> None:
        self._send_wave()
        if self.plan.map_size:
            self.client.submit("demo.map", {"flaky": FLAKY_CHILD, "seconds": 0.05},
                               job_id=MAP_JOB, array_size=self.plan.map_size,
                               estimated_seconds=0.05, max_attempts=2)
            self.client.submit("demo.reduce", {}, job_id=REDUCE_JOB, depends_on=[MAP_JOB],
                               estimated_seconds=0.1)
            self.submitted += 2
            self.event(f"map-reduce: an array of {self.plan.map_size} demo.map jobs (one "
                       f"message; child {FLAKY_CHILD} fails once) and {REDUCE_JOB}, which "
                       "depends on it")
        sqs = boto3.client("sqs", endpoint_url=self.env.endpoint)
        sqs.send_message(QueueUrl=self.env.cfg.queue_url, MessageBody='{"kind": "oops"')
        self.submitted += 1
        p = self.plan
        self.event(f"burst: {len(p.small)} small jobs, {len(p.long)} long, {len(p.reports)} "
                   f"demo.report (at most {REPORT_LIMIT} at once), 1 poison job and 1 "
                   f"malformed message; {len(p.urgent)} urgent jobs follow after the deploy: "
                   f"{len(p.good)} good jobs in all; max {self.env.cfg.max_running_tasks} "
                   f"running tasks; small jobs sent in waves of {WAVE} as the backlog drains")

    def _send_wave(self) -> None:
        wave = self.waves.pop(0)
        self.client.submit_many(wave)
        self.submitted += len(wave)
        self.waves_sent += 1

    def _send_urgent(self) -> None:
        """Sent once the deploy is done (the long jobs have their tasks by then): every small
        job sent and not yet recorded is the normal backlog the urgent jobs face."""
        if self.plan.urgent:
            sent = [j["job_id"] for j in self.plan.small[:self.waves_sent * WAVE]]
            recorded = {j.job_id for i in range(0, len(sent), 100)
                        for j in self.store.get_jobs(sent[i:i + 100])}
            waiting = [j for j in sent if j not in recorded]
            self.client.submit_many(self.plan.urgent)
            self.submitted += len(self.plan.urgent)
            self.urgent_sent = {"at": time.time(), "waiting": waiting}
            self.event(f"{len(self.plan.urgent)} urgent jobs (priority high) sent behind a "
                       f"backlog of {len(waiting)} normal ones")

    def snapshot(self) -> DemoSnapshot:
        backlog = self.env.stages.queue.backlog()
        by_priority = {str(p): q.backlog() for p, q in self.env.stages.queues.items()}
        active = self.store.active_bundles()
        reports = sum(b.slots for b in active if b.kind == "demo.report")
        counts = {s: self.store.count_jobs(JobState(s)) for s in ("SUCCEEDED", "FAILED")}
        decisions = list(self.env.decisions)  # the dispatcher's own decision records
        return DemoSnapshot(
            elapsed=self.elapsed(), submitted=self.submitted,
            backlog=backlog.visible + backlog.in_flight,
            admitted=sum(d.intake.admitted for d in decisions),
            running_tasks=len(self.env.launcher.running()), succeeded=counts["SUCCEEDED"],
            failed=counts["FAILED"], reruns=reruns(self.env),
            revision=decisions[-1].task_definition or "" if decisions else "",
            bundles=sum(d.new_bundles for d in decisions), tasks=len(self.env.launcher.tasks),
            by_priority={p: b.visible + b.in_flight for p, b in by_priority.items()},
            report_slots=reports, report_limit=REPORT_LIMIT)

    def event(self, text: str) -> None:
        self.view.event(f"[{self.elapsed():5.1f}s] {text}")

    def act(self, snap: DemoSnapshot) -> None:
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
        if self.deployed and not self.urgent_sent:
            self._send_urgent()

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

    def finished(self, snap: DemoSnapshot) -> bool:
        # + the poison job, and the map-reduce's children, parent and reduce
        expected = len(self.plan.good) + 1 + (self.plan.map_size + 2 if self.plan.map_size else 0)
        return (not self.waves and self.duplicate_sent and bool(self.killed)
                and snap.succeeded + snap.failed >= expected)




def reruns(env: LocalEnv) -> int:
    return sum(1 for e in list(env.events) if isinstance(e, StopOutcome) and e.rerun)


def run(*, small: int = 500, long: int = 4, seed: int = 1, max_running: int = 6,
        bundle_jobs: int = 25, long_seconds: tuple[int, int] = (20, 40),
        timeout: float = 165.0, say: Say | None = None, map_size: int = 200,
        started: Callable[[dict[str, str]], None] | None = None,
        linger: Callable[[str], None] | None = None) -> tuple[bool, str]:
    """Run the scenario; return (every invariant held, the verdict line).

    ``say`` captures plain output (tests); without it a terminal gets the live table.
    ``started`` is handed the local stack's settings once it runs (``demo --console`` serves
    the console from them); ``linger`` is handed the verdict line before the stack stops.
    """
    plan = make_script(small, long, seed, long_seconds, map_size)
    workdir = Path(tempfile.mkdtemp(prefix="longjobs-demo-"))
    log = workdir / "executions.jsonl"
    settings = {"LONGJOBS_HANDLERS": HANDLERS, "LONGJOBS_DEMO_LOG": str(log),
                "LONGJOBS_MAX_RUNNING_TASKS": str(max_running),
                "LONGJOBS_BUNDLE_MAX_JOBS": str(bundle_jobs), "LONGJOBS_SMALL_JOB_SECONDS": "5",
                "LONGJOBS_HEARTBEAT_SECONDS": "5", "LONGJOBS_FLUSH_SECONDS": "1",
                "LONGJOBS_LAUNCH_BACKOFF_SECONDS": "1",
                "LONGJOBS_KIND_LIMITS": f"demo.report={REPORT_LIMIT}"}
    view = make_view(say)
    try:
        with _quiet_info_logs(), LocalEnv(settings=settings, tick_seconds=1.0,
                                          output=subprocess.DEVNULL) as env:
            scenario = Scenario(env, plan, view)
            if started is not None:
                started(dict(env.env))
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
            ok, line, rows = verdict(scenario, read_log(log))
            view.summary("longjobs demo: summary", rows)
            if linger is not None:
                linger(line)
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
