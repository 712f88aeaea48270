"""The ``longjobs`` command line: a thin layer over the Python API; errors are one line."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from dispatcher import settings
from dispatcher.domain import message
from dispatcher.domain.errors import LongjobsError

app = typer.Typer(name="longjobs", no_args_is_help=True, add_completion=False,
                  help="Run long batch jobs as standalone ECS tasks.")
T = TypeVar("T")


def guarded(fn: Callable[[], T]) -> T:
    """Turn every expected failure into one readable line and exit code 2."""
    from pynamodb.exceptions import PynamoDBException, TableDoesNotExist

    try:
        return fn()
    except LongjobsError as exc:
        typer.echo(f"error: {exc}", err=True)
    except EndpointConnectionError as exc:
        typer.echo(f"error: cannot reach the AWS endpoint: {exc}", err=True)
    except TableDoesNotExist as exc:
        typer.echo(f"error: DynamoDB table does not exist: {exc.msg}", err=True)
    except PynamoDBException as exc:
        # pynamodb wraps botocore's errors; say what DynamoDB said, not where it was raised.
        cause = exc.cause
        if isinstance(cause, EndpointConnectionError):
            typer.echo(f"error: cannot reach the AWS endpoint: {cause}", err=True)
        elif exc.cause_response_code == "ResourceNotFoundException":
            typer.echo(f"error: DynamoDB table not found ({exc.cause_response_message}); "
                       "check LONGJOBS_TABLE", err=True)
        else:
            detail = (f"{exc.cause_response_code}: {exc.cause_response_message}"
                      if exc.cause_response_code else str(cause or exc.msg))
            typer.echo(f"error: DynamoDB: {exc.msg}: {detail}", err=True)
    except ClientError as exc:
        err = exc.response.get("Error", {})
        typer.echo(f"error: AWS {exc.operation_name}: {err.get('Code')}: {err.get('Message')}",
                   err=True)
    except BotoCoreError as exc:
        typer.echo(f"error: AWS: {exc}", err=True)
    raise typer.Exit(2)


@app.command()
def submit(
    kind: Annotated[str, typer.Argument(help="Job kind (selects the handler).")],
    payload: Annotated[str, typer.Option(help="Payload as a JSON object.")] = "{}",
    job_id: Annotated[str | None, typer.Option(help="Idempotency key (default: random).")] = None,
    estimated_seconds: Annotated[float | None, typer.Option()] = None,
    max_attempts: Annotated[int, typer.Option()] = 3,
    timeout_seconds: Annotated[float | None, typer.Option()] = None,
) -> None:
    """Enqueue one job; prints its id."""
    from dispatcher.ops.client import JobClient

    def run() -> str:
        try:
            data = json.loads(payload)
        except ValueError as exc:
            raise LongjobsError(f"--payload is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise LongjobsError("--payload must be a JSON object")
        return JobClient().submit(kind, data, job_id=job_id, estimated_seconds=estimated_seconds,
                                  max_attempts=max_attempts, timeout_seconds=timeout_seconds)

    typer.echo(guarded(run))


@app.command()
def dispatch(
    once: Annotated[bool, typer.Option("--once", help="Run exactly one tick.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide everything, write "
                                          "nothing; print what it would do.")] = False,
) -> None:
    """Run the dispatcher tick (what the scheduled Lambda does); prints the decision record."""
    from dispatcher import wiring

    if not once:
        typer.echo("error: only --once is supported here; the schedule runs ticks in AWS, "
                   "`longjobs local` runs them locally", err=True)
        raise typer.Exit(2)

    def run() -> dict[str, Any]:
        cfg = settings.load("dispatcher")
        if dry_run:
            dispatcher, plan = wiring.dry_run(cfg)
            try:
                decision = dispatcher.tick().as_dict()
            finally:
                plan.finish()
            return {"dry_run": True, "decision": decision, "plan": plan.actions}
        return wiring.dispatcher(cfg).tick().as_dict()

    typer.echo(json.dumps(guarded(run), indent=2, default=str))


@app.command()
def schema() -> None:
    """Print the JSON Schema of job messages (v1) for producers in other languages."""
    typer.echo(json.dumps(message.json_schema(), indent=2))


@app.command()
def demo(
    seed: Annotated[int, typer.Option(help="Makes the run repeatable.")] = 1,
    small: Annotated[int, typer.Option(help="Number of small jobs.")] = 500,
) -> None:
    """Run the whole system locally (moto + local task processes) and check its promises."""
    from dispatcher.local.demo import run

    ok, verdict = guarded(lambda: run(small=small, seed=seed))
    typer.echo(verdict)
    raise typer.Exit(0 if ok else 1)


@app.command()
def local(
    tick_seconds: Annotated[float, typer.Option(help="Dispatcher tick period.")] = 5.0,
) -> None:
    """Keep a local longjobs running; prints `export` lines for clients in another terminal."""
    import os
    import signal
    import time

    from dispatcher.local.environment import LocalEnv

    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # no decision record every tick
    env = guarded(lambda: LocalEnv(tick_seconds=tick_seconds).start())
    for line in env.exports():
        typer.echo(line)
    typer.echo("# longjobs local is running; Ctrl-C stops it and its tasks", err=True)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C: no task process left behind

    signal.signal(signal.SIGTERM, on_term)
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        env.stop()


from dispatcher.cli.deploy import deploy  # noqa: E402
from dispatcher.cli.jobs import register  # noqa: E402  (operator commands: jobs, stats, dlq)

register(app)
app.command()(deploy)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
