"""The table twin made lean for the model's 200,000 jobs (see :func:`lean_table`)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

from dispatcher.ports.table import Record
from dispatcher.testing import memory_table


@contextlib.contextmanager
def lean_table() -> Iterator[None]:
    """The table twin without DynamoDB's item-size checks, copying items through their
    ``__dict__``: the size checks and ``Record.present`` were half of the model's CPU at
    200,000 jobs, and the batch's items are a few hundred bytes, far below 400 KB. Conditions,
    transactions and the values stored are the twin's own."""

    def clone(rec: Record | None) -> Record | None:
        if rec is None:
            return None
        values: dict[str, Any] = {k: v if isinstance(v, str | int | float) else copy.deepcopy(v)
                                  for k, v in vars(rec).items() if v is not None}
        return Record(**values)

    def copy_in(rec: Record) -> Record:
        values: dict[str, Any] = {k: memory_table._store_value(k, v)
                                  for k, v in vars(rec).items() if v is not None}
        return Record(**values)

    names = ("_check_item", "_item_bytes", "_clone", "_copy_in")
    saved = {n: getattr(memory_table, n) for n in names}
    lean = {"_check_item": lambda rec, size: None, "_item_bytes": lambda rec: 0, "_clone": clone,
            "_copy_in": copy_in}
    for n in names:
        setattr(memory_table, n, lean[n])
    try:
        yield
    finally:
        for n in names:
            setattr(memory_table, n, saved[n])
