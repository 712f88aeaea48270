"""JobSchedule commands: ``longjobs schedules create|list|show|pause|resume|update|delete|run-now``.

Each fire of a schedule is one job (``schedule/NAME/TIME``), sent by EventBridge Scheduler to
the job queue of its priority with no code of ours in between; local mode fires them itself."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any
from zoneinfo import ZoneInfo

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.cli.common import JsonOpt, WideOpt, client, print_json, wide_console
from dispatcher.cli.error_policy import guarded
from dispatcher.cli.produce_commands import as_flags, payload_object
from dispatcher.domain.errors import InvalidMessage, LongjobsError

if TYPE_CHECKING:
    from dispatcher.domain.schedules import JobSchedule
    from dispatcher.ops.schedule_ops import ScheduleDetail, Schedules, ScheduleView

schedules_app = typer.Typer(
    name="schedules", no_args_is_help=True,
    help="Recurring jobs: cron, rate and one-time schedules (EventBridge Scheduler), each fire "
    "one job with the id schedule/NAME/TIME.")

NameArg = Annotated[str, typer.Argument(help="The schedule's name (1-64 of A-Z a-z 0-9 - _ .).")]
CronOpt = Annotated[str | None, typer.Option(
    "--cron", help="Six fields, as EventBridge Scheduler takes them: minutes hours "
    "day-of-month month day-of-week year, one of the two days '?', e.g. \"0 2 * * ? *\" "
    "(02:00 every day) or \"0 9 ? * MON-FRI *\".")]
RateOpt = Annotated[str | None, typer.Option(
    "--rate", help="Every N minutes, hours or days, e.g. \"15 minutes\", \"1 hour\" (counted "
    "from its creation or resume); local mode also takes seconds.")]
AtOpt = Annotated[str | None, typer.Option(
    "--at", help="Once, at this wall time in --timezone: YYYY-MM-DDThh:mm:ss.")]
ZoneOpt = Annotated[str | None, typer.Option(
    "--timezone", help="IANA time zone the cron or at time is read in (default UTC), e.g. "
    "Europe/Berlin; across daylight-saving changes a cron follows the zone's wall clock.")]
OverlapOpt = Annotated[str | None, typer.Option(
    "--overlap", help="allow (default): a fire runs beside the last one's job; skip: a fire "
    "while the last fire's job is pending or running runs nothing and is recorded as "
    "skipped (CANCELLED, with the reason).")]
PayloadOpt = Annotated[str | None, typer.Option(
    help="Each fire's payload, a JSON object; @FILE reads it from FILE, - from stdin.")]
PriorityOpt = Annotated[str | None, typer.Option(help="high, normal (default) or low.")]


def _expression(cron: str | None, rate: str | None, at: str | None) -> str | None:
    given = [(flag, v) for flag, v in (("cron", cron), ("rate", rate), ("at", at)) if v]
    if len(given) > 1:
        raise LongjobsError("give one of --cron, --rate and --at, not "
                            + " and ".join(f"--{f}" for f, _ in given))
    if not given:
        return None
    flag, value = given[0]
    value = value.strip()
    return value if value.startswith(f"{flag}(") else f"{flag}({value})"


def _job_fields(kind: str | None, payload: str | None, priority: str | None,
                options: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {k: v for k, v in options.items() if v is not None}
    if kind is not None:
        fields["kind"] = kind
    if payload is not None:
        fields["payload"] = payload_object(payload)
    if priority is not None:
        fields["priority"] = priority
    return fields


def _checked(run: Any) -> Any:
    """``run()``, a schema violation in the words of the command line."""
    try:
        return run()
    except InvalidMessage as exc:
        raise InvalidMessage(as_flags(exc.reason)) from None


def _book() -> Schedules:
    return client().schedules()


@schedules_app.command("create")
def create(
    name: NameArg,
    kind: Annotated[str, typer.Argument(help="Job kind each fire runs.")],
    cron: CronOpt = None, rate: RateOpt = None, at: AtOpt = None, timezone: ZoneOpt = None,
    payload: PayloadOpt = None, priority: PriorityOpt = None, overlap: OverlapOpt = None,
    estimated_seconds: Annotated[float | None, typer.Option(
        help="Each job's expected run time (small jobs share a task).")] = None,
    max_attempts: Annotated[int | None, typer.Option(
        help="Runs its handler may fail before the job FAILS (default 3).")] = None,
    timeout_seconds: Annotated[float | None, typer.Option(
        help="One attempt's time limit (default: none).")] = None,
    cpu: Annotated[int | None, typer.Option(help="Task CPU units, with --memory.")] = None,
    memory: Annotated[int | None, typer.Option(help="Task memory in MiB, with --cpu.")] = None,
    ephemeral_storage: Annotated[int | None, typer.Option(
        help="Task ephemeral storage in GiB (21-200).")] = None,
    array: Annotated[int | None, typer.Option(
        "--array", help="Each fire is an array job of N children.")] = None,
    tolerated_failures: Annotated[str | None, typer.Option(
        help="With --array: children that may fail, a count or a percentage.")] = None,
    description: Annotated[str, typer.Option(help="A note kept with it.")] = "",
    paused: Annotated[bool, typer.Option(
        "--paused", help="Create it paused (`schedules resume` starts it).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Create a schedule: one of --cron, --rate or --at; every fire makes one job of KIND.
    Everything is checked before it is created (the expression, the time zone and the job)."""
    def run() -> JobSchedule:
        expression = _expression(cron, rate, at)
        if expression is None:
            raise LongjobsError("say when it fires: --cron \"0 2 * * ? *\", --rate "
                                "\"15 minutes\" or --at 2026-12-24T18:00:00")
        count = (int(tolerated_failures) if tolerated_failures and
                 tolerated_failures.isdigit() else tolerated_failures)
        job = _job_fields(kind, payload if payload is not None else "{}", priority, {
            "estimated_seconds": estimated_seconds, "max_attempts": max_attempts,
            "timeout_seconds": timeout_seconds, "cpu": cpu, "memory": memory,
            "ephemeral_storage": ephemeral_storage, "array_size": array,
            "tolerated_failures": count})
        return _checked(lambda: _book().create(name, expression, job,  # type: ignore[no-any-return]
                                               timezone=timezone or "UTC",
                                               overlap=overlap or "allow",
                                               description=description, paused=paused))

    made = guarded(run)
    _print_changed("created", made, as_json)


@schedules_app.command("update")
def update(
    name: NameArg,
    cron: CronOpt = None, rate: RateOpt = None, at: AtOpt = None, timezone: ZoneOpt = None,
    kind: Annotated[str | None, typer.Option(help="Another job kind.")] = None,
    payload: PayloadOpt = None, priority: PriorityOpt = None, overlap: OverlapOpt = None,
    estimated_seconds: Annotated[float | None, typer.Option(
        help="Each job's expected run time.")] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Runs that may fail.")] = None,
    timeout_seconds: Annotated[float | None, typer.Option(help="Time limit.")] = None,
    cpu: Annotated[int | None, typer.Option(help="Task CPU units, with --memory.")] = None,
    memory: Annotated[int | None, typer.Option(help="Task memory in MiB, with --cpu.")] = None,
    ephemeral_storage: Annotated[int | None, typer.Option(
        help="Task ephemeral storage in GiB (21-200).")] = None,
    description: Annotated[str | None, typer.Option(help="A note kept with it.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Change what is given, keep the rest (a new --cron/--rate/--at counts from now)."""
    def run() -> JobSchedule:
        job = _job_fields(kind, payload, priority, {
            "estimated_seconds": estimated_seconds, "max_attempts": max_attempts,
            "timeout_seconds": timeout_seconds, "cpu": cpu, "memory": memory,
            "ephemeral_storage": ephemeral_storage})
        return _checked(lambda: _book().update(  # type: ignore[no-any-return]
            name, expression=_expression(cron, rate, at), timezone=timezone,
            overlap=overlap, job=job, description=description))

    _print_changed("updated", guarded(run), as_json)


@schedules_app.command("pause")
def pause(name: NameArg, as_json: JsonOpt = False) -> None:
    """Stop its fires until `schedules resume`."""
    _print_changed("paused", guarded(lambda: _book().pause(name)), as_json)


@schedules_app.command("resume")
def resume(name: NameArg, as_json: JsonOpt = False) -> None:
    """Fire again from now; the fires missed while paused are not made up."""
    _print_changed("resumed", guarded(lambda: _book().resume(name)), as_json)


@schedules_app.command("delete")
def delete(name: NameArg, as_json: JsonOpt = False) -> None:
    """Delete it; the jobs its fires made stay."""
    guarded(lambda: _book().delete(name))
    if as_json:
        print_json({"name": name, "deleted": True})
    else:
        typer.echo(f"deleted schedule {name}")


@schedules_app.command("run-now")
def run_now(name: NameArg, as_json: JsonOpt = False) -> None:
    """Fire it once now (its overlap rule applies); prints the job's id."""
    job_id = guarded(lambda: _book().run_now(name))
    if as_json:
        print_json({"name": name, "job_id": job_id})
    else:
        typer.echo(job_id)


@schedules_app.command("list")
def list_(wide: WideOpt = False, as_json: JsonOpt = False) -> None:
    """Every schedule: when it fires next (three times, in its time zone), its last fire,
    that fire's job and its state."""
    views = guarded(lambda: _book().list())
    if as_json:
        print_json({"schedules": [_view_json(v) for v in views], "count": len(views)})
        return
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
    for column in ("NAME", "WHEN", "ZONE", "STATE", "OVERLAP", "KIND", "NEXT FIRES",
                   "LAST FIRE", "ITS JOB", "JOB STATE"):
        table.add_column(column, overflow="fold")
    for v in views:
        s, last = v.schedule, v.last_fire
        table.add_row(*map(Text, (
            s.name, s.expression, s.timezone, "ENABLED" if s.enabled else "PAUSED",
            str(s.overlap), s.kind, ", ".join(_local(t, s.timezone) for t in v.next_fires)
            or "-", f"{last.at} {last.outcome}" if last else "-",
            last.job_id if last else "-", v.last_state or "-")))
    console = wide_console() if wide else Console()
    console.print(table)
    console.print(f"{len(views)} schedule(s)")


@schedules_app.command("show")
def show(name: NameArg, as_json: JsonOpt = False) -> None:
    """One schedule: what it fires, when next, and its latest fires (skipped ones with the
    reason), each with its job's state."""
    detail: ScheduleDetail = guarded(lambda: _book().show(name))
    if as_json:
        print_json({**_view_json(detail.view), "last_run": detail.last_run,
                    "fires": [{**f.as_json(), "job_state": state}
                              for f, state in detail.fires]})
        return
    s = detail.view.schedule
    lines = [f"schedule   {s.name}" + (f"  ({s.description})" if s.description else ""),
             f"fires      {s.expression} in {s.timezone}, "
             f"{'ENABLED' if s.enabled else 'PAUSED'}, overlap {s.overlap}",
             f"job        {s.kind} (priority {s.priority}) id schedule/{s.name}/TIME",
             "next       " + (", ".join(_local(t, s.timezone) for t in detail.view.next_fires)
                             or "-"),
             f"last run   {detail.last_run or '-'}"]
    for line in lines:
        typer.echo(line)
    typer.echo(f"fires      {len(detail.fires)} kept, newest first:" if detail.fires
               else "fires      none yet")
    for fire, state in detail.fires:
        typer.echo(f"  {fire.at}  {fire.outcome:<8} {fire.job_id}  {state or '-'}"
                   + (f"  {fire.reason}" if fire.reason else ""))


def _local(epoch: float, zone: str) -> str:
    try:
        tz: Any = ZoneInfo(zone)
    except (KeyError, ValueError):
        tz = UTC
    return datetime.fromtimestamp(epoch, tz).strftime("%Y-%m-%d %H:%M:%S %Z")


def _schedule_json(s: JobSchedule) -> dict[str, Any]:
    return {"name": s.name, "expression": s.expression, "timezone": s.timezone,
            "state": "ENABLED" if s.enabled else "PAUSED", "overlap": str(s.overlap),
            "job": s.job, "description": s.description,
            "start": datetime.fromtimestamp(s.start, UTC).isoformat() if s.start else None}


def _view_json(v: ScheduleView) -> dict[str, Any]:
    return {**_schedule_json(v.schedule),
            "next_fires": [datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                           for t in v.next_fires],
            "next_fires_local": [_local(t, v.schedule.timezone) for t in v.next_fires],
            "last_fire": v.last_fire.as_json() if v.last_fire else None,
            "last_job_state": v.last_state}


def _print_changed(what: str, s: JobSchedule, as_json: bool) -> None:
    if as_json:
        print_json({**_schedule_json(s), "changed": what})
    else:
        typer.echo(f"{what} schedule {s.name}: {s.expression} in {s.timezone}, "
                   f"{'ENABLED' if s.enabled else 'PAUSED'}; each fire runs {s.kind} as "
                   f"schedule/{s.name}/TIME (`longjobs schedules show {s.name}`)")
