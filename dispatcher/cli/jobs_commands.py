"""Operator commands on jobs: ``longjobs jobs list|show|cancel|retry`` and ``longjobs stats``.

A thin layer over ``JobClient`` and the operator queries (``dispatcher.ops.queries``): the
commands only parse options and render. Tables are for people; ``--json`` prints the objects'
``to_json()`` shapes, which stay stable for scripts. Every expected failure (missing
configuration, an endpoint that cannot be reached, an unknown job id) is one ``error: ...`` line
and exit code 2, via ``dispatcher.cli.error_policy.guarded``.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.cli.bulk_commands import (
    BulkIdOpt,
    DryRunOpt,
    KindOpt,
    LabelOpt,
    ReasonOpt,
    SinceOpt,
    TenantOpt,
    YesOpt,
    bulk,
)
from dispatcher.cli.common import (
    JsonOpt,
    WideOpt,
    client,
    print_json,
    short,
    short_ids,
    wide_console,
)
from dispatcher.cli.error_policy import fail, guarded
from dispatcher.cli.job_detail_view import render_detail
from dispatcher.cli.usage_view import render_usage
from dispatcher.domain.waiting import REASONS
from dispatcher.ops.wording import (
    cost_cell,
    parse_duration,
    parse_since,
    progress_cell,
    task_id,
    waiting_text,
    when,
)
from dispatcher.store.job_lists import FILTERED_READ

if TYPE_CHECKING:
    from collections.abc import Iterator

    from dispatcher.ops.job_log import JobLog
    from dispatcher.ops.job_views import Stats
    from dispatcher.ports.job_logs import LogLine

jobs_app = typer.Typer(name="jobs", no_args_is_help=True,
                       help="List, inspect, cancel and retry jobs.")


# -- jobs -----------------------------------------------------------------------------------------
@jobs_app.command("list")
def jobs_list(
    status: Annotated[str | None, typer.Option(help="PENDING, SCHEDULED (PENDING until its "
                                               "--not-before), RUNNING, SUCCEEDED, FAILED, "
                                               "CANCELLED or REJECTED.")] = None,
    kind: Annotated[str | None, typer.Option(
        help="Only jobs of this kind (of a finished state, without --since: among the newest "
             f"{FILTERED_READ} of each of its nine index partitions).")] = None,
    since: Annotated[str | None, typer.Option(help="Created within, e.g. 15m, 2h, 1d.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many jobs.")] = 50,
    waiting_for: Annotated[str | None, typer.Option(
        "--waiting-for", help="Only PENDING jobs waiting for this reason: "
        + ", ".join(REASONS) + ".")] = None,
    label: Annotated[str | None, typer.Option(
        help="Only jobs carrying this label, key=value (among its newest 1,000).")] = None,
    tenant: Annotated[str | None, typer.Option(
        help="Only this tenant's jobs (among its newest 1,000).")] = None,
    prefix: Annotated[str | None, typer.Option(
        help="Only jobs whose id starts with this (among the newest "
             f"{FILTERED_READ} of each index partition of the states asked for).")] = None,
    wide: WideOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Jobs newest first (by creation), read through the status index. Long ids are shortened
    to a prefix no other row shares; --wide or --json shows them whole. WAITING says why a
    job is not running yet (docs/operating.md, "Why a job waits")."""
    rows = guarded(lambda: client().list(
        status=status, kind=kind, since_seconds=parse_duration(since) if since else None,
        limit=limit, waiting_for=waiting_for, label=label, tenant=tenant, prefix=prefix))
    if as_json:
        print_json({"jobs": [r.to_json() for r in rows], "count": len(rows)})
        return
    ids = {r.job_id: r.job_id for r in rows} if wide else short_ids([r.job_id for r in rows])
    # One space between columns, every column but REASON on one line: at 80 columns REASON
    # keeps about 20 characters and wraps at word boundaries (--wide: whole, however wide).
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
    # WAITING (what a PENDING job waits for, `jobs show` has its numbers) only when a row
    # waits: the columns left to REASON are few at 80 columns.
    waits = any(r.waiting_for is not None for r in rows)
    # PROGRESS (a running job's report: percentage, ETA) only when a row has one.
    reports = any(r.progress is not None and r.state == "RUNNING" for r in rows)
    # COST (--wide: its share of its tasks' bills so far; reads the rows' items and tasks).
    spent = guarded(lambda: client().costs([r.job_id for r in rows])) if wide else {}
    # TENANT only when a row has one (most stacks have none).
    tenanted = any(r.tenant for r in rows)
    now = time.time()
    for name in ("JOB ID", "STATE", "KIND", *(["TENANT"] if tenanted else []),
                 "CREATED (UTC)", "TRIES",
                 *(["WAITING"] if waits else []), *(["PROGRESS"] if reports else []),
                 *(["COST"] if spent else [])):
        table.add_column(name, no_wrap=True, overflow="ellipsis",
                         max_width=14 if name in ("KIND", "TENANT") and not wide else None)
    table.add_column("REASON", min_width=16)
    for r in rows:
        attempts = "-" if r.max_attempts is None else f"{r.attempts}/{r.max_attempts}"
        if r.infra_attempts:
            attempts += f" +{r.infra_attempts} infra"
        created = when(r.to_json()["created_at"])
        shown = r.to_json()["waiting_for"]  # its times as ISO text
        waiting = [waiting_cell(shown, wide) if shown else "-"] if waits else []
        got = [progress_cell(r.progress, now, wide) if r.progress is not None
               and r.state == "RUNNING" else "-"] if reports else []
        cost = [cost_cell(spent.get(r.job_id))] if spent else []
        owner = [r.tenant or "-"] if tenanted else []
        table.add_row(*map(Text, (ids[r.job_id], r.state, r.kind or "-", *owner,
                                  created if wide else created[:16], attempts, *waiting, *got,
                                  *cost,
                                  r.reason or "" if wide else short(r.reason, 60))))
    console = wide_console() if wide else Console()
    console.print(table)
    shortened = any(ids[k] != k for k in ids)
    console.print(f"{len(rows)} job(s)" + (" (limit reached)" if len(rows) == limit else "")
                  + ("; ids shortened: --wide or --json shows them whole" if shortened
                     else ""))


@jobs_app.command("show")
def jobs_show(job_id: Annotated[str, typer.Argument(help="The job id.")],
              as_json: JsonOpt = False) -> None:
    """One job: payload, result or error, and every attempt with its task and revision."""
    detail = guarded(lambda: client().show(job_id))
    if as_json:
        print_json(detail.to_json())
        return
    render_detail(detail, Console())


@jobs_app.command("logs")
def jobs_logs(job_id: Annotated[str, typer.Argument(help="The job id.")],
              follow: Annotated[bool, typer.Option(
                  "--follow", "-f", help="Keep reading until the job has ended.")] = False,
              attempt: Annotated[int | None, typer.Option(
                  min=1, help="Only the runs with this attempt number.")] = None,
              as_json: JsonOpt = False) -> None:
    """The job's own log lines (what its handler logged or printed, and the runner's lines
    about it), in order, across its attempts; read from its tasks' log streams (CloudWatch
    Logs; in local mode, the tasks' output file), so still there after the tasks are gone."""
    jobs = guarded(client)
    if follow:
        last: list[str | None] = [None]
        for read in guarded(lambda: list_or_iter(jobs.follow_logs(job_id, attempt=attempt))):
            _print_log(read, as_json, last)
        return
    read = guarded(lambda: jobs.queries(logs=True).job_log(job_id, attempt=attempt))
    if as_json:
        print_json(read.to_json())
        return
    _print_log(read, False, [None])
    if not read.lines:
        typer.echo(f"no log lines for {job_id} yet" + ("" if read.finished else
                   " (it has not ended: --follow waits for them)"), err=True)


def waiting_cell(w: dict[str, object], wide: bool) -> str:
    """A row's WAITING: the reason and, for a wait with an end (scheduled, a backoff), when it
    ends (``MM-DD HH:MM`` UTC at 80 columns); --wide: all that ``jobs show`` says."""
    if wide:
        return waiting_text(w)
    until = f" {when(str(w['until']))[5:16]}" if w.get("until") else ""
    return f"{w['reason']}{until}"


def list_or_iter(it: Iterator[JobLog]) -> Iterator[JobLog]:
    """The follow generator, its errors raised where `guarded` sees them (the first read)."""
    first = next(it, None)
    return iter(()) if first is None else itertools.chain([first], it)


def _print_log(read: JobLog, as_json: bool, last: list[str | None]) -> None:
    for run, line in read.lines:
        if as_json:
            typer.echo(json.dumps(line.to_json()))
            continue
        if line.task_arn != last[0]:
            last[0] = line.task_arn
            typer.echo(f"── attempt {line.attempt or run.attempt or '?'} on task "
                       f"{task_id(line.task_arn or run.task_arn)} ──")
        typer.echo(render_line(line))


def render_line(line: LogLine) -> str:
    """``HH:MM:SS.mmm LEVEL logger: message``, then the exception's text, if any."""
    at = line.to_json()["at"][11:23]
    text = f"{at} {line.level:<7} {line.logger}: {line.message}"
    return text + ("\n" + line.exception.rstrip("\n") if line.exception else "")


@jobs_app.command("cancel")
def jobs_cancel(job_id: Annotated[str | None, typer.Argument(help="The job id.")] = None,
                status: Annotated[str | None, typer.Option(
                    help="Many jobs: those in PENDING, SCHEDULED or RUNNING.")] = None,
                kind: KindOpt = None, since: SinceOpt = None, label: LabelOpt = None,
                tenant: TenantOpt = None, reason: ReasonOpt = None,
                dry_run: DryRunOpt = False, yes: YesOpt = False, bulk_id: BulkIdOpt = None,
                as_json: JsonOpt = False) -> None:
    """Cancel a job: at once if it has not started, else at its task's next heartbeat
    (every LONGJOBS_HEARTBEAT_SECONDS, 30 s unless set). With --status (and --kind, --since,
    --label, --tenant) instead of an id: every job selected, after a count and a confirmation
    (--yes: none)."""
    if job_id is None or status or kind or since or label or tenant or dry_run or bulk_id:
        _one_or_many(job_id)
        bulk("cancel", status=status, kind=kind, since_seconds=_seconds(since), reason=reason,
             dry_run=dry_run, yes=yes, bulk_id=bulk_id, as_json=as_json, label=label,
             tenant=tenant)
        return
    jobs = guarded(client)
    job = guarded(lambda: jobs.cancel(job_id, reason=reason))
    if as_json:
        print_json({"job_id": job.job_id, "state": str(job.state), "reason": job.reason})
    elif job.state == "CANCELLED":
        typer.echo(f"{job.job_id}: CANCELLED")
    else:
        typer.echo(f"{job.job_id}: cancel requested; its task stops it at its next heartbeat, "
                   f"within {jobs.cfg.heartbeat_seconds:g} s (now {job.state}); "
                   f"`longjobs jobs show {job.job_id}` shows when it has stopped")


@jobs_app.command("retry")
def jobs_retry(job_id: Annotated[str | None, typer.Argument(help="The job id.")] = None,
               from_scratch: Annotated[bool, typer.Option(
                   "--from-scratch", help="Drop the job's checkpoint: the rerun starts over "
                   "instead of resuming.")] = False,
               status: Annotated[str | None, typer.Option(
                   help="Many jobs: those in FAILED or CANCELLED.")] = None,
               kind: KindOpt = None, since: SinceOpt = None, label: LabelOpt = None,
               tenant: TenantOpt = None, reason: ReasonOpt = None,
               dry_run: DryRunOpt = False, yes: YesOpt = False, bulk_id: BulkIdOpt = None,
               as_json: JsonOpt = False) -> None:
    """Run a FAILED or CANCELLED job again, with a fresh attempt budget, in a new bundle.
    It resumes from its last checkpoint unless --from-scratch. If a run of it may still be
    alive (a handler that ignored its timeout or cancel), it waits until that task stops.
    With --status (and --kind, --since, --label, --tenant) instead of an id: every job
    selected, after a count and a confirmation (--yes: none); small jobs retried together
    share new bundles, as admitted ones do."""
    if job_id is None or status or kind or since or label or tenant or dry_run or bulk_id:
        _one_or_many(job_id)
        bulk("retry", status=status, kind=kind, since_seconds=_seconds(since), reason=reason,
             dry_run=dry_run, yes=yes, bulk_id=bulk_id, from_scratch=from_scratch,
             as_json=as_json, label=label, tenant=tenant)
        return
    job = guarded(lambda: client().retry(job_id, from_scratch=from_scratch, reason=reason))
    if as_json:
        print_json({"job_id": job.job_id, "state": str(job.state),
                     "bundle_id": job.bundle_id, "checkpoint": job.checkpoint,
                     "waits_for_task": job.live_task})
        return
    resume = " from its checkpoint" if job.checkpoint is not None else ""
    if job.live_task:
        typer.echo(f"{job.job_id}: {job.state} in bundle {job.bundle_id}; it waits until task "
                   f"{job.live_task} is known stopped, where a run of this job may still be "
                   f"alive; it is launched once that task has stopped{resume}")
    else:
        typer.echo(f"{job.job_id}: {job.state} in bundle {job.bundle_id}; the next tick "
                   f"launches it{resume}")


def _seconds(since: str | None) -> float | None:
    return guarded(lambda: parse_duration(since)) if since else None


def _one_or_many(job_id: str | None) -> None:
    if job_id is not None:
        fail("give a job id or a selection (--status, --kind, --since, --label, --tenant; "
             "--dry-run and --bulk-id are for a selection), not both")


# -- stats ----------------------------------------------------------------------------------------
def stats(as_json: JsonOpt = False,
          since: Annotated[str | None, typer.Option(
              help="Finished jobs admitted within (6h, 1d) or since (2026-12-01T00:00, UTC "
                   "unless it says); default 24h. Active jobs are always counted all.")]
          = None,
          by: Annotated[str | None, typer.Option(
              help="Instead: jobs, run hours, vCPU-hours and cost per kind, per tenant, "
                   "per label "
                   "(key=value) or per value of one label (label:customer), of the tasks "
                   "that stopped in the window (--since, from the start of its hour)")]
          = None) -> None:
    """Backlog, jobs by state (the finished ones of a window), running tasks by revision,
    launch failures and reruns (1 h); with --by, what the jobs used and cost per group."""
    at, seconds = guarded(lambda: parse_since(since)) if since else (None, None)
    if by is not None:
        report = guarded(lambda: client().usage(by, since=at, since_seconds=seconds))
        if as_json:
            print_json(report.to_json())
        else:
            render_usage(report, Console())
        return
    result = guarded(lambda: client().stats(since=at, since_seconds=seconds))
    if as_json:
        print_json(result.to_json())
        return
    _render_stats(result, Console())


def _render_stats(s: Stats, console: Console) -> None:
    data = s.to_json()
    b = data["backlog"] or {}
    oldest = b.get("oldest_age_seconds")
    console.print(f"[bold]queue[/bold]  visible {b.get('visible', '-')}  in flight "
                  f"{b.get('in_flight', '-')}  delayed {b.get('delayed', '-')}  oldest "
                  f"{'unknown' if oldest is None else f'{oldest:.0f}s'}  dead letters "
                  f"{'-' if b.get('dead_letters') is None else b['dead_letters']}")
    jobs = Table(*data["jobs"].keys(), title="jobs by state", box=None)
    jobs.add_row(*(str(v) for v in data["jobs"].values()))
    console.print(jobs)
    console.print(Text(f"finished: admitted since {when(data['finished_since'])} UTC "
                       f"({_span(data['finished_window_seconds'])}); active: all"))
    running = Table("REVISION", "LAUNCHING", "LAUNCHED", "RUNNING", title="tasks by revision",
                    box=None)
    for rev, counts in data["running_by_revision"].items():
        running.add_row(rev, *(str(counts.get(k, 0)) for k in
                               ("LAUNCHING", "LAUNCHED", "RUNNING")))
    console.print(running)
    lf, rr = data["launch_failures_last_hour"], data["reruns_last_hour"]
    console.print(Text(f"launch failures (1 h): {lf['bundles']} "
                       + " ".join(f"{k}={v}" for k, v in lf["by_reason"].items())))
    console.print(Text(f"reruns (1 h): {rr['jobs']} "
                       + " ".join(f"{k}={v}" for k, v in rr["by_stop_class"].items())))


def _span(seconds: float) -> str:
    """A window's length as stats prints it: ``24 h``, ``1.5 h``, ``20 min``."""
    return f"{seconds / 3600:.4g} h" if seconds >= 3600 else f"{seconds / 60:.4g} min"
