"""The console's pages that read: overview, jobs, a job, deployments, dead letters. Each
reads through the operator API (:class:`~dispatcher.console.source.ConsoleSource`) what it
shows and nothing more: the overview reads no job item (``top``'s figures are counts and
bundles), the jobs page one page of the status index (a cursor, never a scan), a job's page
its item, its bundle's and its log lines."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from dispatcher.console.chart import chart
from dispatcher.console.rendering import LOG_LINES, Renderer, job_url, pretty
from dispatcher.console.source import ConsoleSource
from dispatcher.domain import tenants
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.domain.waiting import REASONS
from dispatcher.ops.job_views import SCHEDULED, JobDetail
from dispatcher.ops.wording import parse_duration
from dispatcher.ports.alarm_board import FiringAlarm

PAGE_ROWS = 50
# The overview's figures are shared by every open page for a little under a refresh, and
# its day of counts (COUNT queries over a day of the status index: read capacity in
# proportion to a day's jobs) for five minutes: many open tabs cost what one does.
SNAPSHOT_SECONDS = 2.5
DAY_COUNTS_SECONDS = 300.0
# The stack's alarms in alarm: one DescribeAlarms per this many seconds, whatever the tabs.
ALARMS_SECONDS = 15.0
# The chart of jobs ended per hour: the usage counters of the last day, read once a minute.
ENDED_SECONDS = 60.0
ENDED_HOURS = 24
# A page shows a state that still changes; these do not (the page stops following them).
SETTLED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED", "REJECTED"})
STATES = [str(s) for s in JobState] + [SCHEDULED]
REFRESH_SECONDS = 3
NOTICES = {
    "cancelled": "Cancelled.",
    "cancel-requested": "Cancel requested: its task stops it at its next heartbeat; this page "
                        "shows CANCELLED once it has.",
    "retried": "Retried: it waits for its launch (see what it waits for below).",
}


class Cached:
    """A value made at most once per ``seconds``, by whichever request asks first; while it
    is being made again, the others are given the one before (a slow read never holds every
    open page's request waiting behind it)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._made: tuple[float, Any] | None = None
        self._making = False

    def get(self, make: Callable[[], Any]) -> Any:
        with self._lock:
            made = self._made
            fresh = made is not None and time.monotonic() - made[0] < self.seconds
            if fresh or (made is not None and self._making):
                return made[1]  # type: ignore[index]
            self._making = True
        try:
            value = make()
        finally:
            with self._lock:
                self._making = False
        with self._lock:
            self._made = (time.monotonic(), value)
        return value


@dataclass(frozen=True)
class JobFilter:
    state: str | None = None
    kind: str | None = None
    since: str | None = None
    until: str | None = None
    waiting_for: str | None = None
    label: str | None = None
    tenant: str | None = None
    prefix: str | None = None

    @staticmethod
    def of(request: Request) -> JobFilter:
        q = request.query_params

        def get(name: str) -> str | None:
            value = q.get(name, "").strip()
            return value or None
        state = get("state")
        return JobFilter(state.upper() if state else None, get("kind"), get("since"),
                         get("until"), get("waiting_for"), get("label"), get("tenant"),
                         get("prefix"))

    @property
    def any(self) -> bool:
        return any(vars(self).values())

    def query(self, **more: str) -> str:
        pairs = {k: v for k, v in vars(self).items() if v} | more
        return "/jobs" + ("?" + urlencode(pairs) if pairs else "")


class Pages:
    """The read pages of one console."""

    def __init__(self, source: ConsoleSource, render: Renderer) -> None:
        self.source = source
        self.render = render
        self._snapshot = Cached(SNAPSHOT_SECONDS)
        self._day = Cached(DAY_COUNTS_SECONDS)
        self._alarms = Cached(ALARMS_SECONDS)
        self._ended = Cached(ENDED_SECONDS)

    def answered(self, page: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """``page`` with the operator API's errors said on a page (Renderer.failed)."""
        def run(request: Request) -> Response:
            try:
                return page(request)
            except Exception as exc:
                return self.render.failed(request, exc, acting=False)
        return run

    # -- overview -------------------------------------------------------------------------------
    def overview(self, request: Request) -> Response:
        snap = self._snapshot.get(self.source.top.snapshot)
        day = self._day.get(lambda: self.source.queries.stats(since_seconds=86400))
        alarms, alarms_error = self._alarms.get(self._firing)
        ended = self._ended.get(lambda: chart(self.source.queries.ended_by_hour(ENDED_HOURS)))
        return self.render.page(request, "overview.html", page="overview", snap=snap,
                                day=day.jobs, day_at=day.at, states=[str(s) for s in JobState],
                                refresh=REFRESH_SECONDS, no_tenant=tenants.NONE,
                                alarms=alarms, alarms_error=alarms_error, ended=ended)

    def _firing(self) -> tuple[list[FiringAlarm] | None, str | None]:
        """The stack's alarms in alarm, or why they could not be read (the rest of the
        overview is shown either way: an alarm read refused is no reason to hide the jobs)."""
        try:
            return self.source.queries.alarms_firing(), None
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"

    # -- jobs -----------------------------------------------------------------------------------
    def jobs(self, request: Request) -> Response:
        wanted = request.query_params.get("q", "").strip()
        if wanted:
            self.source.client.get(wanted)  # JobNotFound: said as 404
            return RedirectResponse(job_url(wanted), status_code=303)
        f = JobFilter.of(request)
        if f.state is not None and f.state not in STATES:
            raise LongjobsError(f"state {f.state!r} is not one of " + ", ".join(STATES))
        if f.waiting_for is not None and f.waiting_for not in REASONS:
            raise LongjobsError(f"waiting for {f.waiting_for!r} is not one of "
                                + ", ".join(REASONS))
        since = parse_duration(f.since, "created within") if f.since else None
        until = parse_duration(f.until, "created more than") if f.until else None
        after = request.query_params.get("after") or None
        bounded, next_url = "", None
        if (f.waiting_for or f.label or f.tenant) and until is not None:
            raise LongjobsError("'created more than … ago' goes with state, kind and created "
                                "within; clear the waiting-for reason, the label and the "
                                "tenant to use it")
        if f.waiting_for and not (f.label or f.tenant or f.prefix):
            # Pages by their cursor, each looking at a bounded run of the PENDING jobs.
            page = self.source.queries.page_waiting(f.waiting_for, status=f.state,
                                                    kind=f.kind, since_seconds=since,
                                                    limit=PAGE_ROWS, after=after)
            jobs = page.jobs
            next_url = f.query(after=page.next) if page.next else None
        elif f.label or f.tenant:
            # Pages of the label index by their cursor, each looking at a bounded run of it.
            page = self.source.queries.page_labelled(
                label=f.label, tenant=f.tenant, status=f.state, kind=f.kind,
                since_seconds=since, limit=PAGE_ROWS, after=after,
                waiting_for=f.waiting_for, prefix=f.prefix)
            jobs = page.jobs
            next_url = f.query(after=page.next) if page.next else None
        elif f.waiting_for:
            # With the start of the id: a bounded window of the newest, no pages past it.
            jobs = self.source.queries.list_jobs(status=f.state, kind=f.kind,
                                                 since_seconds=since, limit=PAGE_ROWS,
                                                 waiting_for=f.waiting_for, prefix=f.prefix)
            bounded = f"the newest {len(jobs)} that match" if jobs else ""
        else:
            page = self.source.queries.page_jobs(status=f.state, kind=f.kind,
                                                 since_seconds=since, limit=PAGE_ROWS,
                                                 after=after, until_seconds=until,
                                                 prefix=f.prefix)
            jobs = page.jobs
            next_url = f.query(after=page.next) if page.next else None
        return self.render.page(
            request, "jobs.html", page="jobs", jobs=jobs, f=f, states=STATES, reasons=REASONS,
            after=after, next_url=next_url, first_url=f.query(), bounded=bounded,
            refresh=None if after or f.prefix else REFRESH_SECONDS)

    # -- a job ----------------------------------------------------------------------------------
    def job(self, request: Request) -> Response:
        job_id = request.path_params["job_id"]
        d = self.source.queries.show(job_id)
        s = d.summary
        lines, cut, log_problem = self._log_lines(job_id) if s.state != "REJECTED" \
            else ([], False, None)
        notice = NOTICES.get(request.query_params.get("done", ""))
        return self.render.page(
            request, "job.html", page="jobs", d=d, s=s, values=_values(d),
            array=_array_text(d.array), depends_on=d.depends_on, lines=lines,
            cut=cut, log_problem=log_problem, notice=notice,
            can_cancel=s.state in ("PENDING", "RUNNING", SCHEDULED),
            can_retry=s.state in ("FAILED", "CANCELLED"),
            refresh=None if s.state in SETTLED else REFRESH_SECONDS)

    def _log_lines(self, job_id: str) -> tuple[list[str], bool, str | None]:
        from dispatcher.ops.wording import when

        try:
            read = self.source.queries.job_log(job_id)
        except LongjobsError as exc:
            return [], False, str(exc)
        lines = [f"{when(line.to_json()['at'])} {line.level:<7} {line.message}"
                 + (("\n" + line.exception.rstrip("\n")) if line.exception else "")
                 for _, line in read.lines]
        return lines[-LOG_LINES:], len(lines) > LOG_LINES, None

    # -- deployments, dead letters --------------------------------------------------------------
    def deployments(self, request: Request) -> Response:
        snap = self._snapshot.get(self.source.top.snapshot)
        return self.render.page(request, "deployments.html", page="deployments",
                                deployment=self.source.queries.deployment(),
                                by_revision=snap.tasks_by_revision, refresh=REFRESH_SECONDS)

    def dead_letters(self, request: Request) -> Response:
        letters = self.source.client.dead_letters().peek(50) \
            if self.source.has_dead_letters else []
        moved = request.query_params.get("moved")
        notice = f"Moved {int(moved)} message(s) back to their job queues." \
            if moved and moved.isascii() and moved.isdecimal() else None
        # Not refreshed by itself: every look counts as a receive of each message.
        return self.render.page(request, "dead_letters.html", page="dead_letters",
                                letters=letters, configured=self.source.has_dead_letters,
                                notice=notice)

    def audit(self, request: Request) -> Response:
        after = request.query_params.get("after") or None
        entries, older = self.source.client.audit_trail().audit_page(after, PAGE_ROWS)
        return self.render.page(request, "audit.html", page="audit", entries=entries,
                                older=older, first=after is None)


def _values(d: JobDetail) -> list[tuple[str, str]]:
    out = [("payload", d.payload), ("result", d.result), ("checkpoint", d.checkpoint)]
    return [(name, pretty(value)) for name, value in out if value is not None]


def _array_text(array: dict[str, Any] | None) -> str:
    if not array or "parent" in array:
        return ""
    counts = ", ".join(f"{n} {state}" for state, n in array["by_state"].items() if n)
    failed = array.get("failed_indexes") or []
    return (f"{array['size']} children: {counts or 'none recorded yet'}"
            + (f"; failed indexes {', '.join(map(str, failed[:100]))}"
               + (" …" if len(failed) > 100 else "") if failed else ""))
