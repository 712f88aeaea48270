"""The CLI's one error policy: every expected failure is one ``error: ...`` line on stderr and
exit code 2 (no traceback). Every command runs its work through :func:`guarded`."""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

import typer
from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError

from dispatcher.domain.errors import LongjobsError
from dispatcher.ports.table import TableUnavailable

T = TypeVar("T")


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
            fail(f"cannot reach the AWS endpoint: {exc.message}")
        fail(f"DynamoDB {exc}")
    except LongjobsError as exc:
        fail(str(exc))
    except EndpointConnectionError as exc:
        fail(f"cannot reach the AWS endpoint: {exc}")
    except TableDoesNotExist as exc:
        fail(f"DynamoDB table does not exist: {exc.msg}")
    except PynamoDBException as exc:
        # pynamodb wraps botocore's errors; say what DynamoDB said, not where it was raised.
        cause = exc.cause
        if isinstance(cause, EndpointConnectionError):
            fail(f"cannot reach the AWS endpoint: {cause}")
        elif exc.cause_response_code == "ResourceNotFoundException":
            fail(f"DynamoDB table not found ({exc.cause_response_message}); check LONGJOBS_TABLE")
        detail = (f"{exc.cause_response_code}: {exc.cause_response_message}"
                  if exc.cause_response_code else str(cause or exc.msg))
        fail(f"DynamoDB: {exc.msg}: {detail}")
    except ClientError as exc:
        err = exc.response.get("Error", {})
        fail(f"AWS {exc.operation_name}: {err.get('Code')}: {err.get('Message')}")
    except BotoCoreError as exc:
        fail(f"AWS: {exc}")
