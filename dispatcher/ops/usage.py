"""What the stack's jobs used and cost, by group: ``longjobs stats --by kind|tenant|label``.

Read from the usage counters each task's stop adds its bill to (``USAGE#<group>#<hour>``:
:mod:`dispatcher.store.task_bills`), so a report reads groups x hours items whatever the number
of jobs, and never the history. A task counts in the hour it stopped: a report over the last
24 h holds the tasks that stopped in it (a job still running is in no report yet), from the
start of ``since``'s hour.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.domain import tenant_shares, tenants
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.tenant_shares import TenantPolicy
from dispatcher.store import OperatorStore
from dispatcher.store.codec import iso
from dispatcher.store.task_bills import GroupUsage, hour_of

DIMENSIONS = ("kind", "tenant", "label")


@dataclass(frozen=True)
class UsageReport:
    by: str
    since: float  # the start of the first hour counted
    until: float
    groups: list[GroupUsage]

    @property
    def total(self) -> GroupUsage | None:
        """The groups added up; None by every label (a job with two labels is in two groups).
        By kind, by tenant, or by one label's values, each job is in one group at most."""
        if self.by == "label":
            return None
        t = GroupUsage("total")
        for g in self.groups:
            t = GroupUsage("total", t.jobs + g.jobs, t.job_seconds + g.job_seconds,
                           t.vcpu_seconds + g.vcpu_seconds, t.dollars + g.dollars,
                           t.failed + g.failed)
        return t

    def to_json(self) -> dict[str, Any]:
        def row(g: GroupUsage) -> dict[str, Any]:
            return {"group": g.group, "jobs": g.jobs, "failed": g.failed,
                    "job_hours": g.job_seconds / 3600,
                    "vcpu_hours": g.vcpu_seconds / 3600, "dollars": g.dollars}
        total = self.total
        return {"by": self.by, "since": iso(self.since), "until": iso(self.until),
                "groups": [row(g) for g in self.groups],
                "total": None if total is None else row(total)}


def usage_report(store: OperatorStore, by: str, since: float, until: float) -> UsageReport:
    """``by``: ``kind``, ``tenant``, ``label`` (every key=value) or ``label:<key>`` (that
    key's values)."""
    dimension, _, key = by.partition(":")
    if dimension not in DIMENSIONS or (key and dimension != "label") or by.endswith(":"):
        raise LongjobsError(f"--by {by!r}: give kind, tenant, label, or label:<key> (e.g. "
                            "label:customer)")
    groups = store.group_usage(dimension, since, until)
    if key:
        groups = [g for g in groups if g.group.startswith(f"label:{key}=")]
    return UsageReport(by, float(hour_of(since)), until,
                       [GroupUsage(g.group.split(":", 1)[1], g.jobs, g.job_seconds,
                                   g.vcpu_seconds, g.dollars) for g in groups])


@dataclass(frozen=True)
class TenantRow:
    """One tenant: its tasks running now, and what its jobs used in the window; its policy
    (dispatcher.domain.tenant_shares), its target as the last tick set it (None: that tick
    did not see it) and its counted usage (decayed vCPU-seconds)."""

    tenant: str
    running: int
    used: GroupUsage
    policy: TenantPolicy = tenant_shares.DEFAULT
    target: int | None = None
    usage: float = 0.0


@dataclass(frozen=True)
class TenantsReport:
    """``longjobs tenants``: every tenant with a task running or a task that stopped in the
    window, most tasks first."""

    since: float  # the start of the first hour counted
    until: float
    rows: list[TenantRow]

    def to_json(self) -> dict[str, Any]:
        return {"since": iso(self.since), "until": iso(self.until), "tenants": [
            {"tenant": t.tenant, "running_tasks": t.running, "jobs": t.used.jobs,
             "job_hours": t.used.job_seconds / 3600, "vcpu_hours": t.used.vcpu_seconds / 3600,
             "dollars": t.used.dollars, "weight": t.policy.weight,
             "max_running": t.policy.max_running, "reserve": t.policy.reserve,
             "target": t.target, "usage_vcpu_seconds": round(t.usage, 1)}
            for t in self.rows]}


def tenants_report(store: OperatorStore, active: Sequence[Bundle], since: float,
                   until: float) -> TenantsReport:
    """The tenants' running tasks (the active bundles: a bundle's id names its tenant) and
    their usage counters in the window (as ``stats --by tenant``): no job read."""
    used = {g.group: g for g in usage_report(store, "tenant", since, until).groups}
    running = Counter(b.tenant or tenants.NONE for b in active)
    policies, usage, _ = store.tenant_state()  # the usage as the last tick counted it
    summary = store.tick_summary()
    shares = summary.tenants if summary is not None else {}
    names = sorted(set(used) | set(running) | set(policies),
                   key=lambda n: (-running[n], -used[n].dollars if n in used else 0.0, n))
    return TenantsReport(float(hour_of(since)), until, [
        TenantRow(n, running[n], used.get(n, GroupUsage(n)),
                  policies.get(n, tenant_shares.DEFAULT),
                  shares[n].target if n in shares else None,
                  usage.get(n, 0.0)) for n in names])


@dataclass(frozen=True)
class EndedHour:
    """One hour of the jobs' ends, as their tasks' stops counted them: the runs that ended a
    job's attempt (``ended``) and of them those that ended it FAILED."""

    hour: float  # its start, epoch seconds
    ended: int
    failed: int

    @property
    def succeeded(self) -> int:
        return self.ended - self.failed


def ended_by_hour(store: OperatorStore, now: float, hours: int) -> list[EndedHour]:
    """The last ``hours`` hours, oldest first, the current one last (an hour no task stopped
    in counts none): the kind counters, kinds x hours x shards items, no job read. A task's
    jobs count in the hour it stopped, so the jobs of a task that ran for hours count at its
    end (the dashboard's JobsSucceeded and JobsFailed count so too)."""
    first = hour_of(now) - (hours - 1) * 3600
    counted = store.hourly_usage(first, now)
    return [EndedHour(float(h), counted[h].jobs if h in counted else 0,
                      counted[h].failed if h in counted else 0)
            for h in range(first, hour_of(now) + 1, 3600)]
