"""The operators' read API over the job table: list, show and stats, as typed objects.

Every read goes through the operator role of the Store port (:class:`OperatorStore`), whose
queries use the status index (hash ``<TYPE>#<STATE>``, a job state spread over shards; range ISO
time), so the cost of a question follows the size of its answer, never the size of the table: a
list merges the partitions it reads (a state's shards; every state's for "all statuses") and
reads each only as far as the merge takes from it (:func:`dispatcher.store.index.query`), a
page goes on from its cursor, and counts are COUNT queries: the active states (PENDING, RUNNING) in
full, the finished ones over a window of the index's range key (``stats``' ``since``), so that
no read grows with the history the table keeps (LONGJOBS_RETENTION_DAYS of finished jobs). The
CLI (``dispatcher.cli.jobs_commands``) and ``JobClient`` are thin layers over this module; each
result has ``to_json()`` with a stable shape for scripts.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain import costs
from dispatcher.domain.costs import JobCost
from dispatcher.domain.deployment import Deployment
from dispatcher.domain.errors import JobNotFound, LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.domain.waiting import (
    REASONS,
)
from dispatcher.ops.history import Attempt, opt
from dispatcher.ops.job_log import JobLog, LogCursor, log_streams, read
from dispatcher.ops.job_path import state_changes
from dispatcher.ops.job_views import (
    DEPENDENTS_SHOWN,
    SCHEDULED,
    JobDetail,
    JobPage,
    JobSummary,
    clip,
)
from dispatcher.ops.job_waits import waiting_of
from dispatcher.ops.stack_figures import JOB_STATES, StackFigures
from dispatcher.ports.alarm_board import AlarmBoard
from dispatcher.ports.job_logs import JobLogs
from dispatcher.ports.queue import Queue
from dispatcher.ports.table import Record
from dispatcher.store import OperatorStore
from dispatcher.store.array_ops import array_counts
from dispatcher.store.codec import iso
from dispatcher.store.label_index import entry

# `jobs list --waiting-for`: the newest PENDING jobs read to find those waiting so (and a
# page of the console's list by waiting reason: at most this many looked at, in runs of
# WAITING_RUN, each run's bundles read a hundred at a time).
WAITING_READ = 1000
WAITING_RUN = 200
# The error a cancelled handler's stop leaves (ctx.raise_if_cancelled, an async task's cancel).
CANCEL_ERRORS = ("Interrupted", "CancelledError")


def parse_status(status: str) -> JobState | str:
    """A stored state, or SCHEDULED (PENDING with its not_before ahead)."""
    if status.strip().upper() == SCHEDULED:
        return SCHEDULED
    try:
        return JobState(status.strip().upper())
    except ValueError:
        raise LongjobsError(f"unknown status {status!r}; one of "
                            + ", ".join([*JOB_STATES, SCHEDULED])) from None


@dataclass
class Queries(StackFigures):
    """Reads over the job table (through the operator role of the store port) and, for
    stats, the job queues and the dead-letter queue (the stack's figures:
    :class:`~dispatcher.ops.stack_figures.StackFigures`)."""

    store: OperatorStore
    queue: Queue | None = None
    dead_letters: Queue | None = None
    # The high and low queues, where they are queues of their own: stats' backlog is the sum.
    other_queues: tuple[Queue, ...] = ()
    clock: Any = field(default=time.time)
    logs: JobLogs | None = None  # where jobs' own lines are (jobs logs, the streams in show)
    # The stack's alarms (LONGJOBS_ALARM_PREFIX): None where no prefix is set (local mode).
    alarms: AlarmBoard | None = None

    # -- list -----------------------------------------------------------------------------------
    def list_jobs(self, *, status: str | None = None, kind: str | None = None,
                  since_seconds: float | None = None, limit: int = 50,
                  waiting_for: str | None = None, label: str | None = None,
                  tenant: str | None = None, prefix: str | None = None) -> list[JobSummary]:
        """Newest first (by creation time, the index's range key), at most ``limit``; with
        ``waiting_for``, only PENDING jobs waiting for that reason, among the newest
        :data:`WAITING_READ` PENDING ones; with ``label`` (``key=value``), only the jobs that
        carry it, among its newest :data:`~dispatcher.store.label_index.LABEL_READ` (the
        label index: dispatcher.store.label_index); with ``tenant``, only that tenant's jobs
        (filed in the label index too, as ``@tenant``); with ``prefix``, only the jobs whose
        id starts with it (among the newest of each partition:
        :meth:`dispatcher.store.job_lists.JobLists.list_jobs`)."""
        if label is not None or tenant:
            return self.page_labelled(
                label=label, tenant=tenant, status=status, kind=kind,
                since_seconds=since_seconds, waiting_for=waiting_for, prefix=prefix,
                limit=limit if not prefix else max(limit, WAITING_READ)).jobs[:limit]
        if waiting_for is not None:
            return self._list_waiting(waiting_for, status, kind, since_seconds, limit, prefix)
        rows = self._list_items(status, kind, since_seconds, limit, prefix=prefix)
        return self._summaries(rows, self.clock())

    def page_jobs(self, *, status: str | None = None, kind: str | None = None,
                  since_seconds: float | None = None, limit: int = 50,
                  after: str | None = None, until_seconds: float | None = None,
                  prefix: str | None = None) -> JobPage:
        """As :meth:`list_jobs` (without its ``waiting_for`` and ``label``), a page at a time:
        ``after`` is the cursor the page before gave (None: the newest page);
        ``until_seconds``: only jobs created at least that long ago (the first page starts
        there: a position in the index, as a cursor is)."""
        if after is not None:
            position: tuple[str, str] | None = JobPage.position(after)
        elif until_seconds is not None:
            # Past every key created at that moment: a job key sorts below "~".
            position = (iso(max(0.0, self.clock() - until_seconds)), "~")
        else:
            position = None
        rows = self._list_items(status, kind, since_seconds, limit + 1, after=position,
                                prefix=prefix)
        more = len(rows) > limit
        rows = rows[:limit]
        return JobPage(self._summaries(rows, self.clock()),
                       JobPage.cursor(rows[-1]) if more and rows else None)

    def page_waiting(self, reason: str, *, status: str | None = None, kind: str | None = None,
                     since_seconds: float | None = None, limit: int = 50,
                     after: str | None = None, prefix: str | None = None) -> JobPage:
        """The PENDING jobs waiting for ``reason``, newest first, a page at a time: the
        PENDING partitions are read on from ``after`` in runs of :data:`WAITING_RUN` rows
        until ``limit`` jobs match or :data:`WAITING_READ` rows (``limit``, if more) were
        looked at. The cursor is the position of the last row looked at, so a page may hold
        fewer than ``limit`` and still have one after it (the rows past it are not looked at
        yet). ``jobs list --waiting-for`` is its first page."""
        if reason not in REASONS:
            raise LongjobsError(f"unknown waiting reason {reason!r}; one of "
                                + ", ".join(REASONS))
        if status is not None and parse_status(status) not in (JobState.PENDING, SCHEDULED):
            return JobPage([], None)
        position = JobPage.position(after) if after is not None else None
        found: list[JobSummary] = []
        looked, bound, last_run = 0, max(limit, WAITING_READ), True
        while looked < bound and len(found) < limit:
            rows = self._list_items(status or JobState.PENDING, kind, since_seconds,
                                    WAITING_RUN, after=position, prefix=prefix)
            last_run = len(rows) < WAITING_RUN
            for n, (row, s) in enumerate(zip(rows, self._summaries(rows, self.clock()),
                                             strict=True)):
                looked += 1
                position = (row.status_at or "", row.pk)
                if s.waiting_for is not None and s.waiting_for.reason == reason:
                    found.append(s)
                    if len(found) == limit:
                        last_run = last_run and n == len(rows) - 1
                        break
            if last_run:
                break
        # Read to its end (a short run looked at whole): no page after it. Otherwise one row
        # past the last looked at says whether there is.
        if position is None or last_run or not self._list_items(
                status or JobState.PENDING, kind, since_seconds, 1, after=position,
                prefix=prefix):
            return JobPage(found, None)
        return JobPage(found, JobPage.cursor_of(position))

    def _list_waiting(self, reason: str, status: str | None, kind: str | None,
                      since_seconds: float | None, limit: int,
                      prefix: str | None = None) -> list[JobSummary]:
        return self.page_waiting(reason, status=status, kind=kind, since_seconds=since_seconds,
                                 limit=limit, prefix=prefix).jobs

    def page_labelled(self, *, label: str | None, tenant: str | None,
                      status: str | None = None, kind: str | None = None,
                      since_seconds: float | None = None, limit: int = 50,
                      after: str | None = None, waiting_for: str | None = None,
                      prefix: str | None = None) -> JobPage:
        """The jobs that carry ``label`` (``key=value``; else those of ``tenant``, filed as a
        label), newest first, a page at a time from the cursor ``after``: each page looks at
        up to :data:`~dispatcher.store.label_index.LABEL_READ` of the label's index rows and
        holds the first ``limit`` that match the state, kind and window, then those waiting
        for ``waiting_for`` and whose id starts with ``prefix``; so a page may hold fewer than
        ``limit`` and still have one after it. ``jobs list --label``/``--tenant`` is its
        first page."""
        try:
            indexed = entry(label, tenant)
        except ValueError as exc:
            raise LongjobsError(str(exc)) from None
        if indexed is None:
            raise LongjobsError("a list by label needs a label (key=value) or a tenant")
        key, value = indexed
        if waiting_for is not None and waiting_for not in REASONS:
            raise LongjobsError(f"unknown waiting reason {waiting_for!r}; one of "
                                + ", ".join(REASONS))
        now = self.clock()
        state = parse_status(status) if status else None
        rows, position, more = self.store.labelled_page(
            key, value, limit=limit, after=JobPage.position(after) if after else None,
            states=None if state is None else [JobState.PENDING if state == SCHEDULED
                                               else JobState(state)],
            since=max(0.0, now - since_seconds) if since_seconds is not None else None,
            kind=kind, scheduled_after=now if state == SCHEDULED else None,
            tenant=tenant or None)
        found = [s for s in self._summaries(rows, now) if s.job_id.startswith(prefix or "")
                 and (waiting_for is None or (s.waiting_for is not None
                                              and s.waiting_for.reason == waiting_for))]
        return JobPage(found, JobPage.cursor_of(position) if more and position else None)

    def _summaries(self, rows: list[Record], now: float) -> list[JobSummary]:
        """Rows with what each PENDING one waits for and how far each RUNNING one got: their
        bundles' records (one read per 100 bundles, only if a row is either) and the tick's
        summary (one read, only if a row is PENDING)."""
        pending = [i for i in rows
                   if i.state == JobState.PENDING and not i.pk.startswith("REJECT#")]
        running = [i for i in rows if i.state == JobState.RUNNING]
        if not pending and not running:
            return [JobSummary.from_item(i, now) for i in rows]
        summary = self.store.tick_summary() if pending else None
        bundles = {b.pk.split("#", 1)[1]: b for b in self.store.bundle_records(
            sorted({i.bundle_id for i in pending + running if i.bundle_id}))}
        return [JobSummary.from_item(
            i, now, waiting_of(i, bundles.get(i.bundle_id or ""), summary, now)
            if i.state == JobState.PENDING and not i.pk.startswith("REJECT#") else None,
            bundles.get(i.bundle_id or "")) for i in rows]

    def _list_items(self, status: str | None, kind: str | None, since_seconds: float | None,
                    limit: int, after: tuple[str, str] | None = None,
                    prefix: str | None = None) -> list[Record]:
        states = [parse_status(status)] if status else list(JOB_STATES)
        now = self.clock()
        # A span longer than the epoch means everything (a date before 1970 has no ISO form).
        since = max(0.0, now - since_seconds) if since_seconds is not None else None
        if not status and not kind:  # every state as one index
            return self.store.list_states(list(JOB_STATES), since=since, limit=limit,
                                          after=after, prefix=prefix)
        # One state, or every state of one kind (each then has a read of its own: a finished
        # state's is bounded, an active one's filtered): newest first, at most `limit` each.
        streams = [self.store.list_jobs(JobState.PENDING, since=since, kind=kind, limit=limit,
                                        scheduled_after=now, after=after, prefix=prefix)
                   if state == SCHEDULED else
                   self.store.list_jobs(JobState(state), since=since, kind=kind, limit=limit,
                                        after=after, prefix=prefix)
                   for state in states]
        # (status_at, pk): the index's order, which a page's cursor is a position in.
        merged = heapq.merge(*streams, key=lambda i: (i.status_at or "", i.pk), reverse=True)
        return list(itertools.islice(merged, limit))

    # -- show -----------------------------------------------------------------------------------
    def show(self, job_id: str) -> JobDetail:
        found = self.store.detail(job_id)
        if found is None:
            raise JobNotFound("no such job", job_id=job_id)
        item, bundle = found
        now = self.clock()
        waiting = waiting_of(item, bundle, self.store.tick_summary(), now) \
            if item.state == JobState.PENDING and not item.pk.startswith("REJECT#") else None
        summary = JobSummary.from_item(item, now, waiting, bundle)  # SCHEDULED as list says
        if summary.state == JobState.REJECTED:
            return JobDetail(summary, None, False, None, None, None, None, [], None,
                             item.message_id, item.body)
        _, cut = clip(item.payload or {})
        attempts = [Attempt.from_history(h) for h in item.history or [] if isinstance(h, dict)]
        error = item.error
        if item.state == JobState.CANCELLED and isinstance(error, dict) \
                and error.get("type") in CANCEL_ERRORS:
            error = None  # how the stop reached the handler, not something that went wrong
        ran = [a for a in attempts if a.retry is None]
        array = array_counts(job_id, item) if item.array_size is not None else {
            "parent": item.array_parent, "index": int(item.array_index or 0)} \
            if item.array_parent is not None else None
        return JobDetail(summary, item.payload or {}, cut, item.result, error, item.checkpoint,
                         _checkpoint_at(item, ran), attempts, _bundle(bundle),
                         item.message_id, None, self._streams(job_id, attempts, bundle), array,
                         list(item.bulk_ids or []), self._cost(item),
                         dict(item.labels) if isinstance(item.labels, dict) else {},
                         [str(d["job_id"]) if isinstance(d, dict) else str(d)
                          for d in item.depends_on or []],
                         # Only a job something waits for has links to read.
                         self.store.dependents(job_id, DEPENDENTS_SHOWN) if item.waiters else [],
                         int(item.waiters or 0),
                         {str(k): int(v) for k, v in item.uses.items()}
                         if isinstance(item.uses, dict) else {},
                         # (an array's parent runs no attempt: its children tell its path)
                         state_changes(summary.created_at, str(item.state), summary.updated_at,
                                       summary.reason, attempts, opt(int, item.sequence))
                         if item.array_size is None else [],
                         opt(int, item.sequence))

    def deployment(self) -> Deployment | None:
        """The deployed job code (``longjobs deploy``'s record); None: nothing was deployed."""
        return self.store.deployment()

    def costs(self, job_ids: list[str]) -> dict[str, JobCost]:
        """The costs of the jobs among ``job_ids`` that ran (``jobs list --wide``): their
        items, 100 a read, and their tasks' pointers, 100 a read."""
        jobs = self.store.get_jobs(job_ids)
        rates = self.store.task_rates([a for j in jobs for a in costs.task_arns(j.history)])
        return {j.job_id: costs.job_cost(j.history, rates) for j in jobs
                if costs.task_arns(j.history)}

    def _cost(self, item: Record) -> JobCost | None:
        """The job's cost: its runs' seconds times their tasks' rates (one read of its
        tasks' pointers); None if it never ran."""
        history = [h for h in item.history or [] if isinstance(h, dict)]
        arns = costs.task_arns(history)
        if not arns:
            return None
        return costs.job_cost(history, self.store.task_rates(arns))

    # -- a job's own log lines (dispatcher.ops.job_log) ----------------------------------------
    def _streams(self, job_id: str, attempts: list[Attempt],
                 bundle: Record | None) -> list[dict[str, Any]]:
        return [] if self.logs is None else log_streams(self.logs, job_id, attempts, bundle)

    def job_log(self, job_id: str, *, attempt: int | None = None,
                cursor: LogCursor | None = None) -> JobLog:
        """The job's own lines, in order, run by run: see :func:`dispatcher.ops.job_log.read`."""
        if self.logs is None:
            raise LongjobsError("no log reader configured")
        return read(self.store, self.logs, job_id, attempt=attempt, cursor=cursor)


def _bundle(item: Record | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {"bundle_id": item.pk.split("#", 1)[1], "state": item.state,
            "attempt": int(item.attempt or 0), "task_arn": item.task_arn,
            "task_definition": item.task_definition,
            "heartbeat_at": opt(iso, item.heartbeat_at),
            "launch_failures": int(item.launch_failures or 0), "last_failure": item.last_failure}


def _checkpoint_at(item: Record, attempts: list[Attempt]) -> float | None:
    """The table keeps no checkpoint time. While a job runs, its item is written only by its
    start and its checkpoints, so a write after the current attempt started is a checkpoint."""
    if item.checkpoint is None or item.state != JobState.RUNNING or not attempts:
        return None
    started = attempts[-1].started_at
    if started is not None and item.updated_at is not None and item.updated_at > started:
        return float(item.updated_at)
    return None
