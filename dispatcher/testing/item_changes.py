"""What a recorded DynamoDB call wrote and read, for the capacity model
(:mod:`dispatcher.testing.capacity`): the proxy (:class:`dispatcher.testing.proxy.AwsProxy`
with ``capture_items``) reads each written item from moto just before and just after the write
and keeps both images, and keeps the sizes of what each read returned.

A request names its items (``Key``, or ``Item`` for a put) but not what they were before, and
an index entry's cost depends on both: a write that changes an index key is a delete and a put
in the index; one that changes no projected attribute writes nothing there. Items are in
DynamoDB's JSON (``{"S": ...}``, ``{"N": ...}``, ...), as the wire carries them. The images
are read outside the write: a write to the same item by another thread in between would blur
them (the bench writes an item from one place at a time).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WRITES = frozenset({"dynamodb.PutItem", "dynamodb.UpdateItem", "dynamodb.DeleteItem",
                    "dynamodb.TransactWriteItems", "dynamodb.BatchWriteItem"})
READS = frozenset({"dynamodb.GetItem", "dynamodb.BatchGetItem", "dynamodb.Query",
                   "dynamodb.Scan"})
KEY_ATTRIBUTES = ("pk",)  # the job table's primary key

Item = dict[str, Any]  # one item in DynamoDB's JSON


@dataclass(frozen=True)
class ItemChange:
    """One item a write named: as it was before and after (None: absent), whether the write
    was part of a transaction, and whether it was done (a refused conditional write is
    charged for the item but changes nothing)."""

    table: str
    before: Item | None
    after: Item | None
    transactional: bool = False
    done: bool = True
    check_only: bool = False  # a transaction's ConditionCheck


@dataclass(frozen=True)
class ReadSizes:
    """What one read returned: each item's size in bytes, how many items it read before its
    filter (``scanned``), whether strongly consistent, and whether each item is charged on its
    own (GetItem, BatchGetItem) or the answer as a whole (Query, Scan)."""

    sizes: tuple[int, ...]
    scanned: int
    consistent: bool
    per_item: bool


def _number_bytes(text: str) -> int:
    digits = text.lstrip("-").replace(".", "").lstrip("0") or "0"
    return math.ceil(len(digits) / 2) + 1


def value_bytes(value: Item) -> int:
    """An attribute value's size as DynamoDB counts it.
    https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html
    """
    (kind, v), = value.items()
    if kind == "S":
        return len(str(v).encode())
    if kind == "N":
        return _number_bytes(str(v))
    if kind == "B":
        return len(str(v)) * 3 // 4  # base64 on the wire
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + value_bytes(e) for e in v)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + value_bytes(e) for k, e in v.items())
    if kind in ("SS", "BS"):
        return sum(len(str(e).encode()) for e in v)
    if kind == "NS":
        return sum(_number_bytes(str(e)) for e in v)
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_bytes(item: Item) -> int:
    """An item's size: each attribute's name and value."""
    return sum(len(name.encode()) + value_bytes(value) for name, value in item.items())


def _key(item: Item) -> Item:
    return {k: item[k] for k in KEY_ATTRIBUTES if k in item}


def named_items(operation: str, body: bytes) -> list[tuple[str, Item, bool, bool]]:
    """(table, key, transactional, check only) of each item a write request names."""
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        return []
    if operation == "dynamodb.TransactWriteItems":
        out = []
        for action in request.get("TransactItems", []):
            for kind, spec in action.items():
                key = _key(spec["Item"]) if kind == "Put" else spec["Key"]
                out.append((spec["TableName"], key, True, kind == "ConditionCheck"))
        return out
    if operation == "dynamodb.BatchWriteItem":
        return [(table, _key(r["PutRequest"]["Item"]) if "PutRequest" in r
                 else r["DeleteRequest"]["Key"], False, False)
                for table, requests in request.get("RequestItems", {}).items()
                for r in requests]
    key = _key(request["Item"]) if operation == "dynamodb.PutItem" else request.get("Key")
    return [(request.get("TableName", ""), key, False, False)] if key else []


def changes(operation: str, body: bytes, write: Callable[[], bool],
            get: Callable[[str, Item], Item | None]) -> tuple[ItemChange, ...]:
    """Read each named item (``get``), do the write (``write``: whether it succeeded), and read
    them again."""
    named = named_items(operation, body)
    before = [get(table, key) for table, key, _, _ in named]
    done = write()
    after = [get(table, key) if done else old
             for (table, key, _, _), old in zip(named, before, strict=True)]
    return tuple(ItemChange(table, b, a, tx, done, check)
                 for (table, _, tx, check), b, a in zip(named, before, after, strict=True))


def read_sizes(operation: str, body: bytes, response: bytes) -> ReadSizes | None:
    """The sizes of what a read returned (None for a failed or unreadable one)."""
    try:
        request, answer = json.loads(body or b"{}"), json.loads(response or b"{}")
    except ValueError:
        return None
    if operation == "dynamodb.GetItem":
        item = answer.get("Item")
        return ReadSizes((item_bytes(item) if item else 0,), 1,
                         bool(request.get("ConsistentRead")), True)
    if operation == "dynamodb.BatchGetItem":
        items = [i for found in answer.get("Responses", {}).values() for i in found]
        consistent = any(spec.get("ConsistentRead")
                         for spec in request.get("RequestItems", {}).values())
        return ReadSizes(tuple(item_bytes(i) for i in items), len(items), consistent, True)
    items = answer.get("Items", [])
    return ReadSizes(tuple(item_bytes(i) for i in items),
                     int(answer.get("ScannedCount", len(items))),
                     bool(request.get("ConsistentRead")), False)
