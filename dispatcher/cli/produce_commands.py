"""Producer commands: ``longjobs submit`` (enqueue a job) and ``longjobs schema`` (the message
schema for producers in other languages)."""

from __future__ import annotations

import json
import re
import sys
from typing import Annotated, Any

import typer

from dispatcher.cli.common import JsonOpt, print_json
from dispatcher.cli.error_policy import guarded
from dispatcher.domain import labels, message, published_schema
from dispatcher.domain.dependencies import Requires
from dispatcher.domain.errors import InvalidMessage, LongjobsError


def submit(
    kind: Annotated[str, typer.Argument(help="Job kind: selects the handler (LONGJOBS_HANDLERS "
                                        "kind=module:function in the worker).")],
    payload: Annotated[str, typer.Option(
        help="Payload as a JSON object; @FILE reads it from FILE, - from stdin (a payload "
        "too long for a command line).")] = "{}",
    job_id: Annotated[str | None, typer.Option(help="Idempotency key (default: random).")] = None,
    estimated_seconds: Annotated[float | None, typer.Option(
        help="Expected run time: a job under LONGJOBS_SMALL_JOB_SECONDS shares a task with "
        "other small jobs, a longer one runs alone.")] = None,
    max_attempts: Annotated[int, typer.Option(
        help="Runs its handler may fail with an error before the job FAILS; tasks lost to "
        "Spot or a crash do not count, and a timeout fails the job at once (as AWS Batch "
        "does: a job that outruns its limit would most likely outrun it again).")] = 3,
    timeout_seconds: Annotated[float | None, typer.Option(
        help="One attempt's time limit; past it the job FAILS, not retried, with the reason "
        "'timed out after N s' (default: none).")] = None,
    cpu: Annotated[int | None, typer.Option(
        help="Task CPU units (1024 = 1 vCPU), with --memory: a pair Fargate runs.")] = None,
    memory: Annotated[int | None, typer.Option(
        help="Task memory in MiB, with --cpu.")] = None,
    ephemeral_storage: Annotated[int | None, typer.Option(
        help="Task ephemeral storage in GiB (21-200).")] = None,
    priority: Annotated[str | None, typer.Option(
        help="high, normal (default) or low.")] = None,
    not_before: Annotated[str | None, typer.Option(
        help="Not before this time: epoch seconds or an RFC 3339 time "
        f"(e.g. 2026-01-31T02:00:00Z), at the latest {message.LATEST_NOT_BEFORE}.")] = None,
    array: Annotated[int | None, typer.Option(
        "--array", help="An array job of N children (2-100000): ID:0 to ID:N-1, each with "
        "this payload and its index; ID is their parent.")] = None,
    tolerated_failures: Annotated[str, typer.Option(
        help="An array's children that may fail with the parent still SUCCEEDED: a count "
        "or a percentage, e.g. 5%.")] = "0",
    depends_on: Annotated[list[str] | None, typer.Option(
        help="A job this one waits for (repeat for several, up to 20; an array's parent "
        "stands for its array, ID:I for its child I). One not recorded yet is accepted and "
        "waited for: up to 15 minutes, a child of a recorded array as long as the array "
        "lives; one that can never be (REJECTED, a child past its array's size) is "
        "refused.")] = None,
    condition: Annotated[str, typer.Option(
        help="What each --depends-on job must end as: succeeded, finished (any end) or "
        "failed; otherwise this job is CANCELLED with the reason.")] = "succeeded",
    n_to_n: Annotated[bool, typer.Option(
        "--n-to-n", help="With --array: each --depends-on is an array of the same size this "
        "one depends on element-wise: child i waits for its child i only.")] = False,
    label: Annotated[list[str] | None, typer.Option(
        help="key=value to list, act on and count the job by (repeat for several, up to 10; "
        "e.g. --label customer=acme).")] = None,
    tenant: Annotated[str | None, typer.Option(
        help="Whom the job's work is for (1-64 chars of [A-Za-z0-9._-]); default: "
        "LONGJOBS_TENANT, else none.")] = None,
    uses: Annotated[list[str] | None, typer.Option(
        help="KEY=N: the job's launch takes N tokens of rate limit KEY (`longjobs limits`; "
        "repeat for several, up to 4; e.g. --uses openai=1). It waits until they are there.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Enqueue one job (or an array of them); prints its id (`longjobs jobs show ID` follows
    it)."""
    from dispatcher.ops.client import JobClient

    def run() -> str:
        data = payload_object(payload)
        if condition not in CONDITIONS:
            raise LongjobsError(f"--condition {condition!r} is not one of "
                                f"{', '.join(CONDITIONS)}")
        if n_to_n and not (depends_on and array):
            raise LongjobsError("--n-to-n makes each --depends-on element-wise for an array: "
                                "give it with --array N and --depends-on ARRAY_ID")
        tags: dict[str, str] = {}
        for text in label or []:
            try:
                key, value = labels.parse(text)
            except ValueError as exc:
                raise LongjobsError(str(exc)) from None
            tags[key] = value
        takes: dict[str, int] = {}
        for text in uses or []:
            key, eq, count = text.partition("=")
            if not eq or not re.fullmatch(r"[0-9]{1,9}", count.strip()):
                raise LongjobsError(f"--uses {text!r} must be KEY=N (N a whole number of "
                                    "tokens), such as --uses openai=1")
            takes[key] = int(count)
        client = JobClient()
        try:
            return client.submit(kind, data, job_id=job_id, estimated_seconds=estimated_seconds,
                                 max_attempts=max_attempts, timeout_seconds=timeout_seconds,
                                 cpu=cpu, memory=memory, ephemeral_storage=ephemeral_storage,
                                 priority=priority, not_before=_time(not_before),
                                 array_size=array, tolerated_failures=_count(tolerated_failures),
                                 depends_on=[{"job_id": d, "condition": condition}
                                             | ({"n_to_n": True} if n_to_n else {})
                                             for d in depends_on or []], labels=tags or None,
                                 tenant=tenant, uses=takes or None)
        except InvalidMessage as exc:
            raise InvalidMessage(as_flags(exc.reason), job_id=job_id) from None

    sent = guarded(run)
    if as_json:
        print_json({"job_id": sent, "kind": kind})
    else:
        typer.echo(sent)


def payload_text(value: str) -> str:
    """--payload as given, or read from a file (``@FILE``) or stdin (``-``), as curl takes
    ``-d @FILE``: a payload of up to 256 KiB does not fit a command line (its arguments stop
    at ~128 KiB each on Linux)."""
    if value == "-":
        return sys.stdin.read()
    if value.startswith("@"):
        path = value[1:]
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise LongjobsError(f"--payload {value}: cannot read {path!r}: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None
    return value


def payload_object(value: str) -> dict[str, Any]:
    """--payload as a JSON object (given, ``@FILE`` or ``-``), or an error saying how to
    write one."""
    text = payload_text(value)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LongjobsError(f"--payload is not JSON: {exc}; quote it for the shell, e.g. "
                            f"--payload '{{\"day\": \"2026-11-30\"}}'") from None
    if not isinstance(data, dict):
        raise LongjobsError("--payload must be a JSON object, e.g. --payload '{\"n\": 1}'")
    return data


def _count(value: str) -> int | str:
    """--tolerated-failures as the message takes it: a count, or a percentage (checked by
    the schema either way)."""
    return int(value) if re.fullmatch("[0-9]+", value) else value


# What --condition takes (each --depends-on job must end so).
CONDITIONS = tuple(str(c) for c in Requires)

# The message fields `submit` sets, by the flag that sets them.
_FLAGS = {name: "--" + name.replace("_", "-") for name in (
    "job_id", "estimated_seconds", "max_attempts", "timeout_seconds", "cpu", "memory",
    "ephemeral_storage", "priority", "not_before", "payload", "tolerated_failures",
    "depends_on", "tenant")} | {"array_size": "--array", "labels": "--label",
                                "uses": "--uses"}
_FIELD = re.compile(r"(^|; )(\w+)(: | )")


def as_flags(reason: str) -> str:
    """A schema violation in the words of the command line: the flag, not the message field,
    and no pydantic prefix (``kind: Value error, kind must be...`` -> ``KIND: kind must...``)."""
    reason = reason.removeprefix("schema violation: ").replace("Value error, ", "")

    def flag(match: re.Match[str]) -> str:
        field, after = match.group(2), match.group(3)
        if after == " " and field not in _FLAGS:  # a word, not a field the message names
            return match.group(0)
        name = "KIND" if field == "kind" else _FLAGS.get(field, field)
        return f"{match.group(1)}{name}{after}"

    return _FIELD.sub(flag, reason) + "; `longjobs submit --help` lists the flags"


def _time(value: str | None) -> float | str | None:
    """``--not-before`` as the schema takes it: a number is epoch seconds, anything else is
    left to the schema as an RFC 3339 time."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return value


def schema() -> None:
    """Print the JSON Schema of job messages (v1) for producers in other languages."""
    typer.echo(json.dumps(published_schema.json_schema(), indent=2))
