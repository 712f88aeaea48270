"""Workloads shared by tests and benchmarks, so the numbers docs/measured.md reports are the ones
the tests assert."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher import settings
from dispatcher.domain import task_events
from dispatcher.domain.costs import TaskBill
from dispatcher.ops.client import JobClient
from dispatcher.stages.tick import Tick, TickReport
from dispatcher.wiring.adapters import open_store

# The demo's handlers, as a task finds them (LONGJOBS_HANDLERS); `demo.sleep` sleeps
# payload["seconds"].
DEMO_HANDLERS = ("demo.sleep=dispatcher.local.demo_handlers:sleep,"
                 "demo.steps=dispatcher.local.demo_handlers:steps")
COMPONENTS = ("producer", "dispatcher", "runner")


def mixed_jobs(n: int, *, seed: int = 7, small_share: float = 0.6,
               prefix: str = "job") -> list[dict[str, Any]]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        small = rng.random() < small_share
        jobs.append({"kind": "demo.sleep", "job_id": f"{prefix}-{i:05d}",
                     "payload": {"i": i, "seconds": 0.1 if small else 30},
                     "estimated_seconds": rng.uniform(1, 20) if small else rng.choice(
                         [None, 600.0, 3600.0])})
    return jobs


def small_jobs(n: int, prefix: str = "small", *,
               seconds: float | None = None) -> list[dict[str, Any]]:
    """``n`` small jobs of kind ``demo.sleep`` (the handler sleeps ``seconds``, else 0.1 s)."""
    payload: dict[str, Any] = {} if seconds is None else {"seconds": seconds}
    return [{"kind": "demo.sleep", "job_id": f"{prefix}-{i:05d}", "payload": {"i": i, **payload},
             "estimated_seconds": 1.0} for i in range(n)]


def run_until_drained(dispatcher: Tick, *, max_ticks: int = 50,
                      on_tick: Callable[[TickReport], None] | None = None) -> list[TickReport]:
    """Tick until a tick receives nothing and has nothing left to launch."""
    decisions = []
    for _ in range(max_ticks):
        d = dispatcher.tick()
        decisions.append(d)
        if on_tick:
            on_tick(d)
        if d.intake.received == 0 and d.due_bundles == 0 and d.launch.recovered == 0:
            return decisions
    raise AssertionError(f"not drained after {max_ticks} ticks")


def submit_in_waves(client: JobClient, dispatcher: Tick, jobs: list[dict[str, Any]],
                    wave: int = 100) -> list[TickReport]:
    """moto's SQS costs grow with queue depth, so large runs are fed in waves."""
    decisions: list[TickReport] = []
    for start in range(0, len(jobs), wave):
        client.submit_many(jobs[start:start + wave])
        decisions.extend(run_until_drained(dispatcher))
    return decisions


def api_calls_for_small_jobs(proxy: Any, dispatcher: Tick, n_jobs: int = 500,
                             wave: int = 100) -> dict[str, int]:
    """Run ``n_jobs`` small bundled jobs through producer + dispatcher; count calls by API."""
    proxy.reset_counts()
    submit_in_waves(JobClient(), dispatcher, small_jobs(n_jobs), wave=wave)
    return dict(sorted(proxy.counts().items()))


@dataclass
class CallCounts:
    """AWS calls of one workload by component (producer, dispatcher, runner) and API."""

    jobs: int
    calls: dict[str, Counter[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, jobs: int, recorded: Iterable[Any]) -> CallCounts:
        """From :meth:`AwsProxy.recorded` (``component``, ``operation`` per call)."""
        out = cls(jobs, {c: Counter() for c in COMPONENTS})
        for call in recorded:
            out.calls.setdefault(call.component, Counter())[call.operation] += 1
        return out

    def add(self, component: str, counts: Mapping[str, int]) -> None:
        self.calls.setdefault(component, Counter()).update(counts)

    def total(self, component: str | None = None) -> int:
        parts = [self.calls.get(component, Counter())] if component else self.calls.values()
        return sum(sum(c.values()) for c in parts)

    def per_job(self, component: str | None = None) -> float:
        return self.total(component) / self.jobs if self.jobs else 0.0

    def by_api(self, component: str | None = None) -> dict[str, int]:
        out: Counter[str] = Counter()
        for name, counts in self.calls.items():
            if component is None or name == component:
                out.update(counts)
        return dict(sorted(out.items()))

    def table(self) -> str:
        """A per-API table with a column per component, and the totals per job."""
        apis = sorted(self.by_api())
        names = [c for c in self.calls if self.total(c)] or list(COMPONENTS)
        lines = [f"{'API':34} " + " ".join(f"{n:>10}" for n in names) + f" {'per job':>8}"]
        for api in apis:
            row = [self.calls[n].get(api, 0) for n in names]
            lines.append(f"{api:34} " + " ".join(f"{v:>10}" for v in row)
                         + f" {sum(row) / max(1, self.jobs):>8.3f}")
        lines.append(f"{'calls per job':34} " + " ".join(
            f"{self.per_job(n):>10.3f}" for n in names) + f" {self.per_job():>8.3f}")
        return "\n".join(lines)


def run_launched_tasks(runner_env: Mapping[str, str], task_arns: Iterable[str],
                       done: set[str], *,
                       on_stopped: Callable[[str], Any] | None = None) -> int:
    """Run the job runner once for each task in ``task_arns`` not in ``done``, here, one after
    another: ``job_runner.worker.Worker`` as ``python -m job_runner`` runs it in a task, with
    the settings of ``runner_env`` (its AWS endpoint is where its calls go). Then
    ``on_stopped(arn)``, e.g. the task-event handler, as ECS would report the task's exit.
    Returns how many ran."""
    from job_runner.kinds import HandlerRegistry
    from job_runner.worker import Worker

    ran = 0
    for arn in task_arns:
        if arn in done:
            continue
        done.add(arn)
        cfg = settings.load("runner", {**runner_env, "LONGJOBS_TASK_ARN": arn})
        store = open_store(cfg.table, cfg.region, cfg.endpoint_url,
                           retention_days=cfg.retention_days)
        Worker(cfg, store, HandlerRegistry.load(cfg.handlers), arn).run()
        ran += 1
        if on_stopped is not None:
            on_stopped(arn)
    return ran


def stopped_event(arn: str, container: str = "worker") -> dict[str, Any]:
    """The "ECS Task State Change" EventBridge delivers when a task's runner exits 0, with its
    bill as ECS gives it (a quarter vCPU and 512 MiB on demand for the last minute)."""
    now = time.time()
    return task_events.sample_event(arn, stop_code="EssentialContainerExited",
                                   reason="Essential container in task exited", exit_code=0,
                                   container=container, bill=TaskBill(256, 512, now - 60, now))


def api_calls_end_to_end(proxy: Any, dispatcher: Tick, jobs: list[dict[str, Any]], *,
                         wave: int, runner_env: Mapping[str, str],
                         list_tasks: Callable[[], list[str]],
                         on_stopped: Callable[[str], Any] | None = None) -> CallCounts:
    """Every AWS call of ``jobs``, from the producer's send to the last result, by component.

    In waves (moto's SQS slows with queue depth): the producer sends a wave, the dispatcher
    ticks until it is admitted and launched, then each task launched (``list_tasks``, read
    outside the proxy) runs its bundle through the real runner (:func:`run_launched_tasks`),
    and its stop goes to ``on_stopped`` (the task-event handler) as the dispatcher's. One
    component at a time, so the proxy's recording labels attribute every call.
    """
    proxy.clear_recorded()
    done: set[str] = set()
    for start in range(0, len(jobs), wave):
        with proxy.recording("producer"):
            JobClient().submit_many(jobs[start:start + wave])
        # Until the wave is through: a tick cut short by its deadline (a slow machine) leaves
        # the rest queued, and the ticks after it find no free slot until these tasks end.
        received = 0
        while received < len(jobs[start:start + wave]):
            with proxy.recording("dispatcher"):
                got = sum(d.intake.received for d in run_until_drained(dispatcher))
            with proxy.recording("runner"):
                arns = list_tasks()
                stops: list[str] = []
                ran = run_launched_tasks(runner_env, arns, done, on_stopped=stops.append)
            if not got and not ran:
                break  # nothing moves: the caller's checks say what is missing
            received += got
            with proxy.recording("dispatcher"):
                for arn in stops:
                    if on_stopped is not None:
                        on_stopped(arn)
    return CallCounts.of(len(jobs), proxy.recorded())


def job_states(store: Any, job_ids: Iterable[str]) -> Counter[str]:
    """How many of ``job_ids`` are in each state (``MISSING`` if never recorded), read in
    pages of 100 (use a store outside the counting proxy)."""
    ids = list(job_ids)
    states: Counter[str] = Counter()
    for start in range(0, len(ids), 100):
        found = {job.job_id: str(job.state) for job in store.get_jobs(ids[start:start + 100])}
        states.update(found.get(j, "MISSING") for j in ids[start:start + 100])
    return states
