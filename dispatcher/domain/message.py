"""Message schema v1: what a producer puts on the queue.

A pydantic model is the contract; ``longjobs schema`` exports its JSON Schema so producers in
other languages validate against the same definition the dispatcher enforces.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from dispatcher.domain import (
    arrays,
    dependencies,
    fargate,
    labels,
    lifecycle,
    message_errors,
    payloads,
    rate_limits,
    rfc3339,
    schedules,
    sizes,
    tenants,
)
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Priority, Resources
from dispatcher.domain.sizes import compact_json

SCHEMA_VERSION = 1

# The payload's budget within the job's 400 KB item, and how much of a rejected body its
# REJECTED record keeps: see dispatcher.domain.sizes (every part of an item is budgeted there).
# The schema's other fields are bounded (ids and kinds of 128 characters, numbers; extra fields
# are refused), so an admitted job's item is the payload and under 2 KB more.
MAX_PAYLOAD_BYTES = sizes.MAX_PAYLOAD_BYTES
REJECTED_BODY_BYTES = sizes.REJECTED_BODY_BYTES

# Matched with fullmatch: ``$`` would also accept a trailing newline.
JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}")
_KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

# Time fields are stored as DynamoDB numbers, which hold 38 significant digits with a magnitude
# of 0 or between 1E-130 and 9.9999999999999999999999999999999999999E+125; anything else (and
# NaN/Infinity, which Python's json accepts and other producers send) fails the item's write.
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html
# The schema's bounds sit far inside that range: a job longer than MAX_SECONDS (~116 days) is
# a mistake, and a time limit below MIN_TIMEOUT_SECONDS (1 ms) cannot be enforced.
MAX_SECONDS = 1e7
MIN_TIMEOUT_SECONDS = 0.001
MIN_ESTIMATE_SECONDS = 0.001  # a non-zero estimate below this is rejected (send 0)
MAX_PAYLOAD_DEPTH = payloads.MAX_DEPTH
# not_before, as epoch seconds: from 1970 to one second before the earliest due time the
# dispatcher keeps for held bundles (lifecycle.HELD_TIMES, at the end of year 9999, the last
# time an ISO-8601 index key can carry): a job scheduled at a marker would be taken for a held
# one (rewritten by every tick, shown as a rerun). Derived from the markers, so a marker moved
# moves it; a whole second, so that an ISO-8601 time names it.
MAX_NOT_BEFORE = float(math.floor(min(lifecycle.HELD_TIMES)) - 1)
LATEST_NOT_BEFORE = datetime.fromtimestamp(MAX_NOT_BEFORE, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
_NOT_BEFORE_SHAPE = ("not_before must be epoch seconds (UTC) or an RFC 3339 time, e.g. "
                     f"{rfc3339.EXAMPLES}")

# not_before as producers may send it; the model stores epoch seconds (a float).
_NotBefore = Annotated[float | None, WithJsonSchema({
    "anyOf": [
        {"type": "number", "minimum": 0, "maximum": MAX_NOT_BEFORE},
        # The format says it; the pattern says the shape to a validator that does not assert
        # formats (JSON Schema 2020-12 leaves that to each validator's settings).
        {"type": "string", "format": "date-time", "pattern": f"^{rfc3339.PATTERN}$"},
        {"type": "null"},
    ],
})]


# A label (dispatcher.domain.labels): the schema says its bounds, so every producer sees them.
_LabelKey = Annotated[str, StringConstraints(pattern=f"^{labels.KEY.pattern}$")]
_LabelValue = Annotated[str, StringConstraints(max_length=labels.MAX_VALUE,
                                               pattern=r"^[^\x00-\x1f\x7f]*$")]

# A tenant (dispatcher.domain.tenants).
_Tenant = Annotated[str, StringConstraints(pattern=f"^{tenants.TENANT.pattern}$")]

# A rate limit's key a job takes tokens of, and how many (dispatcher.domain.rate_limits).
_UseKey = Annotated[str, StringConstraints(max_length=rate_limits.MAX_KEY,
                                           pattern=f"^{rate_limits.KEY.pattern}$")]
_UseCount = Annotated[int, Field(ge=1, le=rate_limits.MAX_AMOUNT, strict=True)]


class DependsOn(BaseModel):
    """One dependency of a job (:mod:`dispatcher.domain.dependencies`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str
    condition: dependencies.Requires = dependencies.Requires.SUCCEEDED
    # Element-wise (an array on an array of its size). None rather than False when absent, so
    # a body leaves it out (exclude_none) and reads as it did before the field existed.
    n_to_n: bool | None = None


class JobMessage(BaseModel):
    """One job as it travels through SQS (schema v1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(description="Always 1 for this schema.")
    job_id: str = Field(description="Idempotency key: a second message with the same id is a "
                        "duplicate and never becomes a second job. 1-128 chars of "
                        "[A-Za-z0-9._:@/+=-], the first a letter or digit; an array job's "
                        f"at most {arrays.MAX_PARENT_ID_LENGTH} (its children's add "
                        ":<index>).",
                        json_schema_extra={"pattern": f"^{JOB_ID.pattern}$",
                                           "minLength": 1, "maxLength": 128})
    kind: str = Field(description="Which handler runs the job: 1-128 chars of [A-Za-z0-9._:-], "
                      "the first a letter or digit.",
                      json_schema_extra={"pattern": f"^{_KIND.pattern}$", "minLength": 1,
                                         "maxLength": 128})
    payload: dict[str, Any] = Field(description="Arguments for the handler (a JSON object): at "
                                    f"most {MAX_PAYLOAD_BYTES} bytes, counted as the UTF-8 bytes "
                                    "of its compact JSON (JSON.stringify's), and nested at most "
                                    f"{MAX_PAYLOAD_DEPTH} deep; larger is refused (\"payload too "
                                    "large: N bytes\").")
    estimated_seconds: float | None = Field(
        default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False,
        description="Producer's estimate in seconds (0, or 0.001 to 1e7); small jobs are "
        "bundled, unknown runs alone.")
    max_attempts: int = Field(default=3, ge=1, le=100, description="Application attempts before "
                              "the job is FAILED (infrastructure stops do not count).")
    timeout_seconds: float | None = Field(
        default=None, ge=MIN_TIMEOUT_SECONDS, le=MAX_SECONDS, allow_inf_nan=False,
        description="Per-job time limit in seconds (0.001 to 1e7).")
    # Resources: a task-level size for the job's task (RunTask overrides). Absent: the task
    # definition's. cpu and memory go together (both or neither) and must be a pair Fargate
    # accepts (dispatcher.domain.fargate); jobs share a task only if they ask for the same.
    cpu: fargate.CpuUnits | None = Field(
        default=None, description="Task CPU units (1024 = 1 vCPU), with memory: one of "
        f"{', '.join(map(str, fargate.CPU_VALUES))}. Valid pairs: {fargate.all_choices()} "
        f"({fargate.DOC_URL}).")
    memory: int | None = Field(
        default=None, ge=fargate.MIN_MEMORY, le=fargate.MAX_MEMORY, validate_default=True,
        description="Task memory in MiB, with cpu (both or neither); a size the cpu value "
        "takes on Fargate.")
    ephemeral_storage: int | None = Field(
        default=None, ge=fargate.MIN_EPHEMERAL_STORAGE_GIB,
        le=fargate.MAX_EPHEMERAL_STORAGE_GIB,
        description="Task ephemeral storage in GiB "
        f"({fargate.MIN_EPHEMERAL_STORAGE_GIB} to {fargate.MAX_EPHEMERAL_STORAGE_GIB}).")
    priority: Priority = Field(
        default=Priority.NORMAL, description="high, normal (default) or low: the queue the "
        "producer sends it to and its share of free task slots.")
    not_before: _NotBefore = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="Do not start before this time: epoch seconds, or an RFC 3339 date-time "
        f"(e.g. {rfc3339.EXAMPLES}; T and Z may be lower case, second 60 is the leap second), "
        f"from 1970-01-01T00:00:00Z to {LATEST_NOT_BEFORE} ({MAX_NOT_BEFORE:.0f}). Stored as "
        "epoch seconds.")
    array_size: int | None = Field(
        default=None, ge=arrays.MIN_ARRAY_SIZE, le=arrays.MAX_ARRAY_SIZE,
        description=f"An array job: this many children ({arrays.MIN_ARRAY_SIZE} to "
        f"{arrays.MAX_ARRAY_SIZE}), each the job <job_id>:<index> running this kind with this "
        "payload; the job itself is their parent and never runs.")
    depends_on: list[str | DependsOn] | None = Field(
        default=None, max_length=dependencies.MAX_DEPENDENCIES,
        description="Jobs this one waits for: job ids, or objects {job_id, condition} with "
        "condition succeeded (the default), finished or failed. An array job's parent stands "
        "for its whole array. When one ends otherwise, this job is CANCELLED with the reason. "
        "An array job may add n_to_n: true, naming an array of its size: its child i then "
        "waits for that array's child i only (and only it is CANCELLED when that one ends "
        "otherwise). No job may be named twice, in either form, nor the job itself (and a "
        "producer that can read the table is refused, at submit, a child of its own array).")
    tolerated_failures: int | str = Field(
        default=0, validate_default=True, description="An array job's children that may "
        "fail with the parent still SUCCEEDED: a count (a JSON integer) of at most "
        "array_size, or a percentage from \"0%\" to \"100%\" such as \"5%\" (rounded down); "
        "without array_size, only 0.")

    labels: dict[_LabelKey, _LabelValue] | None = Field(
        default=None, max_length=labels.MAX_LABELS, description="What to list, act on and "
        f"count the job by: at most {labels.MAX_LABELS} of key (1-{labels.MAX_KEY} chars of "
        f"[A-Za-z0-9._:/-]) to value (text, at most {labels.MAX_VALUE} chars).")

    tenant: _Tenant | None = Field(
        default=None, description="Whom the job's work is for (a team or a customer): "
        f"1-{tenants.MAX_TENANT} chars of [A-Za-z0-9._-]. Its bundles never hold another "
        "tenant's jobs; listed, counted and tagged by it. None: no tenant.")

    uses: dict[_UseKey, _UseCount] | None = Field(
        default=None, max_length=rate_limits.MAX_USES, description="Rate limits it takes "
        "tokens of (`longjobs limits set`): key -> tokens, at most "
        f"{rate_limits.MAX_USES} keys of 1-{rate_limits.MAX_KEY} chars of [A-Za-z0-9._:/-] "
        "(and {tenant} for its tenant's own bucket), 1 to "
        f"{rate_limits.MAX_AMOUNT} tokens each. Its task is launched only once they are "
        "granted; a key with no limit set takes none.")

    schedule: schedules.ScheduleRef | None = Field(
        default=None, description="Set by a schedule's fires (`longjobs schedules`): the "
        "schedule, whose name the job_id carries as schedule/<name>/<fire time>.")

    @field_validator("schema_version", "estimated_seconds", "max_attempts", "timeout_seconds",
                     "cpu", "memory", "ephemeral_storage", "array_size", "tolerated_failures",
                     mode="before")
    @classmethod
    def _json_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A number at the wire is a JSON number, as the schema says: never a boolean, nor a
        string (pydantic would take "3" and true for 3 and 1), but tolerated failures'
        percentage. 3.0 is the integer 3, as JSON Schema counts it."""
        counts = info.field_name == "tolerated_failures"
        if isinstance(value, bool) or (isinstance(value, str) and not counts):
            what = "a count or a percentage such as \"5%\"" if counts else "a JSON number"
            raise ValueError(f"{info.field_name} must be {what}, not {json.dumps(value)}")
        return value

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str) -> str:
        if not JOB_ID.fullmatch(value):
            raise ValueError("job_id must be 1-128 chars of [A-Za-z0-9._:@/+=-]")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if not _KIND.fullmatch(value):
            raise ValueError("kind must be 1-128 chars of [A-Za-z0-9._:-]")
        return value

    @field_validator("estimated_seconds")
    @classmethod
    def _estimate(cls, value: float | None) -> float | None:
        if value is not None and 0 < value < MIN_ESTIMATE_SECONDS:
            raise ValueError(f"a non-zero estimate must be at least {MIN_ESTIMATE_SECONDS} s "
                             "(send 0 for an instant job)")
        return value

    @field_validator("memory")
    @classmethod
    def _size(cls, value: int | None, info: ValidationInfo) -> int | None:
        """cpu and memory as a pair Fargate runs (runs even when memory is absent)."""
        if "cpu" not in info.data:  # cpu itself was invalid: that error says enough
            return value
        problem = fargate.size_problem(info.data["cpu"], value)
        if problem is not None:
            raise PydanticCustomError("fargate_size", "{problem}", {"problem": problem})
        return value

    @field_validator("not_before", mode="before")
    @classmethod
    def _not_before(cls, value: Any) -> Any:
        """An RFC 3339 time (:mod:`dispatcher.domain.rfc3339`) or an aware datetime (from a
        Python caller) becomes epoch seconds; numbers go on to the float checks."""
        if isinstance(value, bool):
            raise ValueError(_NOT_BEFORE_SHAPE)
        if isinstance(value, str):
            try:
                epoch = rfc3339.epoch_seconds(value)
            except rfc3339.NotATime as exc:
                raise ValueError(f"not_before: {exc}") from None
            if epoch < 0:
                raise ValueError(f"not_before {value[:60]} is before 1970-01-01T00:00:00Z: "
                                 "send a later time (a time past starts the job at once)")
            return epoch
        if isinstance(value, datetime):
            if value.tzinfo is None or value.utcoffset() is None:
                raise ValueError(f"not_before {value.isoformat()} has no timezone: add one, "
                                 "e.g. 2026-01-31T02:00:00Z or 2026-01-31T03:00:00+01:00")
            return value.timestamp()
        return value

    @field_validator("not_before")
    @classmethod
    def _latest(cls, value: float | None) -> float | None:
        """Past the latest time: refused as the other bounds are, the time named too (the
        JSON Schema's maximum)."""
        if value is not None and value > MAX_NOT_BEFORE:
            raise PydanticCustomError(
                "not_before_too_late", "Input should be less than or equal to {epoch} ({latest}): "
                "later times are the dispatcher's marks for held jobs; send an earlier time",
                {"latest": LATEST_NOT_BEFORE, "epoch": f"{MAX_NOT_BEFORE:.0f}"})
        return value

    @field_validator("tolerated_failures")
    @classmethod
    def _tolerated(cls, value: int | str, info: ValidationInfo) -> int | str:
        size = info.data.get("array_size")
        count = arrays.tolerated_count(value, size or 0)  # a readable error if unreadable
        if size is None:
            if value != 0:
                raise ValueError("tolerated_failures is for array jobs (with array_size): "
                                 "leave it out, or add array_size")
            return value
        if count > size:
            raise ValueError(f"tolerated_failures {value} is more than the array's {size} "
                             f"children: at most {size} (every child may fail), or a "
                             "percentage such as \"5%\"")
        return value

    @model_validator(mode="after")
    def _parent_id(self) -> JobMessage:
        """An array's id leaves room for its children's ``:<index>`` (whatever else it says:
        a check of the whole message, named by the field it is about)."""
        if self.array_size is not None and len(self.job_id) > arrays.MAX_PARENT_ID_LENGTH:
            raise ValueError(f"job_id: an array job's job_id has at most "
                             f"{arrays.MAX_PARENT_ID_LENGTH} characters (its children's ids "
                             "add :<index>)")
        return self

    @model_validator(mode="after")
    def _schedule_id(self) -> JobMessage:
        """A fire's job is named by its schedule and its time (dispatcher.domain.schedules)."""
        if self.schedule is not None:
            problem = schedules.id_problem(self.schedule.name, self.job_id)
            if problem:
                raise ValueError(problem)
        return self

    @field_validator("depends_on")
    @classmethod
    def _depends_on(cls, value: list[str | DependsOn] | None,
                    info: ValidationInfo) -> list[str | DependsOn] | None:
        if not value:
            return None
        ids = [d if isinstance(d, str) else d.job_id for d in value]
        bad = next((i for i in ids if not JOB_ID.fullmatch(i)), None)
        if bad is not None:
            raise ValueError(f"depends_on: {bad[:140]!r} is not a job id")
        if info.data.get("job_id") in ids:
            raise ValueError("a job cannot depend on itself")
        if len(set(ids)) != len(ids):
            raise ValueError("depends_on names a job twice")
        element_wise = next((d.job_id for d in value if isinstance(d, DependsOn) and d.n_to_n),
                            None)
        if element_wise is not None and info.data.get("array_size") is None:
            raise ValueError(f"an n_to_n dependency (on {element_wise!r}) is for "
                             "array jobs: its child i waits for child i of that array; add "
                             "array_size, or drop n_to_n to wait for the whole array")
        return value

    @property
    def dependencies(self) -> list[dependencies.Dependency]:
        return [dependencies.Dependency(d) if isinstance(d, str) else
                dependencies.Dependency(d.job_id, d.condition, bool(d.n_to_n))
                for d in self.depends_on or []]

    @property
    def tolerated(self) -> int:
        """How many of its children may fail (0 for a job that is no array)."""
        return arrays.tolerated_count(self.tolerated_failures, self.array_size or 0)

    @property
    def resources(self) -> Resources:
        """The task size the job asks for (``Resources()``: the task definition's)."""
        return Resources(cpu=self.cpu, memory=self.memory,
                         ephemeral_storage=self.ephemeral_storage)

    @field_validator("payload")
    @classmethod
    def _payload(cls, value: dict[str, Any]) -> dict[str, Any]:
        payloads.check(value)
        return value

    def payload_json(self) -> str:
        """The payload exactly as the table stores it (see :func:`compact_json`)."""
        return compact_json(self.payload)

    @cached_property
    def payload_bytes(self) -> int:
        """Stored size (its UTF-8 bytes), computed once: validation, bundling and transaction
        packing use it."""
        return len(self.payload_json().encode())


# Characters SQS refuses in a message body, though JSON may carry them raw: the two
# non-characters at the end of the BMP (the allowed ones: #x9 | #xA | #xD | #x20 to #xD7FF |
# #xE000 to #xFFFD | #x10000 to #x10FFFF; JSON escapes the control characters and
# :func:`compact_json` the surrogates).
# https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SendMessage.html
_SQS_REFUSED = {0xFFFE: "\\ufffe", 0xFFFF: "\\uffff"}


def body_json(msg: JobMessage, leave_out: set[str] | None = None) -> str:
    """The message as an SQS body: its fields but those unset and ``leave_out``, in
    :func:`compact_json` (its payload measured so), with the characters SQS refuses escaped."""
    # Python's mode: its JSON mode writes a surrogate in a payload's key as U+FFFD (the
    # enums are strings, so json writes them as their values).
    fields = msg.model_dump(exclude_none=True, exclude=leave_out or None)
    return compact_json(fields).translate(_SQS_REFUSED)


def parse(body: str, allowed_kinds: tuple[str, ...] = ()) -> JobMessage:
    """Turn a raw SQS body into a JobMessage or raise InvalidMessage with a readable reason."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        raise InvalidMessage(f"not JSON: {exc.msg} at position {exc.pos}") from None
    except RecursionError:
        raise InvalidMessage("JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise InvalidMessage(f"not acceptable JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise InvalidMessage(f"not a JSON object but {type(data).__name__}")
    try:
        msg = JobMessage.model_validate(data)
    except ValidationError as exc:
        # Keep the job id if one is readable, so the REJECTED record can be found by it.
        job_id = data.get("job_id")
        readable = job_id if isinstance(job_id, str) and JOB_ID.fullmatch(job_id) else None
        raise InvalidMessage(message_errors.describe(exc), job_id=readable) from None
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
