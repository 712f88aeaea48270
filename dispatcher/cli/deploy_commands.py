"""``longjobs deploy``: register a new task-definition revision. That is all a deploy does;
running tasks keep the revision they started with, new bundles pin the new one."""

from __future__ import annotations

from typing import Annotated

import typer

from dispatcher import settings
from dispatcher.cli.common import JsonOpt, print_json
from dispatcher.cli.error_policy import guarded
from dispatcher.domain.errors import ConfigError


def deploy(
    image: Annotated[str, typer.Option(help="Worker image of the new revision.")],
    family: Annotated[str | None, typer.Option(help="Task family (default: "
                                               "LONGJOBS_TASK_FAMILY).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE to set in the "
                                                  "container environment; repeatable.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register a revision that differs from the current ACTIVE one only in image and env."""
    from dispatcher.ops.deploy import register_revision
    from dispatcher.wiring import adapters

    def run() -> str:
        pairs: dict[str, str] = {}
        for item in env or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise ConfigError(f"--env {item!r} is not KEY=VALUE")
            pairs[key] = value
        cfg = settings.load("deploy")
        name = family or cfg.task_family
        if not name:
            raise ConfigError("no task family: pass --family or set LONGJOBS_TASK_FAMILY")
        return register_revision(adapters.client("ecs", cfg), name, image, pairs or None,
                                 container=cfg.container)

    arn = guarded(run)
    if as_json:
        print_json({"task_definition_arn": arn, "revision": arn.rsplit("/", 1)[-1]})
    else:
        typer.echo(arn.rsplit("/", 1)[-1])
