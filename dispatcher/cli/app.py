"""The ``longjobs`` command line: a thin layer over the Python API; errors are one line.

This module is the root app only: each command group lives in its own module (``produce``,
``dispatch``, ``local``, ``jobs``, ``dlq``, ``deploy``), errors in ``errors``; they never import
this module back. The console script is ``dispatcher.cli.entry:main``, which checks that the
``cli`` extra is installed before importing typer.
"""

from __future__ import annotations

import sys

import typer

from dispatcher.cli import deploy, dispatch, dlq, jobs, local, produce, top

app = typer.Typer(name="longjobs", no_args_is_help=True, add_completion=False,
                  help="Run long batch jobs as standalone ECS tasks.")
app.command()(produce.submit)
app.command()(dispatch.dispatch)
app.command()(produce.schema)
app.command()(local.demo)
app.command()(local.local)
app.add_typer(jobs.jobs_app)
app.add_typer(dlq.dlq_app)
app.command("stats")(jobs.stats)
app.command()(deploy.deploy)
app.command()(top.top)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
