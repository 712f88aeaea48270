"""moto's server with its per-request costs removed (``dispatcher.testing.moto_speed``)
answers exactly what moto's own code answers: the same bytes for DynamoDB's answers holding
values of every type, the same projections of an item, and the same services found for a
request."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from moto import backends
from moto.core.serialize import BaseJSONSerializer, XFormedAttributePicker, get_serializer_class
from moto.core.utils import get_service_model
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.responses import DynamoResult

from dispatcher.testing import moto_speed
from dispatcher.testing.moto import MotoEndpoint

# One item holding every type of attribute value, nested where DynamoDB nests them.
EVERY_TYPE: dict[str, Any] = {
    "pk": {"S": "JOB#1"}, "empty": {"S": ""}, "n": {"N": "12.5"}, "neg": {"N": "-1E+3"},
    "ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2.5"]}, "null": {"NULL": True},
    "yes": {"BOOL": True}, "no": {"BOOL": False}, "unicode": {"S": "épée ✓"},
    "m": {"M": {"a": {"S": "x"}, "l": {"L": [{"N": "1"}, {"M": {}}, {"L": []},
                                            {"NULL": True}, {"SS": ["z"]}]}}},
    "empty_m": {"M": {}}, "empty_l": {"L": []},
}
# Values moto's own path serializes (binary): the fast path must hand them over whole.
BINARY: dict[str, Any] = {
    "b": {"B": base64.b64encode(b"\x00\x01")}, "bs": {"BS": [b"\x02"]},
    "nested": {"M": {"b": {"B": b"\x03"}}}, "in_list": {"L": [{"S": "s"}, {"B": b"\x04"}]},
}


def answers() -> Iterator[tuple[str, dict[str, Any]]]:
    for item in (EVERY_TYPE, BINARY, {**EVERY_TYPE, **BINARY}):
        yield "GetItem", {"Item": item}
        yield "Query", {"Items": [item, EVERY_TYPE], "Count": 2, "ScannedCount": 2,
                        "LastEvaluatedKey": {"pk": {"S": "JOB#1"}}}
        yield "BatchGetItem", {"Responses": {"t": [item, item]}, "UnprocessedKeys": {}}
        yield "UpdateItem", {"Attributes": item}


def serialize(operation: str, result: dict[str, Any]) -> tuple[Any, ...]:
    """What moto's server writes for ``result`` (its DynamoDB handler's path)."""
    model = get_service_model("dynamodb")
    op = model.operation_model(operation)
    serializer = get_serializer_class("dynamodb", "json")(
        operation_model=op, value_picker=XFormedAttributePicker(response_transformers={}))
    out = serializer.serialize(DynamoResult(result).result)
    return out["status_code"], out["headers"], out["body"]


@pytest.mark.parametrize(("operation", "result"), list(answers()))
def test_dynamodb_answers_are_the_bytes_moto_writes(
        operation: str, result: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    moto_speed.patch_moto_speed()
    written = serialize(operation, result)
    monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure",
                        moto_speed.unpatched("_serialize_type_structure"))
    assert written == serialize(operation, result)
    assert json.loads(written[2]).keys() == result.keys()


def test_the_fast_path_writes_the_plain_values_itself() -> None:
    """It is taken (not falling back for every value): the plain item is its own work."""
    written = moto_speed._attribute_value({"M": EVERY_TYPE})
    assert written["M"]["m"]["M"]["l"]["L"][3] == {"NULL": True}
    with pytest.raises(moto_speed._Fallback):
        moto_speed._attribute_value(BINARY["nested"])
    item = Item(DynamoType({"S": "JOB#1"}), None, EVERY_TYPE)
    assert set(Item.project(item, PROJECTIONS[0]).attrs) == {"pk", "n", "ss", "m"}


# Projections as a GSI (top-level names, missing ones) and ProjectionExpressions (nested paths,
# list items, paths that overlap in either order) ask for them.
PROJECTIONS = [
    [["pk"], ["n"], ["missing"], ["ss"], ["m"]],
    [["m", "a"], ["m"]], [["m"], ["m", "a"]], [["m", "l[1]"], ["m", "l[0]"]],
    [["m", "l[4]", "SS"]], [["empty_l[0]"]], [],
]


@pytest.mark.parametrize("expressions", PROJECTIONS)
def test_a_projected_item_is_the_one_moto_projects(expressions: list[list[str]]) -> None:
    moto_speed.patch_moto_speed()
    own = moto_speed.unpatched("project")
    item = Item(DynamoType({"S": "JOB#1"}), None, EVERY_TYPE)
    before = item.to_json()
    fast = Item.project(item, expressions)
    # A set (SS, NS) has no order: moto's own projection lists it in its set's hash order.
    assert _sets_sorted(fast.to_json()) == _sets_sorted(own(item, expressions).to_json())
    assert item.to_json() == before  # the item projected is left as it was
    assert (fast.hash_key, fast.range_key) == (item.hash_key, item.range_key)


def _sets_sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: sorted(v) if k in ("SS", "NS") else _sets_sorted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sets_sorted(v) for v in value]
    return value


def test_the_services_are_listed_once_and_as_moto_lists_them(moto_server: MotoEndpoint) -> None:
    listing = moto_speed.unpatched("list_of_moto_modules")
    assert backends.list_of_moto_modules() == tuple(listing())
    assert backends.list_of_moto_modules() is backends.list_of_moto_modules()
    assert "dynamodb" in backends.list_of_moto_modules()


def test_both_are_installed_by_start_moto(moto_server: MotoEndpoint) -> None:
    """A moto upgrade that renames either fails here: look at both again."""
    assert BaseJSONSerializer._serialize_type_structure is not moto_speed.unpatched(
        "_serialize_type_structure")
    assert backends.list_of_moto_modules is not moto_speed.unpatched("list_of_moto_modules")
    assert Item.project is not moto_speed.unpatched("project")
