"""The JSON Schema of job messages that ``longjobs schema`` publishes for producers in other
languages: the message model's own schema (:class:`dispatcher.domain.message.JobMessage`) with
its dialect, its id, and what one field asks of another, in the words JSON Schema has
(``tests/twins/test_schema_agrees.py`` finds a validator that is not ours agreeing with the
dispatcher on drawn messages)."""

from __future__ import annotations

from typing import Any

from dispatcher.domain import arrays, fargate
from dispatcher.domain.message import (
    JOB_ID,
    MAX_SECONDS,
    MIN_ESTIMATE_SECONDS,
    JobMessage,
)

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    schema = JobMessage.model_json_schema()
    # The dialect its keywords are ($defs, if/then: 2020-12): a validator left to
    # its default draft would judge messages by other rules.
    schema = {"$schema": SCHEMA_DIALECT, **schema}
    schema["$id"] = "https://longjobs.dev/schema/job-message-v1.json"
    schema["title"] = "longjobs job message v1"
    schema["allOf"] = cross_field_rules()
    return schema


def cross_field_rules() -> list[dict[str, Any]]:
    """What one field asks of another, as JSON Schema says it (``if``/``then``): the memory
    each cpu value takes on Fargate; failures tolerated (but none) only by an array; an
    element-wise dependency only of an array; the dependencies' ids. (What it cannot say, the
    descriptions do: a dependency named twice in two forms, failures tolerated past the
    array's size, an array's id too long for its children's.)"""
    # cpu and memory go together (a null one is absent, as for the dispatcher), as a pair
    # Fargate runs.
    rules: list[dict[str, Any]] = [
        {"if": _fields({one: True}, required=True), "then": _fields({other: True}, required=True)}
        for one, other in (("cpu", "memory"), ("memory", "cpu"))]
    rules += [
        {"if": _fields({"cpu": {"const": cpu}}, required=True),
         "then": _fields({"memory": {"enum": list(sizes)}})}
        for cpu, sizes in fargate.CPU_MEMORY.items()]
    rules.append({"if": {**_fields({"tolerated_failures": True}, required=True),
                         "not": _fields({"tolerated_failures": {"const": 0}})},
                  "then": _fields({"array_size": True}, required=True)})
    rules.append({"if": _fields({"depends_on": {"type": "array", "contains": _fields(
                      {"n_to_n": {"const": True}}, required=True)}}, required=True),
                  "then": _fields({"array_size": True}, required=True)})
    job_id = {"type": "string", "pattern": f"^{JOB_ID.pattern}$"}
    rules.append({"type": "object", "properties": {
        # 0 (an instant job) or at least the smallest estimate a job may have.
        "estimated_seconds": {"anyOf": [{"type": "null"}, {"const": 0}, {
            "type": "number", "minimum": MIN_ESTIMATE_SECONDS, "maximum": MAX_SECONDS}]},
        "depends_on": {"anyOf": [{"type": "null"}, {"type": "array", "uniqueItems": True,
                                                     "items": {"anyOf": [
                                                         job_id, _fields({"job_id": job_id})]}}]},
        "tolerated_failures": {"anyOf": [
            {"type": "integer", "minimum": 0},
            {"type": "string", "pattern": f"^{arrays.TOLERATED_PERCENTAGE}$"}]}}})
    return rules


def _fields(properties: dict[str, Any], *, required: bool = False) -> dict[str, Any]:
    """An object subschema on these fields (all of them required, if ``required``: present
    and not null, since the dispatcher takes a null field for an absent one), typed and naming
    what it requires among its properties, as a validator in strict mode asks (ajv's
    strictTypes and strictRequired: https://ajv.js.org/strict-mode.html)."""
    if not required:
        return {"type": "object", "properties": properties}
    present = {name: {"not": {"type": "null"}} if rule is True else rule
               for name, rule in properties.items()}
    return {"type": "object", "properties": present, "required": list(properties)}
