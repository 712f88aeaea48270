"""Turning what a handler did into the job's next state (pure, so it is easy to test)."""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from typing import Any

from dispatcher.domain import sizes
from dispatcher.domain.errors import Interrupted, PermanentError, RetryableError
from dispatcher.domain.jobs import Job, JobState

# A result's budget within the job's item (see dispatcher.domain.sizes).
MAX_RESULT_BYTES = sizes.MAX_RESULT_BYTES
LOG_MESSAGE_CHARS = 200

# What can carry a payload's values inside an error message: quoted strings, pydantic's
# input_value=..., and key=value / key: value pairs.
_QUOTED = re.compile("'[^']*'|\"[^\"]*\"")
_INPUT_VALUE = re.compile(r"input_value=.*?(?=, input_type=|\]|$)")
_ASSIGNED = re.compile(r"(\w+)([=:])\s*[^\s,;)\]}]+")


@dataclass
class Outcome:
    target: JobState
    result: Any = None
    error: dict[str, Any] | None = None
    reason: str | None = None
    interrupted: bool = False  # give the attempt back: infrastructure, not the job


def text_of(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when the exception's own ``__str__`` raises (a handler's
    exception is as hostile as the handler)."""
    try:
        return str(exc)
    except Exception as inner:  # whatever it raises, the job is still recorded
        return f"<{type(exc).__name__}: str() raised {type(inner).__name__}>"


def error_of(exc: BaseException) -> dict[str, Any]:
    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # formatting calls the exception's __str__ too
        tb = f"{type(exc).__name__}: (traceback could not be formatted)"
    # Clipped to the error's budget, the clipping marked: the message keeps its start, the
    # traceback its end (where it was raised).
    return {"type": sizes.clip_json_text(type(exc).__name__, sizes.ERROR_TYPE_BYTES),
            "message": sizes.clip_json_text(text_of(exc), sizes.ERROR_MESSAGE_BYTES),
            "traceback": sizes.clip_json_text(tb, sizes.ERROR_TRACEBACK_BYTES, keep_end=True)}


def succeeded(job: Job, value: Any) -> Outcome:
    try:
        size = sizes.json_bytes(value)
    except Exception as exc:  # TypeError, ValueError, RecursionError, a broken
        # __iter__ or __float__...: any result that cannot be stored fails its job, not the task
        why = f"{type(exc).__name__}: {text_of(exc)}"[:500]
        return Outcome(JobState.FAILED, reason=f"result is not JSON: {why}",
                       error={"type": "InvalidResult", "message": why})
    if size > MAX_RESULT_BYTES:
        return Outcome(JobState.FAILED, reason=f"result too large: {size} bytes > "
                       f"{MAX_RESULT_BYTES}", error={"type": "InvalidResult",
                                                     "message": "result too large"})
    return Outcome(JobState.SUCCEEDED, result=value)


def raised(job: Job, exc: BaseException, *, attempts: int, retry_any: bool,
           cancel_reason: str | None) -> Outcome:
    """``attempts`` counts this run."""
    err = error_of(exc)
    if isinstance(exc, Interrupted) or cancel_reason is not None:
        if cancel_reason == "cancelled":
            return Outcome(JobState.CANCELLED, error=err, reason="cancelled on request")
        if cancel_reason == "timeout":  # final, as AWS Batch's: not retried (see --max-attempts)
            return Outcome(JobState.FAILED, error=err, reason=timed_out(job))
        # cancel_reason None: the handler raised Interrupted by itself; its message says why.
        return Outcome(JobState.PENDING, error=err,
                       reason=f"interrupted: {cancel_reason or err['message']}",
                       interrupted=True)
    if isinstance(exc, PermanentError):
        return Outcome(JobState.FAILED, error=err, reason=f"permanent error: {err['message']}")
    if isinstance(exc, RetryableError) or retry_any:
        if attempts < job.max_attempts:
            return Outcome(JobState.PENDING, error=err,
                           reason=f"attempt {attempts} of {job.max_attempts} failed: "
                                  f"{err['message']}")
        return Outcome(JobState.FAILED, error=err, reason=f"failed after {attempts} attempts: "
                                                          f"{err['type']}: {err['message']}")
    return Outcome(JobState.FAILED, error=err, reason=f"{err['type']}: {err['message']}")


def timed_out(job: Job) -> str:
    """A timed-out job's reason: the words an operator looks for, with its limit."""
    return f"timed out after {job.timeout_seconds or 0:g} s"


def redact(message: str) -> str:
    """A message fit for logs: values removed, at most LOG_MESSAGE_CHARS characters."""
    text = _INPUT_VALUE.sub("input_value=…", message)
    text = _QUOTED.sub("'…'", text)
    text = _ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}…", text)
    return text[:LOG_MESSAGE_CHARS]


def log_fields(outcome: Outcome) -> dict[str, Any]:
    """What the runner logs about a finished job: its state, and for an error its type and a
    redacted message (the job record keeps the full error)."""
    fields: dict[str, Any] = {"state": str(outcome.target)}
    if outcome.reason is not None and outcome.reason.startswith("timed out after"):
        fields["reason"] = outcome.reason  # first on the line: a cut never hides it
    if outcome.error:
        fields["error_type"] = outcome.error.get("type")
        fields["error"] = redact(str(outcome.error.get("message", "")))
    return fields
