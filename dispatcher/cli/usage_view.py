"""What ``longjobs stats --by`` prints: one row per group, the largest cost first, and the
total."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.ops.usage import UsageReport
from dispatcher.ops.wording import dollars, when


def render_usage(report: UsageReport, console: Console) -> None:
    data = report.to_json()
    table = Table(report.by.upper(), "JOBS", "RUN HOURS", "VCPU-HOURS", "COST",
                  title=f"usage by {report.by}", box=None)
    for row in [*data["groups"], *([data["total"]] if data["total"] else [])]:
        table.add_row(Text(row["group"]), str(row["jobs"]), f"{row['job_hours']:,.3f}",
                      f"{row['vcpu_hours']:,.3f}", dollars(row["dollars"]))
    console.print(table)
    console.print(Text(f"tasks that stopped since {when(data['since'])} UTC; a task's bill is "
                       "shared by its jobs' run time; jobs: those that ended there"
                       + ("; no total: a job counts under each of its labels"
                          if data["total"] is None else "")))
    if not data["groups"]:
        console.print(Text("no task stopped in the window with its bill seen (a stop "
                           "without one, or a stack older than the bills, counts nowhere)"))
