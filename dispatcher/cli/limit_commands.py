"""``longjobs limits``: the rate limits jobs share across every task, and ``limits set`` /
``limits delete`` (:mod:`dispatcher.domain.rate_limits`)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.cli.common import JsonOpt, client, print_json
from dispatcher.cli.error_policy import fail, guarded
from dispatcher.domain import rate_limits

limits_app = typer.Typer(
    name="limits", invoke_without_command=True, no_args_is_help=False,
    help="Rate limits jobs share across every task (token buckets): `limits set` names one, "
         "`limits delete` removes one. A job takes tokens with uses={KEY: N} on submit "
         "(--uses KEY=N), and ctx.acquire(KEY, N) while it runs.")


@limits_app.callback()
def limits(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every rate limit set: its key, rate, burst and shards. A job whose launch takes a
    limit's tokens waits (`waiting_for` rate_limit) until they are there; no task starts to
    wait for them."""
    if ctx.invoked_subcommand is not None:
        return
    found = guarded(lambda: client().limits())
    if as_json:
        print_json({"limits": {k: v.to_json() for k, v in sorted(found.items())}})
        return
    console = Console()
    if not found:
        console.print(Text("no rate limit is set; name one with: longjobs limits set KEY "
                           "--rate 100/min --burst 20"))
        return
    table = Table("KEY", "RATE", "BURST", "SHARDS", box=None)
    for key, limit in sorted(found.items()):
        table.add_row(Text(key), limit.said or f"{limit.rate:g}/s", f"{limit.burst:g}",
                      str(limit.shards))
    console.print(table)


@limits_app.command("set")
def set_limit(
    key: Annotated[str, typer.Argument(
        help="The limit's key, as jobs name it in uses (1-64 chars of [A-Za-z0-9._:/-]); "
             "{tenant} in it gives each tenant a bucket of its own, e.g. 'openai:{tenant}'.")],
    rate: Annotated[str | None, typer.Option(
        help="Tokens per unit: 100/min, 5/s, 1000/hour, 3/10s. Needed for a new limit; a "
             "limit set already keeps its rate, burst and shards unless given.")] = None,
    burst: Annotated[float | None, typer.Option(
        help="Most tokens granted at once (after a quiet spell); for a new limit, default: a "
             "minute's worth, at least 1. A tick (once a minute) launches at most a burst's "
             "worth of jobs that take its tokens.")] = None,
    shards: Annotated[int | None, typer.Option(
        help="Buckets its tokens are kept in (each a table item, which takes about 1,000 "
             "writes a second); for a new limit, default: one per 250 tokens a second. A take "
             "needs all its tokens in one: at most burst / shards.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Set a rate limit (or change one): the next launches and acquires keep to it. In any
    window of W seconds, its buckets grant at most rate x W + burst tokens."""
    if (why := rate_limits.key_problem(key)) is not None:
        fail(why)
    limit = guarded(lambda: client().set_limit(key, rate, burst, shards))
    if as_json:
        print_json({"key": key, **limit.to_json()})
        return
    console = Console()
    console.print(Text(f"limit {key}: {rate_limits.describe(limit)}; jobs take its tokens "
                       f"with uses={{{key!r}: N}}"))
    if limit.burst < limit.rate * 60:
        console.print(Text(
            f"note: a tick (once a minute) launches at most its burst, {limit.burst:g} tokens' "
            f"worth of jobs, of the {limit.rate * 60:g} a minute it allows; for launches to "
            f"keep up, raise it (--burst {limit.rate * 60:g}), or take tokens mid-job with "
            "ctx.acquire"))


@limits_app.command("delete")
def delete_limit(
    key: Annotated[str, typer.Argument(help="The limit's key, as `longjobs limits` lists it.")],
) -> None:
    """Remove a rate limit: jobs that name it take no tokens of it from then on."""
    guarded(lambda: client().delete_limit(key))
    Console().print(Text(f"limit {key} removed; its jobs take no tokens of it from now on"))
