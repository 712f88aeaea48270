"""Producer commands: ``longjobs submit`` (enqueue a job) and ``longjobs schema`` (the message
schema for producers in other languages)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from dispatcher.cli.errors import guarded
from dispatcher.domain import message
from dispatcher.domain.errors import LongjobsError


def submit(
    kind: Annotated[str, typer.Argument(help="Job kind (selects the handler).")],
    payload: Annotated[str, typer.Option(help="Payload as a JSON object.")] = "{}",
    job_id: Annotated[str | None, typer.Option(help="Idempotency key (default: random).")] = None,
    estimated_seconds: Annotated[float | None, typer.Option()] = None,
    max_attempts: Annotated[int, typer.Option()] = 3,
    timeout_seconds: Annotated[float | None, typer.Option()] = None,
    cpu: Annotated[int | None, typer.Option(
        help="Task CPU units (1024 = 1 vCPU), with --memory: a pair Fargate runs.")] = None,
    memory: Annotated[int | None, typer.Option(
        help="Task memory in MiB, with --cpu.")] = None,
    ephemeral_storage: Annotated[int | None, typer.Option(
        help="Task ephemeral storage in GiB (21-200).")] = None,
    priority: Annotated[str | None, typer.Option(
        help="high, normal (default) or low.")] = None,
    not_before: Annotated[str | None, typer.Option(
        help="Not before this UTC time: epoch seconds or ISO-8601 with a timezone "
        "(e.g. 2026-01-31T02:00:00Z).")] = None,
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
                                  max_attempts=max_attempts, timeout_seconds=timeout_seconds,
                                  cpu=cpu, memory=memory, ephemeral_storage=ephemeral_storage,
                                  priority=priority, not_before=_time(not_before))

    typer.echo(guarded(run))


def _time(value: str | None) -> float | str | None:
    """``--not-before`` as the schema takes it: a number is epoch seconds, anything else is
    left to the schema as an ISO-8601 time."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return value


def schema() -> None:
    """Print the JSON Schema of job messages (v1) for producers in other languages."""
    typer.echo(json.dumps(message.json_schema(), indent=2))
