"""The DynamoDB adapter of the table port (pynamodb): primitives only, no policy.

Conditions and actions of :mod:`dispatcher.ports.table` become pynamodb expressions; pynamodb's
errors become the port's errors here and nowhere else: a failed condition ->
:class:`ConditionFailed`, a cancelled transaction -> :class:`TransactionCancelled` with the
per-item reasons, a missing table -> :class:`ResourceMissing`, and an item DynamoDB refuses
(``ValidationException``: over 400 KB, a number out of range or not a number; in a transaction
also a ``ValidationError`` cancellation reason) -> :class:`InvalidTransaction`, for single
writes too, as the twin does. DynamoDB reports an invalid item sometimes for the whole request
and sometimes per item, so the port does not promise which item it was. Anything else ->
:class:`TableUnavailable` with DynamoDB's code, HTTP status and message (pynamodb's own words,
"Failed to write transaction items", say none of them), ``retryable`` for throttling, 5xx,
a transaction in progress and a lost connection. botocore has already retried those a few
times by then (pynamodb's client, standard mode); the store decides whether to try again.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import HTTPClientError
from pynamodb.exceptions import DoesNotExist, PynamoDBException, TransactWriteError
from pynamodb.transactions import TransactWrite

from dispatcher.aws.dynamodb.connection import SharedDataConnection
from dispatcher.aws.dynamodb.model import create_table, model_for
from dispatcher.domain.errors import ResourceMissing
from dispatcher.ports.table import (
    TRANSIENT_CODES,
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

_NAMES = tuple(f.name for f in fields(Record))
_INVALID = ("ValidationException", "ValidationError")  # request-level code, cancellation reason
# A DynamoDB number is 0 or has a magnitude from 1E-130 to 9.99...9E+125 (38 digits):
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html
# DynamoDB refuses others with a ValidationException; moto does only for PutItem, so the adapter
# checks every number it sends itself (the same check, and the same error, as the twin).
_MIN_NUMBER, _MAX_NUMBER = 1e-130, 9.9999999999999999999999999999999999999e125


def _number(attr: str, value: Any) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidTransaction(f"{attr}: {value} cannot be converted to a numeric value")
        if value != 0 and not _MIN_NUMBER <= abs(value) <= _MAX_NUMBER:
            raise InvalidTransaction(f"{attr}: number {value} is outside DynamoDB's range")
    return value
_COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    Eq: operator.eq, Lt: operator.lt, Le: operator.le, Gt: operator.gt, Ge: operator.ge}


class DynamoTable(Table):
    def __init__(self, table: str, region: str | None = None, host: str | None = None) -> None:
        self.name, self.region, self.host = table, region, host
        self.model: Any = model_for(table, region, host)
        self._conn = SharedDataConnection(
            region=region or getattr(self.model.Meta, "region", None), host=host)

    # -- translation ----------------------------------------------------------------------------
    def _cond(self, c: Condition | None) -> Any:
        m = self.model
        if c is None:
            return None
        if isinstance(c, Exists):
            return m.pk.exists()
        if isinstance(c, Absent):
            return m.pk.does_not_exist()
        if isinstance(c, Has):
            return getattr(m, c.attr).exists()
        if isinstance(c, Lacks):
            return getattr(m, c.attr).does_not_exist()
        if type(c) in _COMPARE:
            return _COMPARE[type(c)](getattr(m, c.attr), c.value)  # type: ignore[attr-defined]
        if isinstance(c, In):
            return getattr(m, c.attr).is_in(*c.values)
        if isinstance(c, And | Or):
            parts = [self._cond(p) for p in c.conds]
            return functools.reduce(operator.and_ if isinstance(c, And) else operator.or_, parts)
        raise TypeError(f"unknown condition {c!r}")

    def _action(self, a: Action) -> Any:
        attr = getattr(self.model, a.attr)  # type: ignore[attr-defined]
        if isinstance(a, Set):
            return attr.remove() if a.value is None else attr.set(_number(a.attr, a.value))
        if isinstance(a, Add):
            return attr.add(_number(a.attr, a.number))
        if isinstance(a, Remove):
            return attr.remove()
        if isinstance(a, Append):
            return attr.set((attr | []).append(list(a.values)))
        raise TypeError(f"unknown action {a!r}")

    def _item(self, record: Record) -> Any:
        return self.model(record.pk, **{k: _number(k, v) for k, v in record.present().items()
                                        if k != "pk"})

    @staticmethod
    def _record(item: Any) -> Record:
        return Record(**{name: getattr(item, name) for name in _NAMES})

    @contextmanager
    def _errors(self, pk: str = "", sent: list[int] | None = None) -> Iterator[None]:
        """Map pynamodb's errors to the port's; ``sent``: the position in the caller's ops of
        each transaction item in the order pynamodb sent them (it groups them by type)."""
        try:
            yield
        except TransactWriteError as exc:
            if exc.cause_response_code == "TransactionCanceledException":
                got = [r.code if r is not None else None
                       for r in exc.cancellation_reasons or []]
                reasons = got
                if sent is not None and len(sent) == len(got):
                    reasons = [None] * len(got)
                    for code, position in zip(got, sent, strict=True):
                        reasons[position] = code
                invalid = [i for i, code in enumerate(reasons) if code in _INVALID]
                if invalid:
                    raise InvalidTransaction(f"DynamoDB refused item(s) at {invalid}: "
                                             f"{exc.cause_response_message}") from None
                raise TransactionCancelled(reasons) from None
            self._invalid(exc)
            self._missing(exc)
            raise self._unavailable(exc) from exc
        except PynamoDBException as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                raise ConditionFailed(pk) from None
            self._invalid(exc)
            self._missing(exc)
            raise self._unavailable(exc) from exc

    @staticmethod
    def _unavailable(exc: PynamoDBException) -> TableUnavailable:
        """Any other failure, with what DynamoDB said (or the connection error)."""
        cause = exc.cause
        status = 0  # pynamodb keeps only the error part; botocore's own error has the status
        for err in (cause, getattr(cause, "__cause__", None)):
            response: dict[str, Any] = getattr(err, "response", None) or {}
            status = status or int(response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                                   or 0)
        operation = str(getattr(cause, "operation_name", "") or type(exc).__name__)
        code = exc.cause_response_code
        if code is None:  # no answer: the connection failed or timed out
            lost = isinstance(cause, BotoConnectionError | HTTPClientError)
            return TableUnavailable(operation, type(cause or exc).__name__,
                                    str(cause or exc), retryable=lost)
        return TableUnavailable(operation, code, exc.cause_response_message or "",
                                status=status,
                                retryable=code in TRANSIENT_CODES or status >= 500)

    @staticmethod
    def _invalid(exc: PynamoDBException) -> None:
        if exc.cause_response_code == "ValidationException":
            raise InvalidTransaction(f"DynamoDB refused the item: "
                                     f"{exc.cause_response_message}") from None

    def _missing(self, exc: PynamoDBException) -> None:
        if exc.cause_response_code == "ResourceNotFoundException":
            raise ResourceMissing(f"DynamoDB table {self.name!r} does not exist "
                                  f"({exc.cause_response_message})") from None

    # -- primitives -----------------------------------------------------------------------------
    def get(self, pk: str) -> Record | None:
        with self._errors(pk):
            try:
                return self._record(self.model.get(pk, consistent_read=True))
            except DoesNotExist:
                return None

    def get_many(self, pks: list[str]) -> list[Record]:
        keys = list(dict.fromkeys(pks))
        if not keys:
            return []
        with self._errors():
            return [self._record(i) for i in self.model.batch_get(keys, consistent_read=True)]

    def _range(self, at_most: str | None, at_least: str | None) -> Any:
        at = self.model.status_at
        if at_most is not None and at_least is not None:
            return at.between(at_least, at_most)
        if at_most is not None:
            return at <= at_most
        if at_least is not None:
            return at >= at_least
        return None

    def query(self, status_key: str, *, at_most: str | None = None,
              at_least: str | None = None, limit: int | None = None,
              newest_first: bool = False, where: Condition | None = None,
              after: Record | None = None) -> list[Record]:
        if limit is not None and limit <= 0:
            return []
        # A GSI query's ExclusiveStartKey: the index's keys and the table's.
        start = None if after is None else {
            "status_key": {"S": status_key}, "status_at": {"S": after.status_at or ""},
            "pk": {"S": after.pk}}
        with self._errors():
            rows = self.model.by_status.query(
                status_key, self._range(at_most, at_least), filter_condition=self._cond(where),
                scan_index_forward=not newest_first, limit=limit, last_evaluated_key=start,
                page_size=min(max(limit or 100, 10), 100) if where is not None else limit)
            return [self._record(i) for i in rows]

    def count(self, status_key: str, *, at_least: str | None = None,
              where: Condition | None = None) -> int:
        with self._errors():
            return int(self.model.by_status.count(
                status_key, self._range(None, at_least), filter_condition=self._cond(where)))

    def write(self, op: Put | Update | Delete) -> Record | None:
        with self._errors(op.pk):
            if isinstance(op, Put):
                self._item(op.record).save(condition=self._cond(op.condition))
                return None
            if isinstance(op, Delete):
                self.model(op.pk).delete(condition=self._cond(op.condition))
                return None
            item = self.model(op.pk)
            item.update(actions=[self._action(a) for a in op.actions],
                        condition=self._cond(op.condition))
            return self._record(item)

    def _transact(self, ops: list[Op]) -> None:
        self._transact_once(ops, None)

    def _transact_once(self, ops: list[Op], token: str | None) -> None:
        # pynamodb sends condition checks, then deletes, puts and updates, whatever the order
        # they were added in; DynamoDB's cancellation reasons follow the order sent.
        sent = [i for kind in (Check, Delete, Put, Update)
                for i, op in enumerate(ops) if isinstance(op, kind)]
        with self._errors(sent=sent), \
                TransactWrite(connection=self._conn, client_request_token=token) as tx:
            for op in ops:
                cond = self._cond(op.condition)
                if isinstance(op, Put):
                    tx.save(self._item(op.record), condition=cond)
                elif isinstance(op, Update):
                    tx.update(self.model(op.pk), actions=[self._action(a) for a in op.actions],
                              condition=cond)
                elif isinstance(op, Check):
                    tx.condition_check(self.model, op.pk, condition=cond)
                else:
                    tx.delete(self.model(op.pk), condition=cond)

    def create(self) -> None:
        create_table(self.name, self.region, self.host)

    def clear(self) -> None:
        with self._errors(), self.model.batch_write() as batch:
            for item in self.model.scan(attributes_to_get=["pk"]):
                batch.delete(item)
