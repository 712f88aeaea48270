"""What the command modules share: the client they drive and the renderers of common values."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from dispatcher.ops.client import JobClient

JsonOpt = Annotated[bool, typer.Option("--json", help="Print a stable JSON shape.")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Full ids and reasons, however wide.")]
# The shortest id prefix a table shows: 8 hex digits name one of 4 billion. Ids up to
# KEEP_ID characters (names a person chose, like report-2026-11-30) are never cut.
SHORT_ID = 8
KEEP_ID = 20


def client() -> JobClient:
    from dispatcher.ops.client import JobClient

    return JobClient()


def wide_console() -> Console:
    """For ``--wide``: rows as long as their content, never cut to the terminal's width."""
    return Console(width=100_000)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def short(text: Any, n: int = 60) -> str:
    """``text`` within ``n`` characters, cut at a word boundary when there is one."""
    s = "" if text is None else " ".join(str(text).split())
    if len(s) <= n:
        return s
    cut = s[:n - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > n // 2 else cut).rstrip(" ,;:") + "…"


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each id as a table shows it: long ids cut to the shortest prefix (at least
    ``SHORT_ID`` characters) that no other id shown shares, marked with ``…``; ids no longer
    than ``KEEP_ID`` stay whole. ``--wide`` and ``--json`` show them in full."""
    out: dict[str, str] = {}
    for full in ids:
        if len(full) <= KEEP_ID:
            out[full] = full
            continue
        n = SHORT_ID
        while n < len(full) and any(o != full and o.startswith(full[:n]) for o in ids):
            n += 1
        out[full] = full if n >= len(full) - 1 else full[:n] + "…"
    return out
