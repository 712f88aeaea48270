"""The job table's DynamoDB stream, as the publisher reads it: each stream record (a Lambda
event's ``Records``, or ``GetRecords``' answer) becomes a
:class:`~dispatcher.domain.job_events.TableChange` with plain attribute values.

The table's stream view is NEW_AND_OLD_IMAGES: each record carries the item before and after
the write. https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Streams.html
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from dispatcher.domain.job_events import TableChange


def value(typed: Mapping[str, Any]) -> Any:
    """One attribute value of DynamoDB's JSON (``{"S": ...}``, ``{"N": ...}``, ...). boto3's
    own TypeDeserializer would import boto3 into the function (s3transfer with it: see
    dispatcher.aws.clients); the table holds only these types."""
    (kind, raw), = typed.items()
    if kind == "S" or kind == "B":
        return raw
    if kind == "N":
        number = Decimal(str(raw))
        return int(number) if number == number.to_integral_value() else float(number)
    if kind == "BOOL":
        return bool(raw)
    if kind == "NULL":
        return None
    if kind == "L":
        return [value(v) for v in raw]
    if kind == "M":
        return {k: value(v) for k, v in raw.items()}
    if kind in ("SS", "BS"):
        return set(raw)
    if kind == "NS":
        return {value({"N": v}) for v in raw}
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def image(typed: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if typed is None else {k: value(v) for k, v in typed.items()}


def changes(records: Iterable[Mapping[str, Any]]) -> list[TableChange]:
    """The stream records as changes, in order (a record without images, as a KEYS_ONLY
    stream would send, has none to tell)."""
    out = []
    for rec in records:
        body = rec.get("dynamodb", {})
        out.append(TableChange(str(body.get("SequenceNumber", "")),
                               image(body.get("OldImage")), image(body.get("NewImage"))))
    return out


def table_arn(records: Iterable[Mapping[str, Any]]) -> str | None:
    """The job table's ARN, from a record's ``eventSourceARN``
    (``arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>``)."""
    for rec in records:
        source = str(rec.get("eventSourceARN", ""))
        if "/stream/" in source:
            return source.split("/stream/", 1)[0]
    return None
