"""What a task cost, and each job's share of it.

Fargate bills a task for the vCPU and memory it was given, per second with a one-minute
minimum, "from the time you start to download your container image (docker pull) until the
Task terminates, rounded up to the nearest second" (https://aws.amazon.com/fargate/pricing/).
A task's stop event carries all of that (``cpu``, ``memory``, ``capacityProviderName``,
``pullStartedAt``, ``stoppedAt``: the ECS Task object,
https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Task.html), so a task's bill is
known exactly when it stops, and not before: the stop's own time, the minimum and the idle tail
after its last job are in it.

A task's bill is split among the jobs it ran by their share of its *job-seconds*: the seconds
each job's run on it lasted (a history entry's ``started_at`` to its ``ended_at``, or to the
stop's ``stopped_at`` for a run the stop ended). Start-up, the gaps between bundles, the tail
and the minimum are shared in the same proportion, so the jobs of a task add up to the task.
The runner adds the job-seconds up as it writes its results (:class:`Usage`, on the task's
pointer); the stop turns bill / job-seconds into the task's *rate* (dollars a job-second,
:class:`TaskCost`) and a job's cost is its seconds on each task times that task's rate:
no write to a job is needed when its task stops.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain import tenants

# Fargate bills at least this many seconds a task.
MINIMUM_SECONDS = 60
SPOT = "FARGATE_SPOT"
ARM64 = "ARM64"
X86_64 = "X86_64"
# Fargate's units: 1,024 CPU units a vCPU; memory in MiB, billed per GB of 1,024 MiB.
CPU_UNITS = 1024
MIB_PER_GB = 1024
# How many kinds (and labels) a task's usage tells apart; a task that ran more puts the rest
# under OTHER (its cost is still split among its jobs as before; only the per-group counters
# lose the detail). With the two OTHER groups, a stop's transaction holds at most 34 counters
# (DynamoDB's limit: 100 items).
MAX_GROUPS = 32
OTHER = "(other)"


@dataclass(frozen=True)
class Prices:
    """List prices per hour (settings: LONGJOBS_PRICE_*). ``spot_factor``: Fargate Spot's
    price as a fraction of on-demand (it floats; "up to 70 %" off)."""

    vcpu_hour: float = 0.04048
    gb_hour: float = 0.004445
    arm_vcpu_hour: float = 0.03238
    arm_gb_hour: float = 0.00356
    spot_factor: float = 0.3

    def per_second(self, cpu_units: float, memory_mib: float, *, spot: bool,
                   arm: bool) -> float:
        """Dollars a second for a task of this size."""
        vcpu, gb = (self.arm_vcpu_hour, self.arm_gb_hour) if arm else \
            (self.vcpu_hour, self.gb_hour)
        hourly = cpu_units / CPU_UNITS * vcpu + memory_mib / MIB_PER_GB * gb
        return hourly * (self.spot_factor if spot else 1.0) / 3600.0


@dataclass(frozen=True)
class TaskBill:
    """What a task's stop tells of its bill: its size, capacity, architecture and the span
    billed (image pull to stop)."""

    cpu_units: float
    memory_mib: float
    started_at: float
    stopped_at: float
    capacity_provider: str | None = None  # FARGATE_SPOT is Spot; anything else on-demand
    architecture: str = X86_64

    @property
    def spot(self) -> bool:
        return self.capacity_provider == SPOT

    @property
    def seconds(self) -> int:
        """The seconds billed: rounded up, at least the minimum."""
        return max(MINIMUM_SECONDS, math.ceil(max(0.0, self.stopped_at - self.started_at)))

    def cost(self, prices: Prices) -> float:
        return self.seconds * prices.per_second(self.cpu_units, self.memory_mib,
                                                spot=self.spot,
                                                arm=self.architecture.upper() == ARM64)

    @property
    def vcpu_seconds(self) -> float:
        return self.seconds * self.cpu_units / CPU_UNITS

    def as_dict(self) -> dict[str, Any]:
        return {"cpu": self.cpu_units, "memory": self.memory_mib, "started_at": self.started_at,
                "stopped_at": self.stopped_at, "capacity": self.capacity_provider or "FARGATE",
                "architecture": self.architecture}


def entry_seconds(entry: Mapping[str, Any], task_arn: str | None = None) -> float:
    """The seconds one history entry's run lasted (0: it never started, or is not on
    ``task_arn`` when one is given). The runner and every reader count the same way."""
    if task_arn is not None and entry.get("task_arn") != task_arn:
        return 0.0
    start = entry.get("started_at")
    end = entry.get("ended_at", entry.get("stopped_at"))
    if not isinstance(start, int | float) or not isinstance(end, int | float):
        return 0.0
    return max(0.0, float(end) - float(start))


@dataclass
class Usage:
    """Job-seconds and jobs run on a task, in all and by group (``kind:<kind>``,
    ``label:<key>=<value>``): what its bill is split by, and how many of the jobs ended
    FAILED (the console's chart of jobs ended per hour). Stored on the task's pointer as
    JSON (:meth:`as_dict`); a group's list written before the failed count had two
    entries, and reads as none failed."""

    seconds: float = 0.0
    jobs: int = 0
    # group -> [jobs, seconds, failed]
    groups: dict[str, list[float]] = field(default_factory=dict)

    def add(self, seconds: float, groups: Iterable[str], *, ended: bool = True,
            failed: bool = False) -> None:
        """A run of ``seconds``; ``ended``: it ended the job's attempt (counted as a job);
        ``failed``: it ended the job FAILED."""
        self.seconds += seconds
        self.jobs += int(ended)
        for g in groups:
            self._group(g, int(ended), seconds, int(ended and failed))

    def _group(self, group: str, jobs: int, seconds: float, failed: int = 0) -> None:
        """Add to ``group``; past MAX_GROUPS groups (two ``(other)`` ones aside), to its
        dimension's ``(other)``: a task's usage, and the writes of its stop, stay bounded
        whatever labels its jobs carry."""
        if group not in self.groups and len(self.groups) >= MAX_GROUPS:
            group = f"{group.split(':', 1)[0]}:{OTHER}"
        mine = self.groups.setdefault(group, [0, 0.0, 0])
        mine[0] += jobs
        mine[1] += seconds
        mine[2] += failed

    def failed(self, group: str) -> int:
        """The jobs of ``group`` that ended FAILED."""
        return int(self.groups[group][2]) if len(self.groups.get(group, ())) > 2 else 0

    def plus(self, other: Usage) -> Usage:
        out = Usage(self.seconds + other.seconds, self.jobs + other.jobs)
        for source in (self, other):
            for g, v in source.groups.items():
                out._group(g, int(v[0]), float(v[1]), source.failed(g))
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "jobs": self.jobs, "groups": self.groups}

    @classmethod
    def of(cls, raw: Any) -> Usage:
        if not isinstance(raw, Mapping):
            return cls()
        out = cls(float(raw.get("seconds") or 0), int(raw.get("jobs") or 0))
        for g, v in (raw.get("groups") or {}).items():
            out._group(str(g), int(v[0]), float(v[1]), int(v[2]) if len(v) > 2 else 0)
        return out


def groups_of(kind: str, labels: Mapping[str, str] | None = None,
              tenant: str | None = None) -> list[str]:
    """The groups a job's run counts in: its kind, its tenant (:data:`tenants.NONE` for a
    job of none, so that the tenants add up to every job), each of its labels."""
    return [f"kind:{kind}", f"tenant:{tenant or tenants.NONE}",
            *(f"label:{k}={v}" for k, v in sorted((labels or {}).items()))]


@dataclass(frozen=True)
class TaskCost:
    """A stopped task's bill and how it is shared: ``rate`` dollars a job-second (0 when it
    ran no job: its cost stays the task's, ``unshared``)."""

    task_arn: str
    bill: TaskBill
    cost: float
    usage: Usage

    @property
    def rate(self) -> float:
        return self.cost / self.usage.seconds if self.usage.seconds > 0 else 0.0

    @property
    def unshared(self) -> float:
        return 0.0 if self.usage.seconds > 0 else self.cost

    def group_costs(self) -> dict[str, tuple[int, float, float]]:
        """Per group: jobs, vCPU-seconds and dollars (its share of the task's)."""
        total = self.usage.seconds
        out: dict[str, tuple[int, float, float]] = {}
        for g, (jobs, seconds, *_) in self.usage.groups.items():
            # A task that ran no job: its cost is its group's (or its groups', evenly).
            share = seconds / total if total > 0 else 1.0 / len(self.usage.groups)
            out[g] = (int(jobs), share * self.bill.vcpu_seconds, share * self.cost)
        return out


def settle(task_arn: str, bill: TaskBill, usage: Usage, prices: Prices) -> TaskCost:
    return TaskCost(task_arn, bill, bill.cost(prices), usage)


@dataclass(frozen=True)
class JobCost:
    """A job's cost as its history and its tasks' settlements tell it: ``dollars`` over the
    runs whose task has stopped, ``pending_seconds`` on tasks not settled yet."""

    dollars: float
    seconds: float
    pending_seconds: float
    tasks: int

    @property
    def final(self) -> bool:
        return self.pending_seconds == 0


def job_cost(history: Iterable[Mapping[str, Any]], rates: Mapping[str, float]) -> JobCost:
    """``rates``: each settled task's dollars a job-second, by task ARN."""
    dollars = seconds = pending = 0.0
    tasks: set[str] = set()
    for entry in history:
        s = entry_seconds(entry)
        arn = entry.get("task_arn")
        if s <= 0 or not isinstance(arn, str):
            continue
        tasks.add(arn)
        seconds += s
        if arn in rates:
            dollars += s * rates[arn]
        else:
            pending += s
    return JobCost(dollars, seconds, pending, len(tasks))


def task_arns(history: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tasks a job's history ran it on (the ones a cost reads the rates of)."""
    return list(dict.fromkeys(str(e["task_arn"]) for e in history
                              if isinstance(e.get("task_arn"), str) and entry_seconds(e) > 0))
