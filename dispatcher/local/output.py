"""What ``longjobs local`` shows: its tasks' lines, readable, and the tick's decision records
only when a tick changed something (or with ``--verbose``).

Every local task appends its output to one file (``LONGJOBS_LOCAL_LOG``), where ``longjobs jobs
logs`` finds a job's lines; :class:`Follower` echoes that file to the terminal as it grows, each
JSON line as ``HH:MM:SS LEVEL [job ID #attempt] logger: message``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    message = data.get("message")
    out = f"{at} {data.get('level', 'INFO'):<7}{job} {who}: " + (
        message if isinstance(message, str) else json.dumps(message))
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
