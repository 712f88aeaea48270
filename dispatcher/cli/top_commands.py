"""``longjobs top``: a live terminal view of the queues and the job table.

The figures are gathered by :mod:`dispatcher.ops.top` (one :class:`~dispatcher.ops.top.Snapshot`
per refresh); this module renders them with rich, in place every ``--interval`` seconds, or once
(``--once``, for scripts and tests; ``--json`` prints the snapshot's stable shape). It reads the
endpoint and resources the environment names, as every command does (AWS, or a local endpoint
via ``AWS_ENDPOINT_URL``), and a missing setting or resource is one ``error: ...`` line.
"""

from __future__ import annotations

from datetime import UTC, datetime
from time import sleep
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from dispatcher.cli.common import print_json
from dispatcher.cli.error_policy import fail, guarded
from dispatcher.domain.errors import LongjobsError

if TYPE_CHECKING:
    from dispatcher.ops.top import Snapshot, Top


def source(window_seconds: float) -> Top:
    """What ``top`` reads: the endpoint and resources the settings name (tests replace it)."""
    from dispatcher import settings
    from dispatcher.ops.top import from_config

    return from_config(settings.load("client"), window_seconds=window_seconds)


def top(
    interval: Annotated[float, typer.Option("--interval", "-n", min=0.5,
                                            help="Seconds between refreshes, on a terminal "
                                            "(not a count of frames: elsewhere, top prints "
                                            "one frame and exits).")] = 2.0,
    window: Annotated[str, typer.Option(help="Recent activity shown: jobs admitted and launch "
                                        "failures within, e.g. 1m, 5m, 1h.")] = "5m",
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one snapshot as JSON and "
                                          "exit.")] = False,
) -> None:
    """Live view: backlog per priority, tasks by revision, bundles by state, recent jobs,
    launch failures, per-kind limits and dispatch lag (Ctrl-C to quit)."""
    from dispatcher.ops.wording import parse_duration

    try:
        window_seconds = parse_duration(window)
    except LongjobsError:
        fail(f"--window {window!r} is not a duration like 1m, 5m or 1h (at most 100 years)")
    if window_seconds <= 0:
        fail("--window must be longer than 0 seconds")
    view = guarded(lambda: source(window_seconds))
    snapshot = guarded(view.snapshot)
    if as_json:
        print_json(snapshot.to_json())
        return
    console = Console()
    if once or not console.is_terminal:
        # Refreshing in place needs a terminal; elsewhere (a file, a pipe) one frame, at once.
        console.print(render(snapshot))
        if not once:
            typer.echo("longjobs top: stdout is not a terminal, so one frame was printed (as "
                       "--once); it refreshes every --interval seconds only on a terminal",
                       err=True)
        return
    with Live(render(snapshot, interval), console=console, auto_refresh=False) as live:
        try:
            while True:
                sleep(interval)
                live.update(render(guarded(view.snapshot), interval), refresh=True)
        except KeyboardInterrupt:
            pass


# -- rendering ------------------------------------------------------------------------------------
def _duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h05m``."""
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s % 60 else f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _pairs(counts: dict[str, int]) -> str:
    return "  ".join(f"{k} {v}" for k, v in counts.items()) or "none"


def render(s: Snapshot, interval: float | None = None) -> RenderableType:
    """One frame: a renderable of the snapshot (no terminal needed to build it)."""
    window = _duration(s.window_seconds)
    stamp = datetime.fromtimestamp(s.at, UTC).strftime("%Y-%m-%d %H:%M:%S")
    head = Text(f"longjobs top  {stamp} UTC", style="bold")
    if interval is not None:
        head.append(f"  every {interval:g}s, Ctrl-C quits", style="dim")
    parts: list[RenderableType] = [head]

    dead = "-" if s.dead_letters is None else str(s.dead_letters)
    parts.append(Text.assemble(("queues", "bold"), "  dead letters ",
                               (dead, "bold red" if s.dead_letters else "")))
    queues = Table("PRIORITY", "VISIBLE", "IN FLIGHT", "DELAYED", box=None)
    for q in s.queues:
        if q.backlog is None:
            queues.add_row(q.priority, Text("in normal's queue", style="dim"), "", "")
        else:
            b = q.backlog
            queues.add_row(q.priority, str(b.visible), str(b.in_flight), str(b.delayed))
    parts.append(queues)

    parts.append(Text.assemble((f"tasks: {s.running_tasks} running", "bold"),
                               ", by revision"))
    if s.tasks_by_revision:
        tasks = Table("REVISION", "LAUNCHING", "LAUNCHED", "RUNNING", box=None)
        for rev, counts in s.tasks_by_revision.items():
            tasks.add_row(rev, *(str(counts.get(k, 0)) for k in ("LAUNCHING", "LAUNCHED",
                                                                 "RUNNING")))
        parts.append(tasks)
    if s.tasks_by_tenant:
        parts.append(Text(f"tasks by tenant  {_pairs(s.tasks_by_tenant)}"))
    parts.append(Text(f"bundles  {_pairs(s.bundles)}"))

    parts.append(Text.assemble((f"jobs admitted in the last {window}: {s.admitted_total}",
                                "bold"), f", by state now; {s.rejected} rejected"))
    jobs = Table(*s.admitted, box=None)
    jobs.add_row(*(str(v) for v in s.admitted.values()))
    parts.append(jobs)

    failures = sum(s.launch_failures.values())
    parts.append(Text(f"launch failures ({window}): {failures}"
                      + ("  " + "  ".join(f"{k}={v}" for k, v in s.launch_failures.items())
                         if failures else ""), style="yellow" if failures else ""))
    if s.kinds:
        parts.append(Text.assemble(("kinds", "bold"), ": running against LONGJOBS_KIND_LIMITS"))
        kinds = Table("KIND", "RUNNING", "LIMIT", box=None)
        for k in s.kinds:
            kinds.add_row(k.kind, str(k.running), "-" if k.limit is None else str(k.limit),
                          style="yellow" if k.at_limit else None)
        parts.append(kinds)
    if s.dispatch_lag_seconds is None:
        parts.append(Text("dispatch lag: no bundle waiting for a launch"))
    else:
        parts.append(Text(f"dispatch lag: {s.waiting_bundles} bundle(s) waiting for a launch, "
                          f"the longest for {_duration(s.dispatch_lag_seconds)}"))
    if s.waiting_for:
        parts.append(Text(f"waiting for  {_pairs(s.waiting_for)}"))
    if s.progress:
        parts.append(Text.assemble(("progress", "bold"), ": the running jobs' latest reports"))
        rows = Table("JOB ID", "PROGRESS", box=None)
        for job_id, p in s.progress:
            rows.add_row(Text(job_id), Text(p.words(s.at)))
        parts.append(rows)
    return Group(*parts)
