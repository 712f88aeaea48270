"""Dead-letter commands: ``longjobs dlq list|redrive`` (the job queue's dead-letter queue)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.cli.common import JsonOpt, client, print_json, short, when
from dispatcher.cli.error_policy import guarded

dlq_app = typer.Typer(name="dlq", no_args_is_help=True,
                      help="Inspect and redrive the job queue's dead-letter queue.")


# -- dlq ------------------------------------------------------------------------------------------
@dlq_app.command("list")
def dlq_list(limit: Annotated[int, typer.Option(min=1, max=1000)] = 10,
             as_json: JsonOpt = False) -> None:
    """Peek at dead letters (receive with VisibilityTimeout=0: nothing is taken, but every
    receive increments the message's receive count)."""
    letters = guarded(lambda: client().dead_letters().peek(limit))
    if as_json:
        print_json({"messages": [m.to_json() for m in letters], "count": len(letters)})
        return
    table = Table(box=None)
    for name in ("MESSAGE ID", "SENT (UTC)", "RECEIVES", "JOB ID", "KIND"):
        table.add_column(name, no_wrap=True)
    table.add_column("BODY", overflow="fold", min_width=24)
    for m in letters:
        table.add_row(*map(Text, (m.message_id, when(m.to_json()["sent_at"]),
                                  str(m.receive_count), m.job_id or "-", m.kind or "-",
                                  short(m.body, 40))))
    console = Console()
    console.print(table)
    console.print(f"{len(letters)} message(s)")


@dlq_app.command("redrive")
def dlq_redrive(limit: Annotated[int, typer.Option(min=1, max=100_000)] = 100,
                as_json: JsonOpt = False) -> None:
    """Move dead letters back to the queue of their priority (send, then delete; 10 at a
    time). A body that names no priority, or cannot be read, goes to the normal queue."""
    moved, failed = guarded(lambda: client().dead_letters().redrive(limit))
    if as_json:
        print_json({"moved": moved, "failed": failed})
    else:
        typer.echo(f"moved {moved} message(s) back to their job queues"
                   + (f"; {len(failed)} not moved: " + "; ".join(
                       f"{k}: {v}" for k, v in list(failed.items())[:5]) if failed else ""))
    if failed:
        raise typer.Exit(1)
