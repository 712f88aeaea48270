"""The CLI's one error policy: every expected failure is one ``error: ...`` line on stderr and
exit code 2 (no traceback), saying what went wrong and what to do next (a command, a setting or a
flag). Every command runs its work through :func:`guarded`; :func:`next_step` adds the second
half where the error itself cannot know it (a missing setting is the same error to a script and
to a person who forgot to ``eval`` local mode's exports)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
)

from dispatcher.domain.errors import ConfigError, JobNotFound, LongjobsError
from dispatcher.ports.table import TableUnavailable

T = TypeVar("T")

# Where the client settings come from: local mode's exports, or the stack's outputs.
CONNECT = ("for local mode start `longjobs local > /tmp/longjobs.env` in another terminal and "
           "run `eval \"$(cat /tmp/longjobs.env)\"` here; for AWS set LONGJOBS_QUEUE_URL and "
           "LONGJOBS_TABLE from the stack's outputs QueueUrl and TableName")
UNREACHABLE = ("is `longjobs local` still running? If it was restarted, its endpoint changed: "
               "`eval` its new exports; for AWS unset AWS_ENDPOINT_URL")
_CONNECTION = ("LONGJOBS_QUEUE_URL is not set", "LONGJOBS_TABLE is not set",
               "LONGJOBS_DLQ_URL is not set")


# (words in the error, what to do next); the first match wins. ``{id}`` is the job id.
_STEPS: tuple[tuple[str, str], ...] = (
    ("can be retried, not SUCCEEDED", "it succeeded; to run it again submit a new job "
     "(`longjobs submit KIND --job-id NEW_ID`)"),
    ("can be retried, not", "it has not ended yet: `longjobs jobs cancel {id}` first, or wait "
     "for it (`longjobs jobs show {id}`)"),
    ("nothing to cancel", "`longjobs jobs show {id}` shows how it ended"),
    ("kept changing while cancelling", "run `longjobs jobs cancel {id}` again"),
    ("was REJECTED", "`longjobs jobs show {id}` shows the message it got; "
     "`longjobs schema` prints the schema"),
    ("unknown status", "pass one of them to --status"),
    ("unknown kind", "submit one of the allowed kinds, or add it to LONGJOBS_ALLOWED_KINDS"),
    ("could not be enqueued", "resubmit them: the same --job-id is de-duplicated, never run "
     "twice"),
    ("no schedule '", "`longjobs schedules list` shows the schedules by name"),
    ("exists already in schedule group", "`longjobs schedules update NAME` changes it; or "
     "`longjobs schedules delete NAME` first"),
    ("does not exist", "was `longjobs local` restarted? `eval` its new exports; for AWS check "
     "the LONGJOBS_* settings against the stack's outputs"),
    ("LONGJOBS_SUBNETS is not set", "set LONGJOBS_SUBNETS to the tasks' subnet ids "
     "(comma-separated), or add --dry-run, which launches nothing"),
    ("LONGJOBS_LAUNCHER=local", "local mode ticks by itself every --tick-seconds; `longjobs "
     "dispatch --once --dry-run` shows what a tick would do"),
)


def next_step(exc: LongjobsError) -> str:
    """What to do about ``exc``, or "" when its message already says it."""
    text = str(exc)
    for words, step in _STEPS:
        if words in text and step not in text:
            return step.replace("{id}", exc.job_id or "JOB_ID")
    if isinstance(exc, JobNotFound):
        return ("a job just submitted is found once a tick has admitted it (the next minute "
                "in AWS, the next --tick-seconds in local mode); `longjobs jobs list` shows "
                "recent jobs and their whole ids")
    if isinstance(exc, ConfigError) and any(c in text for c in _CONNECTION):
        return CONNECT
    return ""


def with_next_step(exc: LongjobsError) -> str:
    step = next_step(exc)
    return f"{exc}; {step}" if step else str(exc)


def fail(message: str) -> NoReturn:
    """Print ``error: message`` on stderr and exit with code 2."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def guarded(fn: Callable[[], T]) -> T:
    """Turn every expected failure into one readable line and exit code 2."""
    from pynamodb.exceptions import PynamoDBException, TableDoesNotExist

    try:
        return fn()
    except TableUnavailable as exc:  # the table adapter's words for pynamodb's errors
        if exc.code == EndpointConnectionError.__name__:
            fail(f"cannot reach the AWS endpoint: {exc.message}; {UNREACHABLE}")
        fail(f"DynamoDB {exc}")
    except LongjobsError as exc:
        fail(with_next_step(exc))
    except EndpointConnectionError as exc:
        fail(f"cannot reach the AWS endpoint: {exc}; {UNREACHABLE}")
    except TableDoesNotExist as exc:
        fail(f"DynamoDB table does not exist: {exc.msg}; check LONGJOBS_TABLE ({CONNECT})")
    except PynamoDBException as exc:
        # pynamodb wraps botocore's errors; say what DynamoDB said, not where it was raised.
        cause = exc.cause
        if isinstance(cause, EndpointConnectionError):
            fail(f"cannot reach the AWS endpoint: {cause}; {UNREACHABLE}")
        elif exc.cause_response_code == "ResourceNotFoundException":
            fail(f"DynamoDB table not found ({exc.cause_response_message}); check LONGJOBS_TABLE")
        detail = (f"{exc.cause_response_code}: {exc.cause_response_message}"
                  if exc.cause_response_code else str(cause or exc.msg))
        fail(f"DynamoDB: {exc.msg}: {detail}")
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = str(err.get("Code"))
        step = ("check the LONGJOBS_*_QUEUE_URL settings" if "NonExistentQueue" in code
                else "check the credentials' permissions" if "AccessDenied" in code
                else "check the settings it names")
        fail(f"AWS {exc.operation_name}: {code}: {err.get('Message')}; {step}")
    except NoCredentialsError:
        fail(f"no AWS credentials; for AWS configure them (AWS_PROFILE, `aws configure`); "
             f"{CONNECT.split('; ')[0]}")
    except BotoCoreError as exc:
        fail(f"AWS: {exc}; check AWS_REGION and AWS_ENDPOINT_URL")
