"""``longjobs console``: the web console (:mod:`dispatcher.console`) of the stack the settings
name, served on loopback with the caller's own AWS credentials."""

from __future__ import annotations

from typing import Annotated

import typer

from dispatcher.cli.error_policy import fail, guarded

CONSOLE_EXTRA = "pip install 'longjobs[console]'"


def need_console_extra(command: str) -> None:
    from importlib.util import find_spec

    missing = [m for m in ("starlette", "jinja2", "uvicorn", "multipart") if find_spec(m) is None]
    if missing:
        fail(f"longjobs {command} needs the console extra ({', '.join(missing)} missing): "
             f"{CONSOLE_EXTRA}")


def console(
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free "
                                      "one).")] = 8765,
    host: Annotated[str, typer.Option(help="Address to listen on. Anything but loopback lets "
                                      "other machines reach it: it has no login of its own, "
                                      "so only behind your own access control.")]
    = "127.0.0.1",
    operate: Annotated[bool, typer.Option("--operate", help="Allow cancel, retry, bulk "
                                          "actions and redrive (read-only without it: the "
                                          "server refuses them).")] = False,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", metavar="NAME", help="Another host name browsers reach it by (with "
        "--host); any other is refused. Repeatable.")] = None,
) -> None:
    """Serve the web console (jobs, a job's attempts and logs, bulk actions, deployments, dead
    letters) for the stack the settings name, and print its URL; Ctrl-C stops it."""
    need_console_extra("console")
    from dispatcher.console.serve import LOOPBACK, serve_forever
    from dispatcher.console.source import ConsoleSource

    source = guarded(ConsoleSource.of_settings)
    if host not in LOOPBACK:
        typer.echo(f"# warning: the console listens on {host}, beyond this machine; it has no "
                   "login of its own", err=True)

    def ready(url: str) -> None:
        typer.echo(url)
        typer.echo("# longjobs console: " + ("operate mode (actions allowed)" if operate else
                   "read-only (--operate allows actions)") + "; Ctrl-C stops it", err=True)

    guarded(lambda: serve_forever(source, host, port, operate=operate, on_ready=ready,
                                  also=tuple(allow_host or ())))
