"""The nightly batch under faults (``bench/nightly.py --faults``), with real runner processes.

What it does to the run, as the model of AWS does in virtual time
(:mod:`dispatcher.simulation.faults`): each task process, once started, is reclaimed with
``RECLAIMED`` odds (a Fargate Spot interruption: SIGTERM, the runner gives its jobs back and
exits; SIGKILL after the two-minute warning, scaled like the run) or is lost with its host with
``CRASHED`` odds (SIGKILL, no warning; ECS reports SpotInterruption, an infrastructure stop),
at a random time within its first ``WITHIN`` seconds (scaled); and
``THROTTLED`` of the DynamoDB and ECS calls of the dispatcher and the runners are answered as
AWS answers a throttled call, through the proxies the bench counts calls with.

What it checks: each run of each job, from the handlers' own log of their starts and ends
(``S``/``E`` lines with the process and the time; a run whose process died without its end line
ended with its process, as ECS reports it), judged by the model's ledger
(:class:`dispatcher.simulation.run_ledger.RunLedger`): every job SUCCEEDED or FAILED, none with
two runs alive at once, none run past its budgets. A job run twice one after the other (its
result lost with its killed task) is what faults cost, not a fault of ours.

A process that dies on its own (exit 137: out of memory, a crash in native code) is another
stop: the stop policy cannot tell which of its running jobs killed it, and reruns the rest of
its bundle one job at a time to name it (:mod:`dispatcher.domain.stop_policy`); those are not
drawn here.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

from dispatcher import settings
from dispatcher.domain.jobs import Job, JobState
from dispatcher.simulation.run_ledger import RunLedger, Verdict

RECLAIMED = 0.05
CRASHED = 0.01
THROTTLED = 0.01
WITHIN = (5.0, 120.0)  # seconds after the task's start, at the reference scale
SPOT_WARNING = 120.0  # SIGTERM to SIGKILL, at the reference scale
SEED = 39


class Injector:
    """Draws each started task's fate and carries it out (``scale``: the run's time scale)."""

    def __init__(self, launcher: Any, scale: float, seed: int = SEED) -> None:
        self.launcher, self.scale = launcher, scale
        self.rng = random.Random(seed)
        self.reclaimed: list[str] = []
        self.crashed: list[str] = []
        self._seen: set[str] = set()
        self._timers: list[threading.Timer] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-faults")

    def start(self) -> Injector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for timer in self._timers:
            timer.cancel()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for arn, task in list(self.launcher.tasks.items()):
                if arn in self._seen or task.process is None:
                    continue
                self._seen.add(arn)
                fate, when = self.rng.random(), self.rng.uniform(*WITHIN) * self.scale
                if fate < RECLAIMED:
                    self._later(when, self._reclaim, arn)
                elif fate < RECLAIMED + CRASHED:
                    self._later(when, self._crash, arn)

    def _later(self, delay: float, act: Any, arn: str) -> None:
        timer = threading.Timer(delay, act, (arn,))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def _reclaim(self, arn: str) -> None:
        if not self.launcher.tasks[arn].gone:
            self.reclaimed.append(arn)
            self.launcher.reclaim(arn, warning=SPOT_WARNING * self.scale)

    def _crash(self, arn: str) -> None:
        if not self.launcher.tasks[arn].gone:
            self.crashed.append(arn)
            self.launcher.kill(arn)  # its host lost: SpotInterruption, as the model's kills


def verdict(runs_log: Path, launcher: Any, states: dict[str, str], jobs: list[str],
            env: dict[str, str]) -> Verdict:
    """The handlers' log of their runs, judged by the run ledger against the jobs' states."""
    ledger = RunLedger()
    lines = [line.split() for line in runs_log.read_text().splitlines()] \
        if runs_log.exists() else []
    for kind, job_id, pid, at in sorted(lines, key=lambda x: float(x[3])):
        (ledger.started if kind == "S" else ledger.ended)(job_id, pid, float(at))
    exits = {str(t.process.pid): t.exit.stopped_at for t in launcher.tasks.values()
             if t.process is not None and t.exit is not None}
    for job_id, runs in ledger.runs.items():
        for run in runs:
            if run.end is None and run.task_arn in exits:  # its process died first
                ledger.ended(job_id, run.task_arn, exits[run.task_arn])
    cfg = settings.load("dispatcher", env)
    budget = Job.__dataclass_fields__["max_attempts"].default + cfg.max_infra_attempts
    final = {j: JobState(s) for j, s in states.items()}
    return ledger.verdict(jobs, final, lambda _: int(budget))


def describe(injector: Injector, proxies: dict[str, Any]) -> str:
    throttled = sum(p.throttled for p in proxies.values())
    return (f"faults: {len(injector._seen)} tasks started: {len(injector.reclaimed)} reclaimed "
            f"(SIGTERM, SIGKILL {SPOT_WARNING * injector.scale:.0f} s later), "
            f"{len(injector.crashed)} crashed (SIGKILL); {throttled} DynamoDB and ECS calls "
            f"throttled ({THROTTLED:.0%} drawn)")


def throttle(proxies: dict[str, Any]) -> None:
    for name in ("dispatcher", "runner"):
        proxies[name].throttle_share(THROTTLED, seed=SEED + len(name))


def wait_for_exits(launcher: Any, seconds: float = 30.0) -> None:
    """The tasks' stops are all reported (a reclaimed task may still be in its warning)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and launcher.running():
        time.sleep(0.2)
