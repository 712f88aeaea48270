"""The stack's figures the operators read (``stats``, ``stats --by``, ``tenants``, the
console's overview): counts, counters and the queues' backlogs, never a job's item but for
the reruns of the last hour. A base of :class:`dispatcher.ops.queries.Queries`, which holds
what these read.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.ops.job_views import BacklogStats, Stats
from dispatcher.ops.usage import (
    EndedHour,
    TenantsReport,
    UsageReport,
    ended_by_hour,
    tenants_report,
    usage_report,
)
from dispatcher.ports.alarm_board import AlarmBoard, FiringAlarm
from dispatcher.ports.queue import Queue
from dispatcher.store import OperatorStore

HOUR = 3600.0
JOB_STATES: tuple[JobState, ...] = tuple(JobState)
# `stats`' default window for finished jobs: those admitted within the last day.
FINISHED_WINDOW = 24 * HOUR


def finished_since(now: float, since: float | None = None,
                   since_seconds: float | None = None) -> float:
    """Where ``stats``' window of finished jobs starts: ``since`` (a time), else
    ``since_seconds`` before ``now``, else :data:`FINISHED_WINDOW` before it; never before
    1970 (a date the index's ISO keys cannot say) nor after ``now``."""
    if since is not None and since_seconds is not None:
        raise LongjobsError("give since or since_seconds, not both")
    if since_seconds is not None and since_seconds < 0:
        raise LongjobsError(f"since_seconds {since_seconds} is negative")
    start = since if since is not None else now - (
        FINISHED_WINDOW if since_seconds is None else since_seconds)
    return min(now, max(0.0, start))


class StackFigures:
    """The figures' reads, over what :class:`~dispatcher.ops.queries.Queries` holds."""

    store: OperatorStore
    queue: Queue | None
    dead_letters: Queue | None
    other_queues: tuple[Queue, ...]
    clock: Any
    alarms: AlarmBoard | None

    def stats(self, *, since: float | None = None,
              since_seconds: float | None = None) -> Stats:
        """The backlog, the jobs by state, the tasks by revision, the last hour's launch
        failures and reruns. Active jobs are counted all; finished ones only if admitted since
        ``since`` (a time), or within ``since_seconds``, by default :data:`FINISHED_WINDOW`.

        Every figure reads what it shows, never the history: a COUNT query is charged for
        every item its key condition matches ("ScannedCount ... before a filter expression
        ... was applied", 1 MB a page:
        https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Query.Other.html),
        so the finished states are counted by a key condition on the index's range key (a
        job's admission time), not by a filter, and the active bundles and those changed
        within the hour are read by their own partitions and ranges. Counting the whole
        history instead (six million items at 30 days' retention of a nightly batch of
        200,000) would read gigabytes of index per call."""
        t = self.clock()
        cutoff = t - HOUR  # "recent" for launch failures and reruns
        start = finished_since(t, since, since_seconds)
        return Stats(at=t, backlog=self._backlog(),
                     jobs={str(s): self.store.count_jobs(s, since=start)
                           if s in TERMINAL_JOB_STATES else self.store.count_jobs(s)
                           for s in JOB_STATES},
                     running_by_revision=self._running_by_revision(),
                     launch_failures_last_hour=self._launch_failures(cutoff),
                     reruns_last_hour=self._reruns(cutoff), finished_since=start)

    def usage(self, by: str = "kind", *, since: float | None = None,
              since_seconds: float | None = None) -> UsageReport:
        """Jobs, run hours, vCPU-hours and dollars per group of the tasks that stopped in
        the window (``stats --by``): the usage counters, no job read."""
        t = self.clock()
        return usage_report(self.store, by, finished_since(t, since, since_seconds), t)

    def ended_by_hour(self, hours: int = 24) -> list[EndedHour]:
        """Jobs ended (and of them failed) in each of the last ``hours`` hours, as their
        tasks' stops counted them: the usage counters, no job read."""
        return ended_by_hour(self.store, self.clock(), hours)

    def tenants(self, *, since: float | None = None,
                since_seconds: float | None = None) -> TenantsReport:
        """Each tenant's tasks running now and what its jobs used in the window (the last
        24 h unless given): the active bundles and the usage counters, no job read."""
        t = self.clock()
        return tenants_report(self.store, self.store.active_bundles(),
                              finished_since(t, since, since_seconds), t)

    def alarms_firing(self) -> list[FiringAlarm] | None:
        """The stack's alarms in alarm, longest firing first (one DescribeAlarms a page of
        100); None when the client knows no alarm prefix."""
        return self.alarms.firing() if self.alarms is not None else None

    def _backlog(self) -> BacklogStats | None:
        if self.queue is None:
            return None
        parts = [q.backlog() for q in (self.queue, *self.other_queues)]
        dead = self.dead_letters.backlog().visible if self.dead_letters else None
        return BacklogStats(sum(b.visible for b in parts), sum(b.in_flight for b in parts),
                            sum(b.delayed for b in parts), None, dead)

    def _running_by_revision(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for bundle in self.store.active_bundles():
            rev = out.setdefault(bundle.task_definition or "unknown", {})
            rev[str(bundle.state)] = rev.get(str(bundle.state), 0) + 1
        return dict(sorted(out.items()))

    def _launch_failures(self, cutoff: float) -> dict[str, int]:
        """Bundles waiting for a relaunch after RunTask refused them within the window, by
        reason (first word, as in the tick's decision record)."""
        reasons: Counter[str] = Counter()
        for bundle in self.store.launch_failed_since(cutoff):
            reasons[(bundle.last_failure or "unknown").split(" ", 1)[0]] += 1
        return dict(reasons)

    def _reruns(self, cutoff: float) -> dict[str, int]:
        """Jobs rerun in the window, by stop class. A rerun relaunches the job's bundle
        (attempt > 1) and moves its index time, so only bundles touched in the window are
        read, then their jobs."""
        job_ids = [j for b in self.store.relaunched_since(cutoff) for j in b.job_ids]
        classes: Counter[str] = Counter()
        for job in self.store.job_records(list(dict.fromkeys(job_ids))):
            recent = [h.get("stop_class") for h in job.history or []
                      if isinstance(h, dict) and h.get("stop_class")
                      and float(h.get("stopped_at") or 0) >= cutoff]
            if recent:
                classes[str(recent[-1])] += 1
            elif int(job.infra_attempts or 0) > 0 and float(job.updated_at or 0) >= cutoff:
                classes["infrastructure"] += 1  # stopped before it started: no history entry
        return dict(classes)
