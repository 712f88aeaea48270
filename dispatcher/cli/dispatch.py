"""``longjobs dispatch --once``: run one dispatcher tick here (what the scheduled Lambda does)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from dispatcher import settings
from dispatcher.cli.errors import fail, guarded


def dispatch(
    once: Annotated[bool, typer.Option("--once", help="Run exactly one tick.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide everything, write "
                                          "nothing; print what it would do.")] = False,
) -> None:
    """Run the dispatcher tick (what the scheduled Lambda does); prints the decision record."""
    from dispatcher.wiring import pipeline

    if not once:
        fail("only --once is supported here; the schedule runs ticks in AWS, "
             "`longjobs local` runs them locally")

    def run() -> dict[str, Any]:
        cfg = settings.load("dispatcher")
        if dry_run:
            from dispatcher.ops.dryrun import dry_run as plan_dry_run

            dispatcher, plan = plan_dry_run(cfg)
            try:
                decision = dispatcher.tick().as_dict()
            finally:
                plan.finish()
            return {"dry_run": True, "decision": decision, "plan": plan.actions}
        return pipeline.aws_tick(cfg).tick().as_dict()

    typer.echo(json.dumps(guarded(run), indent=2, default=str))
