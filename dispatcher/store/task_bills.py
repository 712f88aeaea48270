"""A stopped task's bill on its pointer, and the usage counters its stop adds to.

A task's stop settles its bill once (:class:`dispatcher.domain.costs.TaskCost`): the
pointer (``TASK#<arn>``) gets ``bill``, ``cost`` and ``job_seconds`` (its rate is their
quotient), on condition it has no ``cost`` yet, so a second delivery of the stop adds nothing.
In the same transaction each group the task's jobs ran in (``kind:<kind>``, ``tenant:<tenant>``,
``label:<key>=<value>``) gets its share added to its counter for the hour the task stopped
(``USAGE#<group>#<hour>#<shard>``: jobs ended and of them failed, job-seconds, vCPU-seconds,
dollars; one of
:data:`COUNTER_SHARDS` items by the task), found by the status index under ``USAGE#<dimension>``
(kind, tenant, label) and the hour. ``stats --by`` reads those counters: at most groups x hours
x shards items, whatever the number of jobs.

A normal finish's settlement rides in the transaction that marks the stop reported (one call,
as before); an early stop's is a transaction of its own (one call more, on a stop only).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from dispatcher.domain.costs import TaskCost
from dispatcher.ports.table import (
    Add,
    And,
    Exists,
    Lacks,
    Op,
    Record,
    Set,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store import index
from dispatcher.store.base import Reads

HOUR = 3600


def hour_of(t: float) -> int:
    return int(t // HOUR * HOUR)


# Each group's counter of an hour is spread over this many items (by the stopped task's ARN):
# the stops of one kind's tasks, many a second when a batch ends, would otherwise all update
# one item inside their transactions, and conflict (TransactionConflict) with each other.
COUNTER_SHARDS = 8


def usage_key(group: str, hour: int, task_arn: str) -> str:
    return f"USAGE#{group}#{hour}#{zlib.crc32(task_arn.encode()) % COUNTER_SHARDS}"


def usage_status(dimension: str) -> str:
    return f"USAGE#{dimension}"


@dataclass(frozen=True)
class GroupUsage:
    """One group's counters over a span of hours."""

    group: str
    jobs: int = 0
    job_seconds: float = 0.0
    vcpu_seconds: float = 0.0
    dollars: float = 0.0
    failed: int = 0  # of ``jobs``, those that ended FAILED

    def plus(self, rec: Record) -> GroupUsage:
        return GroupUsage(self.group, self.jobs + int(rec.jobs or 0),
                          self.job_seconds + float(rec.job_seconds or 0),
                          self.vcpu_seconds + float(rec.vcpu_seconds or 0),
                          self.dollars + float(rec.cost or 0),
                          self.failed + int(rec.failed or 0))


class TaskBills(Reads):
    """Settle a stopped task's bill; read tasks' rates and the usage counters."""

    def bill_ops(self, s: TaskCost) -> list[Op]:
        """The writes of a settlement: the pointer's bill (once only) and each group's share
        added to its counter for the hour the task stopped."""
        t = self.clock()
        ops: list[Op] = [Update(r.task_key(s.task_arn), [
            Set("bill", s.bill.as_dict()), Set("cost", s.cost),
            Set("job_seconds", s.usage.seconds)],
            And(Exists(), Lacks("cost")))]
        hour = hour_of(s.bill.stopped_at)
        for group, (jobs, vcpu, dollars) in sorted(s.group_costs().items()):
            dimension = group.split(":", 1)[0]
            ops.append(Update(usage_key(group, hour, s.task_arn), [
                Set("status_key", usage_status(dimension)), Set("status_at", r.iso(hour)),
                Set("group", group),
                Add("jobs", jobs), Add("failed", s.usage.failed(group)),
                Add("job_seconds", s.usage.groups[group][1]),
                Add("vcpu_seconds", vcpu), Add("cost", dollars), *self._expires(t)]))
        return ops

    def settle_bill(self, s: TaskCost, with_ops: Sequence[Op] = ()) -> bool:
        """Write ``s`` (and ``with_ops``, in the same transaction); False if the task's bill
        was settled before (nothing written). ``with_ops``' own failed condition raises
        TransactionCancelled as it is."""
        ops = [*with_ops, *self.bill_ops(s)]
        try:
            self._transact_retrying(ops)
        except TransactionCancelled as exc:
            failed = exc.failed_conditions()
            if len(with_ops) in failed and not any(i < len(with_ops) for i in failed):
                return False
            raise
        return True

    def task_rates(self, task_arns: Sequence[str]) -> dict[str, float]:
        """Each settled task's dollars a job-second, by ARN (tasks not settled are absent),
        100 pointers a read."""
        keys = list(dict.fromkeys(r.task_key(a) for a in task_arns))
        out: dict[str, float] = {}
        for n in range(0, len(keys), 100):
            for rec in self.table.get_many(keys[n:n + 100]):
                if rec.cost is not None:
                    seconds = float(rec.job_seconds or 0)
                    out[rec.pk.removeprefix("TASK#")] = \
                        float(rec.cost) / seconds if seconds > 0 else 0.0
        return out

    def group_usage(self, dimension: str, since: float, until: float) -> list[GroupUsage]:
        """The counters of ``dimension`` (kind, tenant, label) for the hours from ``since``'s to
        ``until``'s, added up per group: groups x hours items read, no job."""
        rows = index.query(self.table, [usage_status(dimension)],
                           at_least=r.iso(hour_of(since)), at_most=r.iso(until))
        totals: dict[str, GroupUsage] = {}
        for rec in index.full(self.table, rows):
            group = rec.group or ""
            totals[group] = totals.get(group, GroupUsage(group)).plus(rec)
        return sorted(totals.values(), key=lambda g: -g.dollars)

    def hourly_usage(self, since: float, until: float) -> dict[int, GroupUsage]:
        """Every job's runs by the hour their tasks stopped, from ``since``'s hour to
        ``until``'s (each run counts in exactly one kind: the kind counters are read, kinds x
        hours x shards items, no job), keyed by the hour's start (epoch seconds)."""
        rows = index.query(self.table, [usage_status("kind")],
                           at_least=r.iso(hour_of(since)), at_most=r.iso(until))
        hours: dict[int, GroupUsage] = {}
        for rec in index.full(self.table, rows):
            hour = int(rec.pk.rsplit("#", 2)[1])  # USAGE#<group>#<hour>#<shard>
            hours[hour] = hours.get(hour, GroupUsage("")).plus(rec)
        return hours


