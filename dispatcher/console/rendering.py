"""How the console's pages are made: Jinja2 templates that autoescape everything (whatever a
job's kind, payload, reason or log line holds reaches the page as text), and the filters that
say values as the CLI says them (:mod:`dispatcher.ops.wording`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse

from dispatcher.console.guard import Guard
from dispatcher.domain.costs import JobCost
from dispatcher.domain.errors import JobNotFound, LongjobsError
from dispatcher.domain.progress import Progress
from dispatcher.ops.history import Attempt
from dispatcher.ops.wording import (
    cost_text,
    progress_cell,
    stop_said,
    task_id,
    waiting_text,
)

# Logs shown on a job's page: its last lines (`longjobs jobs logs` prints them all).
LOG_LINES = 1000


def when(ts: float | str | None) -> str:
    """A time as ``2026-12-05 23:20:16`` (UTC); an ISO string is cut the same way."""
    if ts is None or ts == "":
        return "-"
    if isinstance(ts, str):
        return ts[:19].replace("T", " ")
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def job_url(job_id: str) -> str:
    """A job's page: its id as one path segment, every character that could end it (or make
    it anything but a path, ``javascript:`` included) percent-encoded."""
    return "/jobs/" + quote(job_id, safe="")


def pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, default=str, ensure_ascii=False)


def short(text: Any, n: int = 60) -> str:
    s = "" if text is None else " ".join(str(text).split())
    return s if len(s) <= n else s[:n - 1] + "…"


def environment() -> Environment:
    env = Environment(loader=PackageLoader("dispatcher.console", "templates"),
                      autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True)
    filters: dict[str, Callable[..., Any]] = {
        "when": when, "job_url": job_url, "seg": lambda text: quote(str(text), safe=""),
        "short": short, "waiting": waiting_text,
        "task": task_id, "json": pretty,
        "cost": lambda c: cost_text(c) if isinstance(c, JobCost) else "-",
        "stop": lambda a: stop_said(a.stop_code, a.exit_code, a.stop_class, a.outcome)
        if isinstance(a, Attempt) else "",
        "progress": lambda p, now, wide=False: progress_cell(p, now, wide)
        if isinstance(p, Progress) else "",
    }
    env.filters.update(filters)
    return env


class Renderer:
    """Renders a page with what every page has: the mode, the CSRF token, the time."""

    def __init__(self, guard: Guard, clock: Callable[[], float] = time.time) -> None:
        self.env = environment()
        self.guard = guard
        self.clock = clock

    def page(self, request: Request, name: str, *, status: int = 200,
             refresh: int | None = None, **context: Any) -> HTMLResponse:
        visitor = self.guard.visitor(request)
        base = {"operate": visitor.operate, "csrf": self.guard.token_for(request),
                "who": visitor.who, "read_only_hint": self.guard.read_only_hint,
                "now": self.clock(),
                "refresh": refresh, "notice": None, "problem": None, "page": ""}
        html = self.env.get_template(name).render({**base, **context})
        return HTMLResponse(html, status_code=status)

    def problem(self, request: Request, status: int, heading: str,
                said: str) -> HTMLResponse:
        return self.page(request, "problem.html", status=status, heading=heading, problem=said)

    def failed(self, request: Request, exc: Exception, *, acting: bool) -> HTMLResponse:
        """The operator API's error said on a page: a missing job as 404, bad input (or an
        action refused) with its message, which names the fix, anything the stack did not
        answer (boto3, the network) as 503."""
        if isinstance(exc, JobNotFound):
            return self.problem(request, 404, "No such job", f"No job has the id "
                                f"{exc.job_id!r}; check the id, or find the job on the jobs page.")
        if isinstance(exc, LongjobsError):
            return self.problem(request, 409 if acting else 400,
                                "It was not done" if acting else "That cannot be shown", str(exc))
        after = ("Nothing is known to have changed; look at the job (or the bulk page's count) "
                 "before you try again.") if acting else ("Check the console's AWS credentials "
                                                          "and settings (as for `longjobs "
                                                          "stats`), then reload.")
        return self.problem(request, 503, "The stack did not answer",
                            f"{type(exc).__name__}: {str(exc)[:300]}. {after}")
