"""Three costs of moto's server (5.2) that every test on it pays, removed without changing a
byte of what it answers.

- Each request looks for its service among moto's packages by listing moto's folder and
  stat-ing every entry (``moto.backends.list_of_moto_modules``, ~200 system calls a request):
  the folder does not change while the process runs, so the list is read once.
- Each DynamoDB answer is serialized by walking botocore's output shapes, and every attribute
  value of every item is a structure of ten members, each looked up through moto's attribute
  aliases: a Query of 100 items cost tens of milliseconds there. :func:`_attribute_value` writes
  an ``AttributeValue`` as that walk would (the same rules, member by member, for S, N, SS, NS,
  M, L, NULL and BOOL); anything else (binary values, a member it does not know, a response
  with attribute transformers) takes moto's own path.
- Projecting an item (a GSI's INCLUDE projection on every item a query returns, a
  ProjectionExpression) converted the whole item to plain values once per projected attribute:
  the job table's index projects ~40. :func:`_project` converts it once and copies each
  projected part out of that one conversion, which nothing else sees or changes.

``tests/integration/test_moto_speed.py`` compares each with moto's own code.
"""

from __future__ import annotations

import copy
import functools
from enum import Enum
from typing import Any

__all__ = ["patch_moto_speed"]

_PATCHED: dict[str, Any] = {}  # moto's own functions, by name, once patched


class _Fallback(Exception):
    """The value is not one :func:`_attribute_value` writes: moto's path serializes it."""


def _string(value: Any) -> Any:
    # moto's BaseJSONSerializer._serialize_type_string, verbatim in effect.
    if isinstance(value, Enum):
        value = value.value
    return str(value) if value not in [None, {}, []] else value


def _attribute_value(value: Any) -> dict[str, Any]:
    """One AttributeValue as moto's JSON serializer writes it (members in the shape's order,
    a member whose value is None left out), or :class:`_Fallback`."""
    if not isinstance(value, dict):
        raise _Fallback
    out: dict[str, Any] = {}
    for kind, v in value.items():
        if v is None or kind not in _MEMBER_ORDER:
            raise _Fallback  # moto would skip or ignore it: let moto do so
        if kind in ("S", "N"):
            out[kind] = _string(v)
        elif kind in ("SS", "NS"):
            out[kind] = [_string(x) for x in v]
        elif kind == "M":
            out[kind] = {k: _attribute_value(x) for k, x in v.items() if x is not None}
        elif kind == "L":
            out[kind] = [None if x is None else _attribute_value(x) for x in v]
        else:  # NULL, BOOL: booleans, written as they are
            out[kind] = v
    if len(out) > 1:  # in the shape's member order, as the walk writes them
        out = {k: out[k] for k in sorted(out, key=_MEMBER_ORDER.index)}
    return out


# AttributeValue's members as botocore's model orders them, less the binary ones (B, BS).
_MEMBER_ORDER = ("S", "N", "SS", "NS", "M", "L", "NULL", "BOOL")


def _project(self: Any, projection_expressions: list[list[str]]) -> Any:
    """moto's ``Item.project`` with the item converted once (see the module)."""
    from botocore.utils import merge_dicts
    from moto.dynamodb.models.dynamo_type import Item, serializer
    from moto.dynamodb.models.utilities import find_nested_key

    result: dict[str, Any] = {}
    if projection_expressions:
        plain = self.to_regular_json()  # moto's made one of these per expression
        for expr in projection_expressions:
            # find_nested_key only reads ``plain``; the copy keeps what merge_dicts writes
            # into ``result`` apart from it, as a fresh conversion each time did.
            merge_dicts(result, copy.deepcopy(find_nested_key(expr, plain)))
    return Item(hash_key=self.hash_key, range_key=self.range_key,
                attrs=dict(serializer.serialize(result)["M"]))


def patch_moto_speed() -> None:
    """Install both (idempotent; moto's own functions are kept in ``_PATCHED``)."""
    from moto import backends
    from moto.core.serialize import BaseJSONSerializer
    from moto.dynamodb.models.dynamo_type import Item

    if "list_of_moto_modules" not in _PATCHED:
        listing = backends.list_of_moto_modules
        _PATCHED["list_of_moto_modules"] = listing
        backends.list_of_moto_modules = functools.cache(lambda: tuple(listing()))

    if "_serialize_type_structure" not in _PATCHED:
        walk = BaseJSONSerializer._serialize_type_structure
        _PATCHED["_serialize_type_structure"] = walk

        def structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
            if (key and shape.name == "AttributeValue"
                    and self.service_model.service_name == "dynamodb"
                    and not getattr(self._value_picker, "response_transformers", None)):
                try:
                    written = _attribute_value(value)
                except _Fallback:
                    pass
                else:
                    self._default_serialize(serialized, written, shape, key)
                    return
            walk(self, serialized, value, shape, key)

        BaseJSONSerializer._serialize_type_structure = structure  # type: ignore[method-assign]

    if "project" not in _PATCHED:
        _PATCHED["project"] = Item.project
        Item.project = _project  # type: ignore[method-assign]


def unpatched(name: str) -> Any:
    """moto's own function ``name`` as it was before :func:`patch_moto_speed` (for tests)."""
    return _PATCHED[name]
