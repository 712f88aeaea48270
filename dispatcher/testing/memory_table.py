"""An in-memory twin of the job table: the table port's primitives with DynamoDB's semantics.

Conditions as DynamoDB evaluates them (a missing attribute, or one of another type, compares
false), Update that creates a missing item and returns the new one, all-or-nothing transactions
with per-item cancellation reasons, the status index ordered by ``status_at`` (ties by ``pk``),
holding only the attributes it projects. Values are copied in and out (JSON attributes through
the adapter's compact JSON, as DynamoDB stores them), so a caller cannot change stored state by
mutating what it passed or got. DynamoDB's limits are enforced as the adapter reports them: an
item over 400 KB (JSON attributes counted as their stored compact string), a number attribute
outside DynamoDB's range (or NaN/Infinity) -> :class:`InvalidTransaction`, before any condition
is evaluated, and nothing is written; so is a transaction whose items add up to over 4 MB (which
moto lets through). A transaction's ClientRequestToken is honoured as DynamoDB does (moto
ignores it): the same ops with the same token within 10 minutes of the first are done once.
Thread-safe. ``tests/contract`` runs the same suite on this and on the DynamoDB adapter.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import math
import pickle
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from dispatcher.domain.sizes import compact_json, json_bytes
from dispatcher.ports.table import (
    INDEX_ATTRIBUTES,
    INDEX_KEYS,
    JSON_ATTRIBUTES,
    MAX_TRANSACTION_BYTES,
    Absent,
    Action,
    Add,
    And,
    Append,
    Check,
    Condition,
    ConditionFailed,
    Delete,
    Eq,
    Exists,
    Ge,
    Gt,
    Has,
    In,
    InvalidTransaction,
    Lacks,
    Le,
    Lt,
    Op,
    Or,
    Put,
    Record,
    Remove,
    Set,
    Table,
    TableUnavailable,
    TransactionCancelled,
    Update,
)

# DynamoDB's limits. An item: at most 400 KB, attribute names included.
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html
# A number: 0, or a magnitude from 1E-130 to 9.9999999999999999999999999999999999999E+125.
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html
MAX_ITEM_BYTES = 400 * 1024
# A ClientRequestToken is valid for 10 minutes after its first request completes.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
TOKEN_SECONDS = 600.0
MIN_NUMBER = 1e-130
MAX_NUMBER = 9.9999999999999999999999999999999999999e125


def _check_number(attr: str, value: float) -> None:
    if not math.isfinite(value):
        raise InvalidTransaction(f"{attr}: {value} cannot be converted to a numeric value")
    if value != 0 and not MIN_NUMBER <= abs(value) <= MAX_NUMBER:
        raise InvalidTransaction(f"{attr}: number {value} is outside DynamoDB's range")


def _value_bytes(attr: str, value: Any) -> int:
    """A stored value's size as DynamoDB counts it (numbers: an upper estimate)."""
    if attr in JSON_ATTRIBUTES:
        return json_bytes(value)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, list):
        return 3 + sum(1 + _value_bytes("", v) for v in value)
    return len(str(value)) if isinstance(value, int | float) else 1


def _attribute_bytes(attr: str, value: Any) -> int:
    """An attribute's share of its item's size: its name and its value (0 if not set)."""
    return 0 if value is None else len(attr.encode()) + _value_bytes(attr, value)


def _item_bytes(rec: Record) -> int:
    return sum(_attribute_bytes(k, v) for k, v in rec.present().items())


def _check_item(rec: Record, size: int) -> None:
    if size > MAX_ITEM_BYTES:
        raise InvalidTransaction(f"{rec.pk}: item size has exceeded the maximum allowed size "
                                 f"({size} > {MAX_ITEM_BYTES} bytes)")


def _content(ops: list[Op]) -> bytes:
    """The ops' content as bytes: their pickle without its memo, so that equal ops give equal
    bytes whichever of their values are shared objects. A third faster than their repr
    (dataclasses' repr is Python code walking each record: 0.6 ms against 0.9 ms for 100 jobs'
    puts); the twin computes it for every transaction, to tell a token's retry from its
    reuse."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # no memo: shared values written out in full, as repr would
    pickler.dump(ops)
    return out.getvalue()


def _copied(value: Any) -> Any:
    """A deep copy of a stored value: what ``copy.deepcopy`` gives for the JSON-shaped values
    the table holds (dicts, lists, strings, numbers), walked directly (deepcopy's memo and
    dispatch cost several times more, and the twin copies every item it hands out)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list):
        return [_copied(v) for v in value]
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return copy.deepcopy(value)


def _store_value(attr: str, value: Any) -> Any:
    if value is None:
        return None
    if attr in JSON_ATTRIBUTES:
        try:
            return json.loads(compact_json(value))
        except (TypeError, ValueError) as exc:  # the adapter refuses them alike
            raise InvalidTransaction(f"{attr}: {exc}") from None
    if isinstance(value, bool | int | float) and not isinstance(value, bool):
        _check_number(attr, value)
        return value
    if isinstance(value, str):
        return str(value)  # a StrEnum is stored as its plain value
    return copy.deepcopy(value)


def _kind(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "N"
    if isinstance(value, str):
        return "S"
    return type(value).__name__


def _compare(stored: Any, value: Any) -> tuple[Any, Any] | None:
    if stored is None or value is None or _kind(stored) != _kind(value):
        return None
    return stored, value


def evaluate(cond: Condition | None, rec: Record | None) -> bool:
    """Whether ``cond`` holds for the item ``rec`` (None: it does not exist)."""
    if cond is None:
        return True
    if isinstance(cond, Exists):
        return rec is not None
    if isinstance(cond, Absent):
        return rec is None
    if isinstance(cond, And):
        return all(evaluate(c, rec) for c in cond.conds)
    if isinstance(cond, Or):
        return any(evaluate(c, rec) for c in cond.conds)
    stored = getattr(rec, cond.attr) if rec is not None else None  # type: ignore[attr-defined]
    if isinstance(cond, Has):
        return stored is not None
    if isinstance(cond, Lacks):
        return stored is None
    if isinstance(cond, In):
        return any(_compare(stored, v) is not None and stored == v for v in cond.values)
    pair = _compare(stored, cond.value)  # type: ignore[attr-defined]
    if pair is None:
        return False
    a, b = pair
    if isinstance(cond, Eq):
        return bool(a == b)
    if isinstance(cond, Lt):
        return bool(a < b)
    if isinstance(cond, Le):
        return bool(a <= b)
    if isinstance(cond, Gt):
        return bool(a > b)
    if isinstance(cond, Ge):
        return bool(a >= b)
    raise TypeError(f"unknown condition {cond!r}")


def _apply(rec: Record, actions: tuple[Action, ...]) -> Record:
    # A new record sharing the values it does not change with ``rec``: no stored value is
    # changed in place (each action sets a new one), and every item handed out is a copy.
    out = Record(**rec.present())
    for a in actions:
        if isinstance(a, Set):
            setattr(out, a.attr, _store_value(a.attr, a.value))
        elif isinstance(a, Add):
            _check_number(a.attr, a.number)
            total = (getattr(out, a.attr) or 0) + a.number
            _check_number(a.attr, total)
            setattr(out, a.attr, total)
        elif isinstance(a, Remove):
            setattr(out, a.attr, None)
        elif isinstance(a, Append):
            setattr(out, a.attr, list(getattr(out, a.attr) or []) + _copied(list(a.values)))
        else:
            raise TypeError(f"unknown action {a!r}")
    return out


_PROJECTED = frozenset(INDEX_KEYS) | frozenset(INDEX_ATTRIBUTES)


def _clone(rec: Record | None) -> Record | None:
    """A copy sharing nothing mutable with ``rec``: what ``copy.deepcopy`` gives, copying
    only the values that can change (lists, JSON): a bulk action copies items by the
    thousand, and deep-copying every string and number of each made that slow."""
    return None if rec is None else _copy_record(rec)


def _copy_record(rec: Record) -> Record:
    return Record(**{k: _copied(v) for k, v in rec.present().items()})


def _projected(rec: Record) -> Record:
    """The index's copy of an item: its keys and the attributes the index projects."""
    return Record(**{k: _copied(v) for k, v in rec.present().items() if k in _PROJECTED})


def _index_order(rec: Record) -> tuple[str, str]:
    # The index's order: (status_at, pk), as DynamoDB's keys.
    return rec.status_at or "", rec.pk


def _copy_in(record: Record) -> Record:
    return Record(**{k: _store_value(k, v) for k, v in record.present().items()})


class MemoryTable(Table):
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._items: dict[str, Record] = {}
        self._lock = threading.RLock()
        self._clock = clock
        self._tokens: dict[str, tuple[str, float]] = {}  # token: digest of its ops, done at
        self._watchers: list[tuple[Callable[[Record | None, Record | None], None],
                                   Callable[[Record | None], bool] | None]] = []
        # The size of each item this table made, while it lives (by id, dropped with it): an
        # Update's item is sized from the item before and the attributes it changes, so an
        # item holding a payload near 400 KB is not measured again at every write.
        self._sizes: dict[int, int] = {}

    def _size(self, rec: Record) -> int:
        size = self._sizes.get(id(rec))
        return self._sized(rec, _item_bytes(rec)) if size is None else size

    def _sized(self, rec: Record, size: int) -> int:
        key = id(rec)
        if key not in self._sizes:
            self._sizes[key] = size
            # dropped when the item is; nothing to drop when the interpreter exits
            weakref.finalize(rec, self._sizes.pop, key, None).atexit = False
        return size

    def watch(self, watcher: Callable[[Record | None, Record | None], None],
              where: Callable[[Record | None], bool] | None = None) -> None:
        """Call ``watcher(before, after)`` (copies; None: absent) after each item written,
        in the order written: the twin's change feed, as a DynamoDB stream with
        NEW_AND_OLD_IMAGES carries it (the job state-change events are read from it).
        ``where``: only the writes whose item after it passes (as a mapping's filter; it
        sees the stored item, not a copy: it must not change it)."""
        self._watchers.append((watcher, where))

    def get(self, pk: str) -> Record | None:
        with self._lock:
            return _clone(self._items.get(pk))

    def get_many(self, pks: list[str]) -> list[Record]:
        with self._lock:
            return [r for pk in dict.fromkeys(pks)
                    if pk in self._items and (r := _clone(self._items[pk])) is not None]

    def _in_range(self, status_key: str, at_most: str | None,
                  at_least: str | None) -> list[Record]:
        """The stored items the index holds under ``status_key`` within the range, in the
        index's order (not yet projected: the keys are the same in the index's copy)."""
        rows = [r for r in self._items.values()
                if r.status_key == status_key
                and r.status_at is not None  # the index holds only items with both keys
                and (at_most is None or r.status_at <= at_most)
                and (at_least is None or r.status_at >= at_least)]
        return sorted(rows, key=_index_order)

    @staticmethod
    def _filtered(rows: list[Record], where: Condition | None,
                  limit: int | None) -> list[Record]:
        """The index's copies of ``rows`` that pass ``where`` (a filter sees what the index
        holds), the first ``limit`` of them: only those are copied."""
        out: list[Record] = []
        for r in rows:
            if limit is not None and len(out) >= limit:
                break
            p = _projected(r)
            if evaluate(where, p):
                out.append(p)
        return out

    def query(self, status_key: str, *, at_most: str | None = None,
              at_least: str | None = None, limit: int | None = None,
              newest_first: bool = False, where: Condition | None = None,
              after: Record | None = None) -> list[Record]:
        if limit is not None and limit <= 0:
            return []
        with self._lock:
            rows = self._in_range(status_key, at_most, at_least)
            if after is not None:
                mark = _index_order(after)
                rows = [r for r in rows if (_index_order(r) < mark if newest_first
                                            else _index_order(r) > mark)]
            if newest_first:
                rows.reverse()
            return self._filtered(rows, where, limit)

    def count(self, status_key: str, *, at_least: str | None = None,
              where: Condition | None = None) -> int:
        with self._lock:
            rows = self._in_range(status_key, None, at_least)
            return len(rows) if where is None else len(self._filtered(rows, where, None))

    def _after(self, op: Op) -> Record | None:
        """The item after ``op`` (None: deleted), or ConditionFailed, or InvalidTransaction for
        an item DynamoDB would refuse (checked first: it refuses such a request outright)."""
        current = self._items.get(op.pk)
        after: Record | None = current  # Check
        if isinstance(op, Put):
            after = _copy_in(op.record)
            _check_item(after, self._size(after))
        elif isinstance(op, Update):
            after = _apply(current or Record(op.pk), op.actions)
            if current is None:
                size = self._size(after)
            else:  # the item before, less the changed attributes as they were, plus as they are
                changed = {a.attr for a in op.actions
                           if isinstance(a, Set | Add | Remove | Append)}  # (as _apply's)
                size = self._sized(after, self._size(current) + sum(
                    _attribute_bytes(k, getattr(after, k)) - _attribute_bytes(k, getattr(
                        current, k)) for k in changed))
            _check_item(after, size)
        elif isinstance(op, Delete):
            after = None
        if not evaluate(op.condition, current):
            raise ConditionFailed(op.pk)
        return after

    def status_key_of(self, pk: str) -> str | None:
        """The status index key of item ``pk`` as stored (None: no item, or none in the
        index): read without a copy, for the model of AWS's partitions."""
        rec = self._items.get(pk)
        return rec.status_key if rec is not None else None

    def _set(self, pk: str, rec: Record | None) -> None:
        before = self._items.get(pk) if self._watchers else None
        if rec is None:
            self._items.pop(pk, None)
        else:
            self._items[pk] = rec
        for watcher, where in self._watchers:
            if where is None or where(rec):
                watcher(_clone(before), _clone(rec))

    def write(self, op: Put | Update | Delete) -> Record | None:
        with self._lock:
            after = self._after(op)
            self._set(op.pk, after)
            return _clone(after) if isinstance(op, Update) else None

    def _transact(self, ops: list[Op]) -> None:
        with self._lock:
            reasons: list[str | None] = []
            results: list[Record | None] = []
            for op in ops:
                try:
                    results.append(self._after(op))
                    reasons.append(None)
                except ConditionFailed:
                    results.append(None)
                    reasons.append("ConditionalCheckFailed")
            # "The aggregate size of the items in the transaction cannot exceed 4 MB" (moto
            # does not check it). https://docs.aws.amazon.com/amazondynamodb/latest/
            # developerguide/transaction-apis.html
            size = sum(self._size(rec) for rec in results if rec is not None)
            if size > MAX_TRANSACTION_BYTES:
                raise InvalidTransaction(f"the transaction's items are {size} bytes; at most "
                                         f"{MAX_TRANSACTION_BYTES}")
            if any(reasons):
                raise TransactionCancelled(reasons)
            for op, after in zip(ops, results, strict=True):
                if not isinstance(op, Check):
                    self._set(op.pk, after)

    def _transact_once(self, ops: list[Op], token: str) -> None:
        digest = hashlib.sha256(_content(ops)).hexdigest()
        with self._lock:
            t = self._clock()
            while self._tokens:  # oldest first: drop those past their 10 minutes
                oldest = next(iter(self._tokens))
                if t - self._tokens[oldest][1] <= TOKEN_SECONDS:
                    break
                del self._tokens[oldest]
            seen = self._tokens.get(token)
            if seen is not None:
                if seen[0] != digest:
                    raise TableUnavailable("TransactWriteItems",
                                           "IdempotentParameterMismatchException",
                                           "the token was used with other ops", status=400,
                                           retryable=False)
                return  # done already: success, nothing written again
            self._transact(ops)
            self._tokens[token] = (digest, t)

    def create(self) -> None:
        return None

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def expire(self, at: float) -> int:
        """Delete every item whose ``expires_at`` is at or before ``at``, as DynamoDB's TTL
        would, and return how many were deleted (test support: nothing calls it in production).

        DynamoDB deletes an item some time after its ``expires_at`` has passed (typically
        within two days), never before; deleting at the very second is the harshest case a
        test can make.
        https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/howitworks-ttl.html
        """
        with self._lock:
            gone = [pk for pk, rec in self._items.items()
                    if rec.expires_at is not None and rec.expires_at <= at]
            for pk in gone:
                self._set(pk, None)
            return len(gone)

    def snapshot(self) -> dict[str, Record]:
        """Every item (a copy), for assertions."""
        with self._lock:
            return {pk: _copy_record(r) for pk, r in self._items.items()}
