"""What a payload may hold: JSON the table can store and every other language can read."""

from __future__ import annotations

import math
from typing import Any

# Nesting deeper than this is refused (json and the encoder recurse per level).
MAX_DEPTH = 64

_JSON_SCALARS = (str, int, float, bool, type(None))


def check(value: Any) -> None:
    """Refuse what the table cannot store as JSON: values of other types (a producer's
    datetime, Decimal, set or bytes), non-finite numbers anywhere, and nesting deeper than
    MAX_DEPTH. Iterative, so hostile depth cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(value, "payload", 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where}: {item} is not a finite number (NaN and Infinity are "
                             "not JSON)")
        if isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels")
            if isinstance(item, dict):
                bad = next((k for k in item if not isinstance(k, _JSON_SCALARS)), None)
                if bad is not None:
                    raise ValueError(f"{where}: a key of type {type(bad).__name__} is not JSON")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            stack.extend((v, f"{where}.{k}", depth + 1) for k, v in pairs)
        elif not isinstance(item, _JSON_SCALARS):
            raise ValueError(f"{where}: a {type(item).__name__} is not JSON (send a string, "
                             "number, boolean, null, list or object)")
