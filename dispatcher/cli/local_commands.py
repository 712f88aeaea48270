"""Local mode: ``longjobs demo`` and ``longjobs local`` (moto + local task processes).

Both need the ``local`` extra (moto's server mode); without it they say so in one line."""

from __future__ import annotations

from typing import Annotated

import typer

from dispatcher.cli.error_policy import fail, guarded

LOCAL_EXTRA = "pip install 'longjobs[local]'"


def _need_local_extra(command: str) -> None:
    from importlib.util import find_spec

    if find_spec("moto") is None or find_spec("flask") is None:  # flask: moto[server]
        fail(f"longjobs {command} needs moto[server] (the local extra): {LOCAL_EXTRA}")


def demo(
    seed: Annotated[int, typer.Option(help="Makes the run repeatable.")] = 1,
    small: Annotated[int, typer.Option(help="Number of small jobs.")] = 500,
) -> None:
    """Run the whole system locally (moto + local task processes) and check its promises."""
    _need_local_extra("demo")
    from dispatcher.local.demo import run

    ok, verdict = guarded(lambda: run(small=small, seed=seed))
    typer.echo(verdict)
    raise typer.Exit(0 if ok else 1)


def local(
    tick_seconds: Annotated[float, typer.Option(help="Dispatcher tick period.")] = 5.0,
) -> None:
    """Keep a local longjobs running; prints `export` lines for clients in another terminal."""
    _need_local_extra("local")
    import os
    import signal

    from dispatcher.local.environment import LocalEnv

    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # no decision record every tick
    env = guarded(lambda: LocalEnv(tick_seconds=tick_seconds).start())
    for line in env.exports():
        typer.echo(line)
    typer.echo("# longjobs local is running; Ctrl-C stops it and its tasks", err=True)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM/SIGHUP clean up like Ctrl-C: no task left behind

    # SIGHUP: the terminal closed. Without this the process dies and its runners (in their
    # own sessions) run on, detached.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_term)
    try:
        while True:
            signal.pause()  # until Ctrl-C, SIGTERM or SIGHUP
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C (or the terminal's SIGHUP after it) must not abort the cleanup.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        env.stop()
