"""``longjobs jobs cancel|retry --status S [--kind K] [--since D] [--label K=V] [--tenant T]``:
one action on many jobs.

The count comes first; then a confirmation, unless ``--yes``. Without a terminal to ask on
(stdin not a TTY: a script, a pipe, CI) and without ``--yes`` the command refuses at once, in
one line, and never waits for an answer that cannot come. The work is
:class:`dispatcher.ops.bulk.BulkAction`'s.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from dispatcher.cli.common import JsonOpt, client, print_json
from dispatcher.cli.error_policy import fail, guarded

KindOpt = Annotated[str | None, typer.Option(help="Many jobs: only those of this kind.")]
LabelOpt = Annotated[str | None, typer.Option(help="Many jobs: only those carrying this "
                                              "label, key=value.")]
TenantOpt = Annotated[str | None, typer.Option(help="Many jobs: only this tenant's.")]
SinceOpt = Annotated[str | None, typer.Option(help="Many jobs: only those created within, "
                                              "e.g. 15m, 2h, 1d.")]
ReasonOpt = Annotated[str | None, typer.Option(help="Why: kept in each job's reason and "
                                               "history.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Only show the selection: the "
                                          "filter as understood, how many jobs it matches "
                                          "and the first few ids.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Act without asking (scripts).")]
BulkIdOpt = Annotated[str | None, typer.Option(
    "--bulk-id", help="Resume an interrupted action: the id it printed. Jobs it already "
    "acted on are skipped.")]


def bulk(verb: str, *, status: str | None, kind: str | None, since_seconds: float | None,
         reason: str | None, dry_run: bool, yes: bool, bulk_id: str | None,
         from_scratch: bool = False, as_json: JsonOpt = False,
         interactive: bool | None = None, label: str | None = None,
         tenant: str | None = None) -> None:
    """Count the jobs selected, confirm, act on each once, report."""
    from dispatcher.ops.bulk import new_bulk_id

    if not status:
        fail(f"jobs {verb} needs a job id, or --status (with --kind, --since, --label, --tenant) "
             "to select many jobs")
    tty = sys.stdin.isatty() if interactive is None else interactive
    if not (yes or dry_run or tty):
        fail(f"refusing to {verb} many jobs without confirmation: stdin is not a terminal; "
             "pass --yes (or --dry-run to count them)")
    assert status is not None  # fail() does not return
    action, f = guarded(lambda: client().bulk(
        verb, status=status, kind=kind, since_seconds=since_seconds, label=label,
        tenant=tenant))
    matched = guarded(lambda: action.count(f))
    if dry_run or not matched:
        selection, sample = guarded(lambda: action.preview(f))
        if as_json:
            print_json({"action": verb, "matched": matched, "dry_run": dry_run,
                        "selection": selection, "sample": sample})
        else:
            shown = f": {', '.join(sample)}" + (", ..." if matched > len(sample) else "") \
                if sample else ""
            typer.echo(f"{matched} job(s) match {selection}{shown}; "
                       + (f"nothing done (--dry-run; run it without to {verb} them)"
                          if dry_run else "nothing to do"))
        return
    if not yes and not typer.confirm(f"{verb} {matched} job(s)?", default=False):
        typer.echo("nothing done", err=True)
        raise typer.Exit(1)
    bid = bulk_id or new_bulk_id()
    # Said first: if the run is interrupted, this id resumes it.
    typer.echo(f"{verb} {matched} job(s) as {bid}; if interrupted, run the same command with "
               f"--bulk-id {bid}", err=True)
    report = guarded(lambda: action.run(f, bulk_id=bid, reason=reason,
                                        from_scratch=from_scratch, resume=bulk_id is not None))
    if as_json:
        print_json(report.to_json())
        return
    done = "cancelled" if verb == "cancel" else "retried"
    typer.echo(f"{report.bulk_id}: {report.matched} matched {report.selection}; {done} "
               f"{report.acted}"
               + (f", cancel requested from their tasks {report.requested}"
                  if report.requested else "")
               + (f", already done by this id {report.skipped}" if report.skipped else "")
               + f", errors {report.errors}")
    for error in report.error_samples:
        typer.echo(f"  error: {error}", err=True)
    if report.errors:
        typer.echo(f"run it again with --bulk-id {report.bulk_id} to try the rest once more",
                   err=True)
