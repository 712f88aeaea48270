"""Local mode: ``longjobs demo`` and ``longjobs local`` (moto + local task processes).

Both need the ``local`` extra (moto's server mode); without it they say so in one line."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from dispatcher.cli.error_policy import fail, guarded

if TYPE_CHECKING:
    from dispatcher.console.serve import Served

LOCAL_EXTRA = "pip install 'longjobs[local]'"
# Stopping takes seconds (the ticker's tick, SIGTERM's grace for the tasks); one still under
# way after this long prints every thread's stack on stderr, so a hang says where it is.
STOP_REPORT_SECONDS = 45.0

# Run in a child process, as a task would import them: the parent must not import the handler
# modules, or forked tasks would inherit them and miss the user's later edits.
_CHECK_HANDLERS = """
import importlib, sys
for item in [s.strip() for s in sys.argv[1].split(",") if s.strip()]:
    kind, sep, spec = item.partition("=")
    module, colon, attr = spec.strip().partition(":")
    if not sep or not kind.strip() or not module or not colon or not attr:
        hint = spec.strip().rpartition(".")
        fix = f"{kind.strip()}={hint[0]}:{hint[2]}" if sep and hint[1] and not colon else \\
            "kind=module:function"
        print(f"LONGJOBS_HANDLERS entry {item!r} is not kind=module:function; write it as {fix}")
        sys.exit(1)
    try:
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        print(f"LONGJOBS_HANDLERS entry {item!r}: {module}:{attr} cannot be imported "
              f"({type(exc).__name__}: {exc}); check PYTHONPATH (the tasks import with it) and "
              "the module and function names")
        sys.exit(1)
    if not callable(obj):
        print(f"LONGJOBS_HANDLERS entry {item!r}: {module}:{attr} is not a function")
        sys.exit(1)
"""


def check_handlers(specs: str, env: dict[str, str] | None = None) -> str:
    """Why ``LONGJOBS_HANDLERS`` (``kind=module:function,...``) would fail its jobs, or ""."""
    if not specs.strip():
        return ""
    done = subprocess.run([sys.executable, "-c", _CHECK_HANDLERS, specs], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode == 0:
        return ""
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def _report_a_slow_stop() -> None:
    """Arm faulthandler's watchdog for the rest of the process (exit included: the threads
    joined at interpreter exit can hang too); a stderr without a file descriptor has none."""
    import faulthandler

    with contextlib.suppress(AttributeError, ValueError, OSError):
        faulthandler.dump_traceback_later(STOP_REPORT_SECONDS, file=sys.stderr)


def _writer(file: IO[str]) -> Callable[[str], None]:
    def write(line: str) -> None:
        file.write(line + "\n")
    return write


def _need_local_extra(command: str) -> None:
    from importlib.util import find_spec

    if find_spec("moto") is None or find_spec("flask") is None:  # flask: moto[server]
        fail(f"longjobs {command} needs moto[server] (the local extra): {LOCAL_EXTRA}")


def _console(stack: dict[str, str], port: int, operate: bool) -> Served | None:
    """The web console of local mode's stack, served from a thread; None (said on stderr)
    without the console extra."""
    from importlib.util import find_spec

    if any(find_spec(m) is None for m in ("starlette", "jinja2", "uvicorn", "multipart")):
        typer.echo("# the web console needs the console extra: pip install "
                   "'longjobs[console]'", err=True)
        return None
    from dispatcher.console.serve import serve_in_thread
    from dispatcher.console.source import ConsoleSource
    from dispatcher.domain.errors import ConfigError

    source = guarded(lambda: ConsoleSource.of_settings(stack))
    try:
        return serve_in_thread(source, "127.0.0.1", port, operate=operate)
    except ConfigError:
        if port == 0:
            raise
        typer.echo(f"# port {port} is taken: the console takes a free one", err=True)
        return serve_in_thread(source, "127.0.0.1", 0, operate=operate)


def demo(
    seed: Annotated[int, typer.Option(help="Makes the run repeatable: the same seed, the same "
                                      "job sizes and kill/deploy moments.")] = 1,
    small: Annotated[int, typer.Option(help="Number of small jobs (fewer: a shorter "
                                       "run).")] = 500,
    console: Annotated[bool, typer.Option("--console", help="Serve the web console (read-only) "
                                          "while it runs, to watch it in a browser; after the "
                                          "verdict it stays up until Ctrl-C.")] = False,
) -> None:
    """Run the whole system locally (moto + local task processes) and check its promises."""
    _need_local_extra("demo")
    from dispatcher.local.demo import run

    typer.echo("longjobs demo: starting a local environment (moto's server, queues, table, "
               "cluster); the batch follows in a few seconds, about 75 seconds in all", err=True)
    served: list[Served] = []

    def started(stack: dict[str, str]) -> None:
        found = _console(stack, 8765, operate=False)
        if found is not None:
            served.append(found)
            typer.echo(f"longjobs demo: watch it at {found.url}", err=True)

    def linger(verdict: str) -> None:
        if not served:  # no console (its extra is missing): nothing to stay up for
            return
        typer.echo(verdict)
        typer.echo(f"longjobs demo: the console stays at {served[0].url} until Ctrl-C",
                   err=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)

    try:
        ok, verdict = guarded(lambda: run(small=small, seed=seed,
                                          started=started if console else None,
                                          linger=linger if console else None))
    finally:
        for s in served:
            s.stop()
    if not console or not served:
        typer.echo(verdict)
    raise typer.Exit(0 if ok else 1)


def local(
    tick_seconds: Annotated[float, typer.Option(help="Seconds between two ticks.")] = 5.0,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Every tick's whole decision record, as the JSON line the "
        "Lambda logs, not a line for each tick that admitted, launched or finished "
        "something.")] = False,
    events: Annotated[Path | None, typer.Option(
        "--events", metavar="FILE", dir_okay=False,
        help="Append every job state change to FILE, one JSON line each, as it happens (the "
        "event EventBridge gets on AWS: detail-type \"longjobs Job State Change\"); "
        "`tail -f FILE` follows them. Stdout carries only the export lines.")] = None,
    keep_output: Annotated[bool, typer.Option(
        "--keep-output", help="Keep the tasks' output file (LONGJOBS_LOCAL_LOG) after local "
        "mode stops; without it, its folder is removed with the rest.")] = False,
    console_port: Annotated[int, typer.Option(
        min=0, max=65535, help="Serve the web console on this loopback port (if taken, any "
        "free one; 0: any free one); its URL is exported as LONGJOBS_CONSOLE_URL.")] = 8765,
    no_console: Annotated[bool, typer.Option("--no-console", help="Do not serve the web "
                                             "console.")] = False,
    operate: Annotated[bool, typer.Option("--operate", help="The console allows cancel, "
                                          "retry, bulk actions and redrive (read-only "
                                          "without it).")] = False,
) -> None:
    """Keep a local longjobs running; prints `export` lines for clients in another terminal
    (`eval` them there), and nothing else on stdout. It fires the schedules `longjobs
    schedules` makes, as EventBridge Scheduler does on AWS. Ctrl-C, SIGINT, SIGTERM or SIGHUP
    stops it and its tasks."""
    _need_local_extra("local")
    import signal

    from dispatcher import settings
    from dispatcher.cli.stop_signals import wait_for_a_stop
    from dispatcher.local.environment import LocalEnv
    from dispatcher.local.event_feed import PrintingSink
    from dispatcher.local.output import Follower, ReadableRecords
    from dispatcher.logs import logger

    problem = check_handlers(",".join(guarded(lambda: settings.load("task")).handlers))
    if problem:
        fail(problem)
    # A shell starts a background job (`longjobs local &` in a script) with SIGINT ignored;
    # this command promises that SIGINT stops it, so it takes SIGINT back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    typer.echo("# longjobs local: starting (moto's server, queues, table, cluster)...", err=True)
    # The tasks' output goes to one file (`longjobs jobs logs ID` reads a job's lines there),
    # echoed here as it grows, one readable line per record.
    log_dir = tempfile.mkdtemp(prefix="longjobs-local-")
    log_path = os.path.join(log_dir, "tasks.log")
    sink, events_file = None, None
    if events is not None:
        try:  # line-buffered: each event is in the file as it is delivered
            events_file = events.open("a", buffering=1, encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write the events to {events}: {exc.strerror}; give --events a file "
                 "in a directory you can write to")
        sink = PrintingSink(_writer(events_file))
    env = guarded(lambda: LocalEnv(tick_seconds=tick_seconds, log_path=log_path,
                                   verbose=verbose, job_events=sink).start())
    if not verbose:  # the dispatcher's records as the tasks' lines are shown, not JSON
        logger.registered_handler.setFormatter(ReadableRecords())
    follower = Follower(log_path, sys.stderr.write).start()
    served = None if no_console else _console(env.env, console_port, operate)
    if served is not None:
        typer.echo(f"export LONGJOBS_CONSOLE_URL={served.url}")
    for line in env.exports():
        typer.echo(line)
    if served is not None:
        typer.echo(f"# the web console: {served.url}" + ("" if operate else " (read-only; "
                   "--operate allows actions)"), err=True)
    typer.echo("# longjobs local is running: `eval` the lines above in another shell, then "
               "`longjobs submit KIND`; Ctrl-C stops it and its tasks", err=True)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM/SIGHUP clean up like Ctrl-C: no task left behind

    # SIGHUP: the terminal closed. Without this the process dies and its runners (in their
    # own sessions) run on, detached.
    try:
        wait_for_a_stop((signal.SIGTERM, signal.SIGHUP), on_term)  # or Ctrl-C
    except KeyboardInterrupt:
        pass
    finally:
        # A second Ctrl-C (or the terminal's SIGHUP after it) must not abort the cleanup.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        typer.echo("# longjobs local: stopping its tasks...", err=True)
        _report_a_slow_stop()
        if served is not None:
            served.stop()
        env.stop()
        follower.stop()
        if events_file is not None:
            events_file.close()
        if keep_output:
            typer.echo(f"# the tasks' output stays in {log_path}", err=True)
        else:
            shutil.rmtree(log_dir, ignore_errors=True)
        typer.echo("# longjobs local stopped", err=True)
