"""Message schema v1: what a producer puts on the queue.

A pydantic model is the contract; ``longjobs schema`` exports its JSON Schema so producers in
other languages validate against the same definition the dispatcher enforces.
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dispatcher.domain.errors import InvalidMessage

SCHEMA_VERSION = 1

# A DynamoDB item is at most 400 KB including attribute names.
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html
# The job item also carries its history, result, error and checkpoint, so the payload gets a
# budget well below that ceiling.
MAX_PAYLOAD_BYTES = 256 * 1024
# How much of a rejected body is kept on its REJECTED record.
REJECTED_BODY_BYTES = 4 * 1024

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$")
_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class JobMessage(BaseModel):
    """One job as it travels through SQS (schema v1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(description="Always 1 for this schema.")
    job_id: str = Field(description="Idempotency key: a second message with the same id is a "
                        "duplicate and never becomes a second job. 1-128 chars of "
                        "[A-Za-z0-9._:@/+=-].")
    kind: str = Field(description="Which handler runs the job.")
    payload: dict[str, Any] = Field(description="Arguments for the handler (a JSON object).")
    estimated_seconds: float | None = Field(default=None, ge=0, description="Producer's estimate; "
                                            "small jobs are bundled, unknown runs alone.")
    max_attempts: int = Field(default=3, ge=1, le=100, description="Application attempts before "
                              "the job is FAILED (infrastructure stops do not count).")
    timeout_seconds: float | None = Field(default=None, gt=0, description="Per-job time limit.")

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str) -> str:
        if not _JOB_ID.match(value):
            raise ValueError("job_id must be 1-128 chars of [A-Za-z0-9._:@/+=-]")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if not _KIND.match(value):
            raise ValueError("kind must be 1-128 chars of [A-Za-z0-9._:-]")
        return value

    def payload_json(self) -> str:
        return json.dumps(self.payload, separators=(",", ":"), sort_keys=True)

    @cached_property
    def payload_bytes(self) -> int:
        """Serialised size, computed once: validation, bundling and transaction packing use it."""
        return len(self.payload_json().encode())


def json_schema() -> dict[str, Any]:
    schema = JobMessage.model_json_schema()
    schema["$id"] = "https://longjobs.dev/schema/job-message-v1.json"
    schema["title"] = "longjobs job message v1"
    return schema


def describe_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err["loc"]) or "message"
        parts.append(f"{where}: {err['msg']}")
    return "schema violation: " + "; ".join(parts)


def parse(body: str, allowed_kinds: tuple[str, ...] = ()) -> JobMessage:
    """Turn a raw SQS body into a JobMessage or raise InvalidMessage with a readable reason."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise InvalidMessage(f"not JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(data, dict):
        raise InvalidMessage(f"not a JSON object but {type(data).__name__}")
    try:
        msg = JobMessage.model_validate(data)
    except ValidationError as exc:
        # Keep the job id if one is readable, so the REJECTED record can be found by it.
        job_id = data.get("job_id")
        readable = job_id if isinstance(job_id, str) and _JOB_ID.match(job_id) else None
        raise InvalidMessage(describe_errors(exc), job_id=readable) from None
    check(msg, allowed_kinds)
    return msg


def check(msg: JobMessage, allowed_kinds: tuple[str, ...] = ()) -> None:
    """The checks beyond the schema; shared by the producer client and the dispatcher."""
    if allowed_kinds and msg.kind not in allowed_kinds:
        raise InvalidMessage(f"unknown kind {msg.kind!r} (allowed: {', '.join(allowed_kinds)})",
                             job_id=msg.job_id)
    size = msg.payload_bytes
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidMessage(f"payload too large: {size} bytes > {MAX_PAYLOAD_BYTES} bytes "
                             "(store large inputs in S3 and pass a reference)", job_id=msg.job_id)
