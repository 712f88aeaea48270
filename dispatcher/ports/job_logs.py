"""The job-log port: one job's own lines, read from where its tasks' output is kept.

A task's runner writes one JSON line per record (``job_runner.joblog``); the lines of a job carry
its ``job_id`` and ``job_attempt``. On ECS the awslogs driver puts a task's output in the stream
``<prefix>/<container>/<task id>`` of the worker's log group; a reader finds a job's lines in the
streams of the tasks that ran it (the job's history names them), never by scanning the group.
Adapters: CloudWatch Logs (``dispatcher.aws.cloudwatch_logs``), local mode's output file
(``dispatcher.files.task_output``) and the in-memory twin (``dispatcher.testing.memory_logs``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# The runner's JSON lines (powertools) carry their time as "2026-12-01 22:25:17,628+0000".
_POWERTOOLS_TIME = "%Y-%m-%d %H:%M:%S,%f%z"


@dataclass(frozen=True)
class LogStream:
    """Where one task's output is: a log group (local mode: a file) and a stream in it."""

    group: str
    name: str
    task_arn: str
    console_url: str | None = None  # a link for people, where there is a console


@dataclass(frozen=True)
class LogLine:
    """One line of a job's log. ``key`` tells lines apart when a reader reads again from a
    time it saw (CloudWatch's event id; a file's byte offset)."""

    key: str
    at: float  # epoch seconds
    job_id: str
    attempt: int | None  # the job's attempt as its runner counted it (history "attempt")
    level: str
    logger: str
    message: str
    exception: str | None = None
    task_arn: str | None = None

    def to_json(self) -> dict[str, Any]:
        at = datetime.fromtimestamp(self.at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {"at": at, "job_id": self.job_id, "attempt": self.attempt,
                "level": self.level, "logger": self.logger, "message": self.message,
                "exception": self.exception, "task_arn": self.task_arn}


class JobLogs(ABC):
    """Reads a job's lines from one task's stream, in the order they were written."""

    @abstractmethod
    def locate(self, task_arn: str, task_definition: str | None,
               job_id: str | None = None) -> LogStream | None:
        """The stream holding ``task_arn``'s output, or None if it cannot be told
        (``job_id``: a console link, where there is one, shows that job's lines)."""

    @abstractmethod
    def read(self, stream: LogStream, job_id: str, *, since: float | None = None) -> list[LogLine]:
        """The job's lines in ``stream`` (from ``since``, epoch seconds, inclusive), in order."""


def task_id(task_arn: str) -> str:
    """``arn:aws:ecs:region:acct:task/cluster/ID`` -> ``ID``."""
    return task_arn.rsplit("/", 1)[-1]


def stream_name(prefix: str, container: str, task_arn: str) -> str:
    """The awslogs driver's stream name for a task's container.
    https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using_awslogs.html"""
    return f"{prefix}/{container}/{task_id(task_arn)}"


def job_filter(job_id: str) -> str:
    """CloudWatch Logs' JSON filter pattern for a job's lines (job ids never hold a quote).
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/matching-terms-json-log-events.html"""
    return f'{{ $.job_id = "{job_id}" }}'


def parse_line(text: str, key: str, at: float | None = None) -> LogLine | None:
    """A runner's JSON line as a :class:`LogLine`, or None for anything else (a line that is
    not JSON, or carries no job). ``at``: the time the log store gave it, if any."""
    text = text.strip()
    if not text.startswith("{") or '"job_id"' not in text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("job_id"), str):
        return None
    attempt = data.get("job_attempt")
    message = said(data)
    return LogLine(
        key=key, at=at if at is not None else _time(data.get("timestamp")),
        job_id=data["job_id"], attempt=attempt if isinstance(attempt, int) else None,
        level=str(data.get("level") or "INFO"),
        logger=str(data.get("logger") or data.get("service") or ""),
        message=message,
        exception=data.get("exception") if isinstance(data.get("exception"), str) else None,
        task_arn=data.get("task_arn") if isinstance(data.get("task_arn"), str) else None)


def said(data: dict[str, Any]) -> str:
    """What a runner's JSON line says: its message, and for the runner's "job finished" the
    job's state, with an error's type and redacted message."""
    message = data.get("message")
    if not isinstance(message, str):
        return json.dumps(message)
    if isinstance(data.get("state"), str):
        why = f": {data['reason']}" if isinstance(data.get("reason"), str) else ""
        error = f", {data.get('error_type')}: {data.get('error')}" if data.get("error_type") \
            else ""
        return f"{message} ({data['state']}{why}{error})"
    return message


def _time(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value) / (1000 if value > 1e11 else 1)
    if isinstance(value, str):
        try:
            return datetime.strptime(value, _POWERTOOLS_TIME).timestamp()
        except ValueError:
            pass
    return 0.0
