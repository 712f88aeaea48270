"""The ``longjobs`` command line: a thin layer over the Python API; errors are one line.

This module is the root app only: each command group lives in a ``*_commands`` module of its own
(``produce``, ``dispatch``, ``local``, ``jobs``, ``dlq``, ``schedule``, ``deploy``,
``top``), the error policy in
``error_policy``; they never import this module back. The console script is
``dispatcher.cli.entry:main``, which checks that the ``cli`` extra is installed before importing
typer.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperArgument

from dispatcher import versions
from dispatcher.cli import (
    console_commands,
    deploy_commands,
    dispatch_commands,
    dlq_commands,
    jobs_commands,
    limit_commands,
    local_commands,
    produce_commands,
    schedule_commands,
    tenant_commands,
    top_commands,
)

app = typer.Typer(name="longjobs", no_args_is_help=True, add_completion=False,
                  help="Run long batch jobs as standalone ECS tasks.")
app.command()(produce_commands.submit)
app.command()(dispatch_commands.dispatch)
app.command()(produce_commands.schema)
app.command()(local_commands.demo)
app.command()(local_commands.local)
app.add_typer(jobs_commands.jobs_app)
app.add_typer(dlq_commands.dlq_app)
app.add_typer(schedule_commands.schedules_app)
app.command("stats")(jobs_commands.stats)
app.command()(deploy_commands.deploy)
app.command()(top_commands.top)
app.command()(console_commands.console)
app.add_typer(tenant_commands.tenants_app)
app.add_typer(limit_commands.limits_app)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(versions.line())
        raise typer.Exit


@app.callback()
def root(
    _version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the versions of longjobs, boto3, botocore and pynamodb, and exit.")] = False,
) -> None:
    """Run long batch jobs as standalone ECS tasks."""


def _tidy_param(param: Any) -> None:
    if getattr(param, "is_flag", False):
        param.metavar = ""  # a flag takes no value: no ``<bool>`` beside it
    elif isinstance(param, TyperArgument):
        name = param.metavar or (param.name or "").upper()
        param.metavar = name
        # typer's usage line writes ``{kind}``, which reads like a template placeholder.
        setattr(param, "get_usage_pieces", lambda ctx: [name])  # noqa: B010


def _tidy(command: Any) -> None:
    """Help a person reads: a flag shows no ``<bool>``, an argument is ``KIND`` in the usage
    line and the table alike. Duck-typed: typer vendors click in some versions, not in others.
    ``get_params`` is wrapped too because click builds the ``--help`` option lazily."""
    original = command.get_params

    def get_params(ctx: Any) -> list[Any]:
        params = original(ctx)
        for param in params:
            _tidy_param(param)
        return list(params)

    setattr(command, "get_params", get_params)  # noqa: B010
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)


def command() -> Any:
    """The click command behind ``app``, its help tidied (``longjobs`` runs this)."""
    cmd = typer.main.get_command(app)
    _tidy(cmd)
    return cmd


def main() -> None:
    try:
        command()(prog_name="longjobs")
    except KeyboardInterrupt:
        sys.exit(130)
