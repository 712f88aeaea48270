"""Dead-letter commands: ``longjobs dlq list|redrive`` (the job queue's dead-letter queue)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dispatcher.cli.common import (
    JsonOpt,
    WideOpt,
    client,
    print_json,
    short,
    short_ids,
    wide_console,
)
from dispatcher.cli.error_policy import guarded
from dispatcher.ops.wording import when

dlq_app = typer.Typer(name="dlq", no_args_is_help=True,
                      help="Inspect and redrive the job queue's dead-letter queue.")


# -- dlq ------------------------------------------------------------------------------------------
@dlq_app.command("list")
def dlq_list(limit: Annotated[int, typer.Option(min=1, max=1000,
                                                help="At most this many messages.")] = 10,
             wide: WideOpt = False,
             as_json: JsonOpt = False) -> None:
    """Peek at dead letters (receive with VisibilityTimeout=0: nothing is taken, but every
    receive increments the message's receive count). Long ids are shortened to a prefix no
    other row shares; --wide or --json shows them whole."""
    letters = guarded(lambda: client().dead_letters().peek(limit))
    if as_json:
        print_json({"messages": [m.to_json() for m in letters], "count": len(letters)})
        return
    every = [m.message_id for m in letters] + [m.job_id for m in letters if m.job_id]
    ids = {i: i for i in every} if wide else short_ids(every)
    table = Table(box=None, pad_edge=False, padding=(0, 1, 0, 0))
    for name in ("MESSAGE", "SENT (UTC)", "RECV", "JOB ID", "KIND"):
        table.add_column(name, no_wrap=True, overflow="ellipsis",
                         max_width=14 if name == "KIND" and not wide else None)
    table.add_column("BODY", min_width=16, overflow="fold")
    for m in letters:
        sent = when(m.to_json()["sent_at"])
        table.add_row(*map(Text, (ids[m.message_id], sent if wide else sent[:16],
                                  str(m.receive_count), ids[m.job_id] if m.job_id else "-",
                                  m.kind or "-", m.body if wide else short(m.body, 60))))
    console = wide_console() if wide else Console()
    console.print(table)
    shortened = any(ids[k] != k for k in ids)
    console.print(f"{len(letters)} message(s)" + ("; ids shortened: --wide or --json shows "
                                                  "them whole" if shortened else ""))


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
