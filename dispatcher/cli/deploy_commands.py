"""``longjobs deploy``: register a copy of the stack's revision with the new image, and record it
as the deployment (:mod:`dispatcher.ops.deploy`); running tasks keep the revision they started
with, new bundles launch the recorded one."""

from __future__ import annotations

from typing import Annotated

import typer

from dispatcher import settings
from dispatcher.cli.common import JsonOpt, print_json
from dispatcher.cli.error_policy import guarded
from dispatcher.domain.errors import ConfigError


def deploy(
    image: Annotated[str | None, typer.Option(help="Worker image to deploy.")] = None,
    revision: Annotated[int | None, typer.Option(
        help="Deploy again the worker image of this revision of the family (a rollback).")
    ] = None,
    family: Annotated[str | None, typer.Option(help="Task family (default: "
                                               "LONGJOBS_TASK_FAMILY).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE to set in the "
                                                  "container environment (kept by later "
                                                  "deploys); repeatable.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Deploy job code: a copy of the stack's revision (LONGJOBS_STACK_TASK_DEFINITION) that
    differs only in image and env, recorded as what the dispatcher launches; prints it."""
    from dispatcher.ops.deploy import Deployed
    from dispatcher.ops.deploy import deploy as deploy_code
    from dispatcher.wiring import adapters

    def run() -> Deployed:
        pairs: dict[str, str] = {}
        for item in env or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigError(f"--env {item!r} is not KEY=VALUE")
            pairs[key] = value
        cfg = settings.load("deploy")
        if family:
            cfg = cfg.model_copy(update={"task_family": family})
        if not cfg.task_family:
            raise ConfigError("no task family: pass --family or set LONGJOBS_TASK_FAMILY")
        if not cfg.table:
            raise ConfigError("no job table: set LONGJOBS_TABLE (the deployment is recorded "
                              "there)")
        return deploy_code(adapters.store(cfg), adapters.task_definitions(cfg),
                           family=cfg.task_family, stack=cfg.stack_task_definition or None,
                           latest=adapters.launcher(cfg).resolve_task_definition, image=image,
                           revision=revision, env=pairs)

    done = guarded(run)
    if as_json:
        print_json(done.as_dict())
    else:
        typer.echo(done.deployment.task_definition)

