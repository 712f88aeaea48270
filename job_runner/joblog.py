"""Each line a handler writes, tagged with its job: ``logging`` on any logger, ``print()`` and
writes to ``sys.stdout``/``sys.stderr``.

A task runs up to LONGJOBS_TASK_CONCURRENCY jobs at once, as threads and as asyncio tasks on one
event loop, so neither the thread nor the stream tells whose code wrote a line. The job does:
the worker runs each job inside :func:`running`, which sets a context variable that the
executor's copied context carries into the handler's thread or asyncio task (and into what the
handler runs with ``contextvars.copy_context()``, ``asyncio.to_thread`` included). While
:class:`HandlerOutput` is installed, every record and every line written in a job's context
becomes one JSON line through the runner's own powertools handler: the runner's keys
(``task_arn``, ``bundle_id``), the job's (``job_id``, ``kind``, ``job_attempt``), ``level``,
``logger``, the formatted ``message`` and, for a record logged with an exception, its text
(``exception``). That is what ``longjobs jobs logs`` finds by ``job_id``.

Records of the handler's loggers are kept from LONGJOBS_JOB_LOG_LEVEL up; ``print()`` output is
kept whatever the level (stdout as INFO, stderr as WARNING; a line is emitted when its newline
is written, and a last unterminated one when the job ends). Outside any job, records keep the
old behaviour (WARNING and up, now as JSON lines) and writes go to the stream untouched. A
thread the handler starts itself with plain ``threading.Thread`` starts with an empty context,
so its lines carry no job.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

# Levels of the lines made from stream writes.
STDOUT_LEVEL = logging.INFO
STDERR_LEVEL = logging.WARNING
# Records written outside any job (libraries, the runner's own modules) keep this floor, as
# Python's last-resort handler did before this one was installed.
OUTSIDE_JOB_LEVEL = logging.WARNING


@dataclass
class JobTag:
    """The job whose code is running in this context, and its unterminated stream text."""

    job_id: str
    attempt: int
    partial: dict[str, str] = field(default_factory=dict)  # stream name -> text after the last \n
    lock: threading.Lock = field(default_factory=threading.Lock)


_current: contextvars.ContextVar[JobTag | None] = contextvars.ContextVar(
    "longjobs_job", default=None)
# Set while a line is being handed to the JSON handler: a write that handler makes itself (to
# a stream that is one of ours) goes straight through instead of looping.
_emitting: contextvars.ContextVar[bool] = contextvars.ContextVar("longjobs_emitting",
                                                                 default=False)


def current() -> JobTag | None:
    return _current.get()


@contextlib.contextmanager
def running(job_id: str, attempt: int) -> Iterator[JobTag]:
    """Attribute what runs in this context (and contexts copied from it) to the job."""
    tag = JobTag(job_id, attempt)
    token = _current.set(tag)
    try:
        yield tag
    finally:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, JobStream):
                stream.end(tag)
        _current.reset(token)


class _JobFilter(logging.Filter):
    def __init__(self, job_level: int) -> None:
        super().__init__()
        self.job_level = job_level
        self.own: frozenset[str] = frozenset()  # loggers that write through the sink already

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name in self.own:
            return False  # the runner's own logger (it propagates): written once, there
        tag = _current.get()
        floor = OUTSIDE_JOB_LEVEL if tag is None else self.job_level
        if record.levelno < floor:
            return False
        record.logger = record.name
        if tag is not None and not hasattr(record, "job_attempt"):
            record.job_id = tag.job_id
            record.job_attempt = tag.attempt
        return True


class _Forward(logging.Handler):
    """Hands each record to the runner's JSON handler (same keys, same stream, same lock)."""

    def __init__(self, target: logging.Handler, job_level: int) -> None:
        super().__init__()
        self.target = target
        self.only = _JobFilter(job_level)
        self.addFilter(self.only)

    def emit(self, record: logging.LogRecord) -> None:
        token = _emitting.set(True)
        try:
            self.target.handle(record)
        finally:
            _emitting.reset(token)


class JobStream:
    """Stands in for ``sys.stdout`` or ``sys.stderr``: a line written in a job's context
    becomes a record of that job; anything else goes to the real stream as it was."""

    def __init__(self, real: TextIO, name: str, level: int, sink: logging.Handler) -> None:
        self.real = real
        self.name = name
        self.level = level
        self._sink = sink

    def write(self, text: str) -> int:
        tag = _current.get()
        if tag is None or _emitting.get():
            return self.real.write(text)
        with tag.lock:
            *lines, rest = (tag.partial.get(self.name, "") + text).split("\n")
            tag.partial[self.name] = rest
        for line in lines:
            self._emit(tag, line)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.real.flush()

    def end(self, tag: JobTag) -> None:
        """The job is over: its unterminated text, if any, becomes its last line here."""
        with tag.lock:
            rest = tag.partial.pop(self.name, "")
        if rest:
            self._emit(tag, rest)

    def _emit(self, tag: JobTag, line: str) -> None:
        record = logging.LogRecord(self.name, self.level, "", 0, line, None, None,
                                   func="print")
        record.logger = self.name
        record.job_id = tag.job_id
        record.job_attempt = tag.attempt
        token = _emitting.set(True)
        try:
            self._sink.handle(record)
        finally:
            _emitting.reset(token)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer...
        return getattr(self.real, name)


class HandlerOutput:
    """Installs the tagging for the process: a root-logger handler and the two stream
    stand-ins, all writing through ``sink`` (the runner's JSON handler). ``uninstall`` (or
    leaving the ``with`` block) puts everything back."""

    def __init__(self, sink: logging.Handler, job_level: str | int = logging.INFO) -> None:
        self.sink = sink
        self.job_level = logging.getLevelName(job_level) if isinstance(job_level, str) \
            else job_level
        self._handler = _Forward(sink, self.job_level)
        self._saved: tuple[TextIO, TextIO, int] | None = None

    def install(self) -> HandlerOutput:
        root = logging.getLogger()
        self._saved = (sys.stdout, sys.stderr, root.level)
        self._handler.only.own = frozenset(
            name for name, logger in logging.Logger.manager.loggerDict.items()
            if isinstance(logger, logging.Logger) and self.sink in logger.handlers)
        root.addHandler(self._handler)
        # The root's level decides which records are made at all: low enough for the job
        # level (records outside jobs are held to OUTSIDE_JOB_LEVEL by the handler's filter).
        root.setLevel(min(root.level or logging.WARNING, self.job_level))
        sys.stdout = JobStream(sys.stdout, "stdout", STDOUT_LEVEL, self.sink)
        sys.stderr = JobStream(sys.stderr, "stderr", STDERR_LEVEL, self.sink)
        return self

    def uninstall(self) -> None:
        if self._saved is None:
            return
        sys.stdout, sys.stderr, level = self._saved
        root = logging.getLogger()
        root.removeHandler(self._handler)
        root.setLevel(level)
        self._saved = None

    def __enter__(self) -> HandlerOutput:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()
