"""What the command modules share: the client they drive and the renderers of common values."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from dispatcher.ops.client import JobClient

JsonOpt = Annotated[bool, typer.Option("--json", help="Print a stable JSON shape.")]


def client() -> JobClient:
    from dispatcher.ops.client import JobClient

    return JobClient()


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def when(iso_text: str | None) -> str:
    """``2026-11-30 05:49:56`` (UTC; --json keeps the microseconds)."""
    return iso_text[:19].replace("T", " ") if iso_text else "-"


def short(text: Any, n: int = 60) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= n else s[:n - 1] + "…"


def task_id(arn: str | None) -> str:
    return arn.rsplit("/", 1)[-1] if arn else "-"
