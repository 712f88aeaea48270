"""A job's own log lines for operators (``longjobs jobs logs``, ``JobClient.logs``): the runs
its history names, each run's task stream through the job-log port, the job's lines in order.

A `jobs retry` leaves a boundary in the history and the attempts after it count from 1 again,
so ``attempt`` N selects each round's attempt N. A run just started may have written no history
entry yet: its bundle's task is read too. A follower passes the :class:`LogCursor` of its last
read back and gets only what is new (CloudWatch is asked from the latest time seen; the lines
seen at that time are told apart by their key).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain.errors import JobNotFound, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES
from dispatcher.ops.history import Attempt
from dispatcher.ports.job_logs import JobLogs, LogLine
from dispatcher.ports.table import Record
from dispatcher.store import OperatorStore


@dataclass
class LogCursor:
    """What a job-log read has seen: each stream's latest line time and the lines' keys."""

    since: dict[str, float] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class JobLog:
    """A job's lines, each with the run (history entry) whose task wrote it; ``finished``:
    the job had ended when they were read, so a follower can stop after them."""

    job_id: str
    lines: list[tuple[Attempt, LogLine]]
    finished: bool
    cursor: LogCursor

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "finished": self.finished,
                "lines": [line.to_json() for _, line in self.lines]}


def runs(attempts: list[Attempt], bundle: Record | None) -> list[Attempt]:
    """The job's runs with a task, each task once, oldest first; the task of its bundle as
    well when that task has not written a history entry for it yet (a run just started)."""
    found: dict[str, Attempt] = {}
    for a in attempts:
        if a.task_arn and a.retry is None:
            found.setdefault(a.task_arn, a)
    if bundle is not None and bundle.task_arn and bundle.task_arn not in found \
            and bundle.state in ("LAUNCHED", "RUNNING"):
        found[bundle.task_arn] = Attempt(None, bundle.task_arn, bundle.task_definition, None,
                                         None, None, None, None, None, None)
    return list(found.values())


def log_streams(logs: JobLogs, job_id: str, attempts: list[Attempt],
                bundle: Record | None) -> list[dict[str, Any]]:
    """Where each run's lines are (``jobs show``): its stream and console link, or why that
    cannot be told."""
    out: list[dict[str, Any]] = []
    for run in runs(attempts, bundle):
        assert run.task_arn is not None  # runs() keeps runs with a task
        try:
            found = logs.locate(run.task_arn, run.task_definition, job_id)
        except LongjobsError as exc:
            out.append({"task_arn": run.task_arn, "attempt": run.attempt,
                        "unknown": exc.reason})
            continue
        if found is not None:
            out.append({"task_arn": run.task_arn, "attempt": run.attempt,
                        "group": found.group, "stream": found.name,
                        "console_url": found.console_url})
    return out


def read(store: OperatorStore, logs: JobLogs, job_id: str, *, attempt: int | None = None,
         cursor: LogCursor | None = None) -> JobLog:
    """The job's own lines, in order, run by run (each run's task stream, in the order of its
    history); ``attempt``: only runs with that attempt number; ``cursor``: only lines newer
    than an earlier read's."""
    found = store.detail(job_id)
    if found is None:
        raise JobNotFound("no such job", job_id=job_id)
    item, bundle = found
    cursor = cursor or LogCursor()
    attempts = [Attempt.from_history(h) for h in item.history or [] if isinstance(h, dict)]
    lines: list[tuple[Attempt, LogLine]] = []
    for run in runs(attempts, bundle):
        if run.task_arn is None or (attempt is not None and run.attempt is not None
                                    and run.attempt != attempt):
            continue
        stream = logs.locate(run.task_arn, run.task_definition)
        if stream is None:
            continue
        for line in logs.read(stream, job_id, since=cursor.since.get(stream.name)):
            if line.key in cursor.seen or (attempt is not None and line.attempt is not None
                                           and line.attempt != attempt):
                continue
            cursor.seen.add(line.key)
            cursor.since[stream.name] = max(cursor.since.get(stream.name, 0.0), line.at)
            lines.append((run, line))
    return JobLog(job_id, lines, item.state in TERMINAL_JOB_STATES, cursor)
