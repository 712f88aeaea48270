"""``longjobs dispatch --once``: run one dispatcher tick here (what the scheduled Lambda does)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from dispatcher import settings
from dispatcher.cli.error_policy import fail, guarded

# A dry run starts no task, so it needs no subnets; in local mode (LONGJOBS_LAUNCHER=local)
# it describes the tasks through the endpoint's ECS, where local mode registers them.
DRY_RUN_SUBNET = "subnet-dry-run"


def dry_run_env(environ: dict[str, str]) -> dict[str, str]:
    """The settings a dry tick reads: the launcher as ECS and a placeholder subnet if none is
    set, since nothing is launched; everything else as the environment says."""
    env = dict(environ)
    if env.get("LONGJOBS_LAUNCHER", "").strip().lower() == "local":
        env["LONGJOBS_LAUNCHER"] = "ecs"
    if not env.get("LONGJOBS_SUBNETS", "").strip():
        env["LONGJOBS_SUBNETS"] = DRY_RUN_SUBNET
    return env


@contextlib.contextmanager
def _quiet_tick_log() -> Iterator[None]:
    """The tick logs its decision record at INFO; this command prints that record on stdout,
    so the log line would say it twice. Warnings still show; DEBUG (POWERTOOLS_LOG_LEVEL) is
    left alone."""
    tree = logging.getLogger("dispatcher")
    level = tree.level
    if level in (logging.NOTSET, logging.INFO):
        tree.setLevel(logging.WARNING)
    try:
        yield
    finally:
        tree.setLevel(level)


def dispatch(
    once: Annotated[bool, typer.Option("--once", help="Run exactly one tick.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide everything, write "
                                          "nothing; print what it would do. Works against "
                                          "local mode too.")] = False,
) -> None:
    """Run the dispatcher tick (what the scheduled Lambda does); prints the decision record
    as JSON on stdout (the tick's own log line is left out: it says the same)."""
    from dispatcher.wiring import pipeline

    if not once:
        fail("only --once is supported here: run `longjobs dispatch --once [--dry-run]`; the "
             "schedule runs ticks in AWS, `longjobs local` runs them locally")

    def run() -> dict[str, Any]:
        if dry_run:
            from dispatcher.ops.dryrun import dry_run as plan_dry_run

            dispatcher, plan = plan_dry_run(settings.load("dispatcher",
                                                          dry_run_env(dict(os.environ))))
            try:
                with _quiet_tick_log():
                    decision = dispatcher.tick().as_dict()
            finally:
                plan.finish()
            return {"dry_run": True, "decision": decision, "plan": plan.actions}
        tick = pipeline.aws_tick(settings.load("dispatcher"))
        with _quiet_tick_log():
            return tick.tick().as_dict()

    typer.echo(json.dumps(guarded(run), indent=2, default=str))
