"""``longjobs tenants``: whom the stack's work is for, with their tasks running now and what
their jobs used (:func:`dispatcher.ops.usage.tenants_report`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.cli.common import JsonOpt, client, print_json
from dispatcher.cli.error_policy import guarded
from dispatcher.ops.wording import dollars, parse_since, when


def tenants(
    since: Annotated[str | None, typer.Option(
        help="Usage of the tasks that stopped within (6h, 1d) or since (2026-12-01T00:00, "
             "UTC), from the start of its hour; default: the last 24 h.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Each tenant (a job's `tenant`; `(none)`: jobs of none) with its tasks running now and
    its jobs, run hours, vCPU-hours and cost in the window. Reads the running bundles and the
    usage counters, never the jobs."""
    at, seconds = guarded(lambda: parse_since(since)) if since else (None, None)
    report = guarded(lambda: client().tenants(since=at, since_seconds=seconds))
    if as_json:
        print_json(report.to_json())
        return
    console = Console()
    table = Table("TENANT", "RUNNING TASKS", "JOBS", "RUN HOURS", "VCPU-HOURS", "COST",
                  box=None)
    for row in report.to_json()["tenants"]:
        table.add_row(Text(row["tenant"]), str(row["running_tasks"]), str(row["jobs"]),
                      f"{row['job_hours']:,.3f}", f"{row['vcpu_hours']:,.3f}",
                      dollars(row["dollars"]))
    console.print(table)
    data = report.to_json()
    console.print(Text(f"tasks running now; usage of the tasks that stopped since "
                       f"{when(data['since'])} UTC"
                       + ("" if report.rows else "; no tenant has a task running or "
                          "stopped in the window")))
