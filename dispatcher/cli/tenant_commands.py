"""``longjobs tenants``: whom the stack's work is for, with their tasks running now against
their shares and what their jobs used (:func:`dispatcher.ops.usage.tenants_report`);
``longjobs tenants set``: a tenant's weight, cap and reserve
(:mod:`dispatcher.domain.tenant_shares`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.cli.common import JsonOpt, client, print_json
from dispatcher.cli.error_policy import fail, guarded
from dispatcher.domain import tenants as tenant_names
from dispatcher.ops.wording import dollars, parse_since, when

tenants_app = typer.Typer(
    name="tenants", invoke_without_command=True, no_args_is_help=False,
    help="Each tenant's tasks against its share, and what its jobs used; `tenants set` "
         "changes a tenant's weight, cap or reserve.")


@tenants_app.callback()
def tenants(
    ctx: typer.Context,
    since: Annotated[str | None, typer.Option(
        help="Usage of the tasks that stopped within (6h, 1d) or since (2026-12-01T00:00, "
             "UTC), from the start of its hour; default: the last 24 h.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Each tenant (a job's `tenant`; `(none)`: jobs of none) with its tasks running now,
    its target as the last tick set it (`-`: not in that tick's view), its weight, cap
    and reserve, and its jobs, run hours, vCPU-hours and cost in the window. Reads the running
    bundles, the policies and the usage counters, never the jobs."""
    if ctx.invoked_subcommand is not None:
        return
    at, seconds = guarded(lambda: parse_since(since)) if since else (None, None)
    report = guarded(lambda: client().tenants(since=at, since_seconds=seconds))
    if as_json:
        print_json(report.to_json())
        return
    console = Console()
    table = Table("TENANT", "RUNNING TASKS", "TARGET", "WEIGHT", "CAP", "RESERVE", "JOBS",
                  "RUN HOURS", "VCPU-HOURS", "COST", box=None)
    for row in report.to_json()["tenants"]:
        table.add_row(Text(row["tenant"]), str(row["running_tasks"]),
                      "-" if row["target"] is None else str(row["target"]),
                      f"{row['weight']:g}",
                      "-" if row["max_running"] is None else str(row["max_running"]),
                      str(row["reserve"]), str(row["jobs"]),
                      f"{row['job_hours']:,.3f}", f"{row['vcpu_hours']:,.3f}",
                      dollars(row["dollars"]))
    console.print(table)
    data = report.to_json()
    console.print(Text(f"tasks running now; usage of the tasks that stopped since "
                       f"{when(data['since'])} UTC"
                       + ("" if report.rows else "; no tenant has a task running or "
                          "stopped in the window")))


@tenants_app.command("set")
def set_policy(
    tenant: Annotated[str, typer.Argument(help="The tenant (as jobs name it).")],
    weight: Annotated[float | None, typer.Option(
        help="Its weight in sharing the task slots: a higher number gets more; 0 runs only "
             "on slots no one else wants. Default 1.")] = None,
    max_running: Annotated[int | None, typer.Option(
        help="Most tasks it runs at once (its cap).")] = None,
    no_cap: Annotated[bool, typer.Option("--no-cap", help="Lift its cap.")] = False,
    reserve: Annotated[int | None, typer.Option(
        help="Task slots it gets first whenever it has the work for them.")] = None,
    reset: Annotated[bool, typer.Option(
        "--reset", help="Back to the default: weight 1, no cap, no reserve.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Change a tenant's share of the task slots; the settings not given stay as they were.
    The next tick applies it to the work already waiting, and to the tasks running: a tenant
    past its new cap or share gives up slots as its tasks end their bundles."""
    if (why := tenant_names.problem(tenant)) is not None:
        fail(f"{why}: name the tenant as its jobs do")
    if not (weight is not None or max_running is not None or no_cap or reserve is not None
            or reset):
        fail("nothing to change: give --weight, --max-running, --no-cap, --reserve or --reset "
             "(longjobs tenants set --help)")
    if no_cap and max_running is not None:
        fail("give --max-running or --no-cap, not both")
    name = tenant
    policy = guarded(lambda: client().set_tenant(name, weight=weight, max_running=max_running,
                                                 reserve=reserve, no_cap=no_cap, reset=reset))
    if as_json:
        print_json({"tenant": name, **policy.to_json()})
        return
    cap = "no cap" if policy.max_running is None else f"at most {policy.max_running} tasks"
    Console().print(Text(f"tenant {name}: weight {policy.weight:g}, {cap}, reserve "
                         f"{policy.reserve}; the next tick applies it"))
