"""The console's actions: cancel and retry a job, cancel or retry by filter, redrive the dead
letters. Each is the CLI's own call on the operator API, behind the guard's checks (operate
mode, same origin, CSRF token: :mod:`dispatcher.console.guard`), and answers with a redirect
to a page that shows what it did (POST, then GET: a reload does not act twice)."""

from __future__ import annotations

import json
import logging
import re
import shlex
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from dispatcher.console.guard import Guard, Refused, Visitor
from dispatcher.console.pages import REFRESH_SECONDS
from dispatcher.console.rendering import Renderer, job_url
from dispatcher.console.source import ConsoleSource
from dispatcher.domain.audit import AuditAction, AuditEntry
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.ops.bulk import SELECTABLE, BulkReport, BulkVerb, new_bulk_id
from dispatcher.ops.wording import parse_duration

# A dry run shows this many of the ids it selects.
SAMPLE = 10
REDRIVE_MOST = 100_000
# The bulk actions a console remembers to show (the oldest ended ones are forgotten).
RUNS_KEPT = 100
# A console that cannot work after its answer (a Lambda function is frozen once it has
# answered) runs a bulk action in the request for at most this long, under API Gateway's
# 30 s limit of an HTTP API's integration, then stops between pages and offers to continue it
# (the bulk id's marks make that resume act on no job twice).
IN_REQUEST_SECONDS = 20.0


@dataclass
class BulkRun:
    """A bulk action this console started: its report as it goes (a copy per page)."""

    report: BulkReport
    command: str  # the CLI's command that resumes it
    filter: dict[str, str] = field(default_factory=dict)  # its form's fields, to resume it
    done: bool = False
    problem: str | None = None

    @property
    def state(self) -> str:
        if self.problem:
            return "stopped"
        return "done" if self.done else "running"


@dataclass
class BulkRuns:
    """The bulk actions of one console, by id (each runs in a thread of its own)."""

    runs: dict[str, BulkRun] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, bulk_id: str) -> BulkRun | None:
        with self.lock:
            return self.runs.get(bulk_id)

    def all(self) -> list[BulkRun]:
        with self.lock:
            return list(self.runs.values())[::-1]

    def put(self, run: BulkRun) -> None:
        with self.lock:
            self.runs[run.report.bulk_id] = run
            self._forget()

    def _forget(self) -> None:
        """Keep the latest RUNS_KEPT (a console may serve for months); a running one stays."""
        for bulk_id in [k for k, r in self.runs.items() if r.done or r.problem][
                :max(0, len(self.runs) - RUNS_KEPT)]:
            del self.runs[bulk_id]

    def start(self, run: BulkRun) -> bool:
        """Keep ``run`` unless a run of its id is still going (a form sent twice)."""
        with self.lock:
            going = self.runs.get(run.report.bulk_id)
            if going is not None and not going.done and going.problem is None:
                return False
            self.runs[run.report.bulk_id] = run
            self._forget()
            return True


def _ended(report: BulkReport) -> str:
    return (f"acted on {report.acted}, requested {report.requested}, skipped {report.skipped}, "
            f"{report.errors} not acted on")


def _copy(report: BulkReport) -> BulkReport:
    """A copy the page reads while the run goes on (its samples a list of its own)."""
    return replace(report, error_samples=list(report.error_samples))


# The ids the console starts or resumes: one path segment of its bulk page's address.
BULK_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def check_bulk_id(bulk_id: str) -> None:
    if not BULK_ID.match(bulk_id):
        raise LongjobsError(f"bulk id {bulk_id[:70]!r}: 1-64 of letters, digits and ._:- "
                            "(the id the action's page or `jobs cancel|retry` printed)")


def bulk_form(values: Mapping[str, Any]) -> dict[str, str]:
    """The filter fields of a bulk form or query, stripped; status upper-cased."""
    out = {k: str(values.get(k, "") or "").strip() for k in ("verb", "status", "kind", "since",
                                                            "label", "tenant")}
    out["verb"] = out["verb"] or "cancel"
    out["status"] = out["status"].upper() or SELECTABLE[BulkVerb(out["verb"])][0] \
        if out["verb"] in set(BulkVerb) else out["status"].upper()
    return out


def command_of(f: Mapping[str, str], bulk_id: str | None = None) -> str:
    """The CLI's command for the same action (read-only consoles name it), each value quoted
    for a shell: a crafted link cannot make it run anything else."""
    q = shlex.quote
    parts = [f"longjobs jobs {q(f['verb'])} --status {q(f['status'])}"]
    parts += [f"--kind {q(f['kind'])}"] if f.get("kind") else []
    parts += [f"--since {q(f['since'])}"] if f.get("since") else []
    parts += [f"--label {q(f['label'])}"] if f.get("label") else []
    parts += [f"--tenant {q(f['tenant'])}"] if f.get("tenant") else []
    parts += [f"--bulk-id {q(bulk_id)}"] if bulk_id else []
    return " ".join(parts)


class TimeUp(Exception):
    """A bulk action run in its request reached :data:`IN_REQUEST_SECONDS`."""


class Actions:
    """The state-changing requests of one console. ``background``: whether a bulk action may
    go on in a thread after the answer (a server that keeps running; not a Lambda function)."""

    def __init__(self, source: ConsoleSource, render: Renderer, guard: Guard, *,
                 background: bool = True) -> None:
        self.source = source
        self.render = render
        self.guard = guard
        self.background = background
        self.bulk_runs = BulkRuns()
        self.log = logging.getLogger("longjobs.console.audit")

    async def _form(self, request: Request) -> dict[str, str]:
        self.guard.check_origin(request)  # before its body is read
        form = await request.form()
        values = {k: v for k, v in form.items() if isinstance(v, str)}
        self.guard.check_token(request, values.get("csrf"))
        return values

    async def acted(self, request: Request, act: Any) -> Response:
        try:
            values = await self._form(request)
            return await run_in_threadpool(act, request, values)
        except Refused as exc:
            return PlainTextResponse(exc.reason, status_code=exc.status)
        except Exception as exc:
            return self.render.failed(request, exc, acting=True)

    def audit(self, visitor: Visitor, action: AuditAction, target: str, count: int,
              outcome: str = "done", ref: str = "") -> None:
        """Write what was done as an audit record, and as a log line (the record's second
        copy, and the only one if the table refused it: the action stands either way)."""
        entry = AuditEntry(time.time(), visitor.who, action, target, count, outcome, ref)
        self.log.info(json.dumps({"audit": {"who": entry.who, "action": str(action),
                                            "target": target, "count": count,
                                            "outcome": outcome, "ref": ref}}))
        try:
            self.source.client.audit_trail().record_audit(entry)
        except Exception:
            self.log.exception("the audit record of %s %s by %s was not written", action,
                               target[:80], visitor.who)

    def _audited(self, request: Request, action: AuditAction, target: str,
                 act: Any) -> Any:
        """``act()``, its audit record written whether it did or was refused."""
        visitor = self.guard.visitor(request)
        try:
            done = act()
        except Exception as exc:
            self.audit(visitor, action, target, 0, f"not done: {exc}"[:300])
            raise
        self.audit(visitor, action, target, 1)
        return done

    # -- one job --------------------------------------------------------------------------------
    async def cancel(self, request: Request) -> Response:
        def act(request: Request, values: dict[str, str]) -> Response:
            job_id = request.path_params["job_id"]
            job = self._audited(request, AuditAction.CANCEL, job_id, lambda: self.source.client
                                .cancel(job_id, reason=f"cancelled from the console by "
                                        f"{self.guard.visitor(request).who}"))
            done = "cancelled" if job.state == JobState.CANCELLED else "cancel-requested"
            return RedirectResponse(f"{job_url(job_id)}?done={done}", status_code=303)
        return await self.acted(request, act)

    async def retry(self, request: Request) -> Response:
        def act(request: Request, values: dict[str, str]) -> Response:
            job_id = request.path_params["job_id"]
            self._audited(request, AuditAction.RETRY, job_id, lambda: self.source.client.retry(
                job_id, from_scratch=values.get("from_scratch") == "1",
                reason=f"retried from the console by {self.guard.visitor(request).who}"))
            return RedirectResponse(f"{job_url(job_id)}?done=retried", status_code=303)
        return await self.acted(request, act)

    # -- bulk -----------------------------------------------------------------------------------
    def bulk_page(self, request: Request) -> Response:
        f = bulk_form(request.query_params)
        preview = None
        problem = None
        if request.query_params.get("preview"):
            try:
                preview = self._preview(f, request.query_params.get("resume") or None)
            except LongjobsError as exc:
                problem = str(exc)
        return self.render.page(request, "bulk.html", page="bulk", f=f, preview=preview,
                                problem=problem, verbs=[str(v) for v in BulkVerb],
                                statuses=SELECTABLE[BulkVerb(f["verb"])]
                                if f["verb"] in set(BulkVerb) else [],
                                runs=self.bulk_runs.all())

    def _preview(self, f: dict[str, str], resume: str | None) -> dict[str, Any]:
        if resume is not None:
            check_bulk_id(resume)
        action, flt = self._bulk(f)
        selection, sample = action.preview(flt, SAMPLE)
        return {"matched": action.count(flt), "selection": selection, "sample": sample,
                "fields": [(k, v) for k, v in f.items() if v], "resume": resume,
                "command": command_of(f, resume)}

    def _bulk(self, f: Mapping[str, str]) -> Any:
        if f["verb"] not in set(BulkVerb):
            raise LongjobsError(f"action {f['verb']!r} is not cancel or retry")
        since = parse_duration(f["since"], "created within") if f.get("since") else None
        return self.source.client.bulk(f["verb"], status=f["status"], kind=f.get("kind") or None,
                                       since_seconds=since, label=f.get("label") or None,
                                       tenant=f.get("tenant") or None)

    async def bulk(self, request: Request) -> Response:
        def act(request: Request, values: dict[str, str]) -> Response:
            f = bulk_form(values)
            resume = values.get("bulk_id", "").strip() or None
            if resume is not None:
                check_bulk_id(resume)
            action, flt = self._bulk(f)
            # The action is over the filter, as the CLI's: jobs recorded since the dry run
            # match too. More than it showed is not what the person agreed to: look again.
            shown = values.get("matched", "")
            now = action.count(flt)
            if not (shown.isascii() and shown.isdecimal()) or now > int(shown):
                return self.render.page(
                    request, "bulk.html", page="bulk", f=f, verbs=[str(v) for v in BulkVerb],
                    statuses=SELECTABLE[BulkVerb(f["verb"])], runs=self.bulk_runs.all(),
                    preview=self._preview(f, resume), status=409,
                    problem=f"Nothing was done: {now} job(s) match now, not the "
                            f"{shown or 'unknown number'} the dry run showed. Look at the new "
                            "count below and act again if it is what you mean.")
            bulk_id = resume or new_bulk_id()
            run = BulkRun(BulkReport(bulk_id, f["verb"], flt.describe(None), now),
                          command_of(f, bulk_id), dict(f))
            if not self.bulk_runs.start(run):
                raise LongjobsError(f"bulk action {bulk_id} is running already in this "
                                    "console; follow it on its page")
            visitor = self.guard.visitor(request)
            verb = AuditAction(f"bulk-{f['verb']}")
            self.audit(visitor, verb, run.report.selection, now,
                       "resumed" if resume else "started", bulk_id)
            deadline = None if self.background else time.monotonic() + IN_REQUEST_SECONDS

            def progress(report: BulkReport) -> None:
                self.bulk_runs.put(replace(run, report=_copy(report)))
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeUp

            def work() -> None:
                try:
                    report = action.run(flt, bulk_id=bulk_id, resume=resume is not None,
                                        reason=values.get("reason") or
                                        f"from the console by {visitor.who}",
                                        from_scratch=values.get("from_scratch") == "1",
                                        progress=progress)
                    self.bulk_runs.put(replace(run, report=_copy(report), done=True))
                    self.audit(visitor, verb, report.selection,
                               report.acted + report.requested, _ended(report), bulk_id)
                except Exception as exc:  # a table that stopped answering: resumable
                    last = self.bulk_runs.get(bulk_id) or run
                    problem = (f"a request of this console works {IN_REQUEST_SECONDS:.0f} s "
                               "at most, and the action has more to do" if isinstance(
                                   exc, TimeUp) else f"{type(exc).__name__}: {exc}")
                    self.bulk_runs.put(replace(last, problem=problem))
                    self.audit(visitor, verb, last.report.selection,
                               last.report.acted + last.report.requested,
                               f"{_ended(last.report)}; stopped: {problem}", bulk_id)

            if self.background:
                threading.Thread(target=work, name=f"console-{bulk_id}", daemon=True).start()
                return RedirectResponse(f"/bulk/{quote(bulk_id, safe='')}", status_code=303)
            # Its page is this answer: another instance of the function would not know it.
            work()
            return self._run_page(request, self.bulk_runs.get(bulk_id) or run)
        return await self.acted(request, act)

    def bulk_run(self, request: Request) -> Response:
        run = self.bulk_runs.get(request.path_params["bulk_id"])
        if run is None:
            return self.render.problem(
                request, 404, "No such bulk action here",
                "This console did not start that bulk action (or was restarted since); "
                "resume it from a dry run of the same filter on the bulk page, giving its id.")
        return self._run_page(request, run)

    def _run_page(self, request: Request, run: BulkRun) -> Response:
        resume = urlencode({**{k: v for k, v in run.filter.items() if v}, "preview": "1",
                            "resume": run.report.bulk_id})
        return self.render.page(request, "bulk_run.html", page="bulk", run=run,
                                resume_url=f"/bulk?{resume}",
                                refresh=None if run.done or run.problem else REFRESH_SECONDS)

    # -- dead letters ---------------------------------------------------------------------------
    async def redrive(self, request: Request) -> Response:
        def act(request: Request, values: dict[str, str]) -> Response:
            text = values.get("limit", "100").strip()
            if not (text.isascii() and text.isdecimal()) or not 1 <= int(text) <= REDRIVE_MOST:
                raise LongjobsError(f"at most {text[:20]!r}: give a whole number from 1 to "
                                    f"{REDRIVE_MOST:,}")
            moved, failed = self.source.client.dead_letters().redrive(int(text))
            self.audit(self.guard.visitor(request), AuditAction.REDRIVE, "the dead-letter queue",
                       moved, f"{len(failed)} not moved" if failed else "done")
            if failed:
                raise LongjobsError(f"moved {moved}; {len(failed)} not moved: " + "; ".join(
                    f"{k}: {v}" for k, v in list(failed.items())[:5]))
            return RedirectResponse(f"/dead-letters?moved={moved}", status_code=303)
        return await self.acted(request, act)
