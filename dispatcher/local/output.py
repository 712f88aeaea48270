"""What ``longjobs local`` shows: its tasks' lines, readable; the dispatcher's own records, one
readable line each (a tick says what it did), and a tick's only when it changed something; with
``--verbose``, every tick's whole decision record as the JSON line the Lambda logs.

Every local task appends its output to one file (``LONGJOBS_LOCAL_LOG``), where ``longjobs jobs
logs`` finds a job's lines; :class:`Follower` echoes that file to the terminal as it grows, each
JSON line as ``HH:MM:SS LEVEL [job ID #attempt] logger: message``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dispatcher.ports.job_logs import said

POLL_SECONDS = 0.2


def render(text: str) -> str:
    """One line of task output for a person; a line that is not a JSON object, unchanged."""
    stripped = text.rstrip("\n")
    if not stripped.startswith("{"):
        return stripped
    try:
        data = json.loads(stripped)
    except ValueError:
        return stripped
    if not isinstance(data, dict):
        return stripped
    at = str(data.get("timestamp", ""))[11:19]
    who = str(data.get("logger") or data.get("service") or "")
    job = f" [job {data['job_id']} #{data.get('job_attempt', '?')}]" if "job_id" in data else ""
    out = f"{at} {data.get('level', 'INFO'):<7}{job} {who}: {said(data)}"
    exception = data.get("exception")
    return out + (f"\n{exception.rstrip()}" if isinstance(exception, str) else "")


class Follower:
    """Echoes a file's new complete lines, rendered, until stopped (a thread of its own)."""

    def __init__(self, path: str | Path, write: Callable[[str], Any]) -> None:
        self.path = Path(path)
        self._write = write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="task-output")

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        offset, rest = 0, b""
        while True:
            stopping = self._stop.is_set()  # read first: a last pass after the stop
            with contextlib.suppress(FileNotFoundError), self.path.open("rb") as f:
                f.seek(offset)
                data = f.read()
                offset += len(data)
                *lines, rest = (rest + data).split(b"\n")
                for line in lines:
                    if line.strip():
                        self._write(render(line.decode(errors="replace")) + "\n")
            if stopping:
                return
            self._stop.wait(POLL_SECONDS)


class QuietTicks(logging.Filter):
    """Passes a tick's decision record only if the tick changed something: it admitted or
    rejected messages, launched bundles, recovered a recording or found a task stopped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() not in ("tick", "tick skipped"):
            return True
        return changed(record.__dict__)


def changed(decision: dict[str, Any]) -> bool:
    intake = decision.get("intake") or {}
    launch = decision.get("launch") or {}
    reconcile = decision.get("reconcile") or {}
    return any((intake.get("admitted"), intake.get("rejected"), intake.get("released"),
                launch.get("bundles_launched"), launch.get("failures"),
                decision.get("recovered_recordings"), reconcile.get("stopped_found"),
                reconcile.get("timed_out"), reconcile.get("released"),
                reconcile.get("outcomes")))


def tick_said(decision: Mapping[str, Any]) -> str:
    """What a tick did, in a few words (what :func:`changed` looks at)."""
    intake = decision.get("intake") or {}
    launch = decision.get("launch") or {}
    reconcile = decision.get("reconcile") or {}
    facts = [(intake.get("admitted"), "admitted {}"), (intake.get("rejected"), "rejected {}"),
             (intake.get("released"), "released {} waiting"),
             (launch.get("bundles_launched"), "launched {} task(s)"),
             (sum((launch.get("failures") or {}).values()), "{} launch failure(s)"),
             (decision.get("recovered_recordings"), "took over {} recording(s)"),
             (reconcile.get("stopped_found"), "found {} stopped task(s)"),
             (len(reconcile.get("timed_out") or ()), "{} job(s) timed out"),
             (len(reconcile.get("released") or ()), "released {} held"),
             (len(reconcile.get("outcomes") or ()), "settled {} stop(s)")]
    return ", ".join(form.format(n) for n, form in facts if n) or "nothing to do"


def stop_said(outcome: Mapping[str, Any]) -> str:
    """What the task-event handler did with one task's stop, in a few words."""
    task = str(outcome.get("task_arn") or "?").rsplit("/", 1)[-1]
    finished = outcome.get("finished") or {}  # the task's last bundle, as its runner ended it
    succeeded = int(finished.get("succeeded", 0)) + int(outcome.get("succeeded_before") or 0)
    failed = len(outcome.get("failed") or ()) + int(finished.get("failed", 0)) \
        + int(outcome.get("failed_before") or 0)
    counts = [(succeeded, "{} succeeded"),
              (len(outcome.get("rerun") or ()), "{} to rerun"),
              (failed, "{} failed"),
              (outcome.get("relaunched"), "relaunched")]
    said = [form.format(n) for n, form in counts if n]
    reason = outcome.get("reason")
    return f"task {task} stopped: {outcome.get('result')}" + (
        f" ({', '.join(said)})" if said else "") + (f": {reason}" if reason else "")


class ReadableRecords(logging.Formatter):
    """The dispatcher's own records, for a person: ``HH:MM:SS LEVEL longjobs: what it did``, as
    the tasks' lines are shown (their JSON keeps every field: ``--verbose``)."""

    def format(self, record: logging.LogRecord) -> str:
        at = time.strftime("%H:%M:%S", time.localtime(record.created))
        message, data = record.getMessage(), record.__dict__
        if message in ("tick", "tick skipped"):
            text = f"{message}: {tick_said(data)}"
        elif message == "task stopped":
            text = stop_said(data)
        else:
            extra = [f"{key}: {data[key]}" for key in ("reason", "error") if data.get(key)]
            text = message + (f" ({'; '.join(extra)})" if extra else "")
        out = f"{at} {record.levelname:<7} longjobs: {text}"
        return out + (f"\n{self.formatException(record.exc_info)}" if record.exc_info else "")
