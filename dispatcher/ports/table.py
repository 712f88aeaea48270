"""The table port: the few primitives a single-table store needs, and nothing else.

The Store roles (:mod:`dispatcher.store`) hold every rule of the job table: which states
may change to which, the fences, the conditions, the keys and the codec. An adapter implements
only these primitives: a strongly consistent get, a batch get, a query of one partition key
of the status index, one conditional write, an all-or-nothing transaction. Both the DynamoDB adapter
(:mod:`dispatcher.aws.dynamodb.dynamo_table`) and the in-memory twin
(:mod:`dispatcher.testing.memory_table`) implement them with the same semantics, and one contract
suite (``tests/contract``) runs against both, so the twin cannot drift.

Conditions and update actions are a tiny language of frozen dataclasses that each adapter
translates (pynamodb expressions) or evaluates (the twin). Comparisons follow DynamoDB: a missing
attribute, or one of another type, makes ``Eq``/``In``/``Lt``/``Le``/``Gt``/``Ge`` false.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain.errors import LongjobsError
from dispatcher.ports.record import (
    ATTRIBUTES,
    INDEX_ATTRIBUTES,
    INDEX_KEYS,
    JSON_ATTRIBUTES,
    LIST_ATTRIBUTES,
    NUMBER_ATTRIBUTES,
    Record,
)

# TransactWriteItems: at most 100 actions and 4 MB in total, no two actions on the same item.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024


def _attr(name: str) -> None:
    if name not in ATTRIBUTES:
        raise ValueError(f"no attribute {name!r} in the table's records")


# -- conditions ---------------------------------------------------------------------------------
class Condition:
    """Base of the condition language (combine with ``And``/``Or``)."""


@dataclass(frozen=True)
class Exists(Condition):
    """The item exists."""


@dataclass(frozen=True)
class Absent(Condition):
    """The item does not exist."""


@dataclass(frozen=True)
class Has(Condition):
    """The attribute is set on the item."""

    attr: str

    def __post_init__(self) -> None:
        _attr(self.attr)


@dataclass(frozen=True)
class Lacks(Condition):
    """The attribute is not set on the item (attribute_not_exists)."""

    attr: str

    def __post_init__(self) -> None:
        _attr(self.attr)


@dataclass(frozen=True)
class _Compare(Condition):
    attr: str
    value: Any

    def __post_init__(self) -> None:
        _attr(self.attr)


class Eq(_Compare):
    """attr = value"""


class Lt(_Compare):
    """attr < value"""


class Le(_Compare):
    """attr <= value"""


class Gt(_Compare):
    """attr > value"""


class Ge(_Compare):
    """attr >= value"""


@dataclass(frozen=True)
class In(Condition):
    """attr IN (values)"""

    attr: str
    values: tuple[Any, ...]

    def __init__(self, attr: str, values: Any) -> None:
        _attr(attr)
        object.__setattr__(self, "attr", attr)
        object.__setattr__(self, "values", tuple(values))


@dataclass(frozen=True)
class And(Condition):
    conds: tuple[Condition, ...] = field(default=())

    def __init__(self, *conds: Condition) -> None:
        object.__setattr__(self, "conds", conds)


@dataclass(frozen=True)
class Or(Condition):
    conds: tuple[Condition, ...] = field(default=())

    def __init__(self, *conds: Condition) -> None:
        object.__setattr__(self, "conds", conds)


# -- update actions -----------------------------------------------------------------------------
class Action:
    """Base of the update actions."""


@dataclass(frozen=True)
class Set(Action):
    """SET attr = value (a None value removes the attribute)."""

    attr: str
    value: Any

    def __post_init__(self) -> None:
        _attr(self.attr)


@dataclass(frozen=True)
class Add(Action):
    """ADD attr number (a missing attribute counts as 0)."""

    attr: str
    number: float

    def __post_init__(self) -> None:
        _attr(self.attr)


@dataclass(frozen=True)
class Remove(Action):
    """REMOVE attr"""

    attr: str

    def __post_init__(self) -> None:
        _attr(self.attr)


@dataclass(frozen=True)
class Append(Action):
    """SET attr = list_append(if_not_exists(attr, []), values): one atomic append."""

    attr: str
    values: tuple[Any, ...]

    def __init__(self, attr: str, values: Any) -> None:
        _attr(attr)
        object.__setattr__(self, "attr", attr)
        object.__setattr__(self, "values", tuple(values))


# -- write operations ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Put:
    """Replace (or create) the whole item."""

    record: Record
    condition: Condition | None = None

    @property
    def pk(self) -> str:
        return self.record.pk


@dataclass(frozen=True)
class Update:
    """Change some attributes; creates the item if it does not exist and the condition allows."""

    pk: str
    actions: tuple[Action, ...]
    condition: Condition | None = None

    def __init__(self, pk: str, actions: Any, condition: Condition | None = None) -> None:
        object.__setattr__(self, "pk", pk)
        object.__setattr__(self, "actions", tuple(actions))
        object.__setattr__(self, "condition", condition)


@dataclass(frozen=True)
class Check:
    """Only a condition, inside a transaction (ConditionCheck)."""

    pk: str
    condition: Condition


@dataclass(frozen=True)
class Delete:
    pk: str
    condition: Condition | None = None


Op = Put | Update | Check | Delete


# -- errors -------------------------------------------------------------------------------------
# Failures that pass: the same request may succeed when sent again a moment later. Request-level
# error codes (throttling, TransactionInProgress: a request with the same ClientRequestToken
# still running; an HTTP 5xx counts too, whatever its code) and TransactWriteItems' per-item
# cancellation reasons.
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/Programming.Errors.html
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
TRANSIENT_CODES = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "InternalServerError", "ServiceUnavailable", "TransactionInProgressException",
    "TransactionConflictException"})
TRANSIENT_REASONS = frozenset({"TransactionConflict", "ThrottlingError",
                               "ProvisionedThroughputExceeded", "RequestLimitExceeded"})


class ConditionFailed(LongjobsError):
    """A single write's condition was false; nothing was written."""

    def __init__(self, pk: str) -> None:
        self.pk = pk
        super().__init__(f"condition failed on {pk}")


class TransactionCancelled(LongjobsError):
    """A transaction wrote nothing. ``reasons`` is aligned with its ops: None for an op that
    was fine, else a DynamoDB cancellation code ("ConditionalCheckFailed",
    "TransactionConflict", ...)."""

    def __init__(self, reasons: list[str | None]) -> None:
        self.reasons = list(reasons)
        super().__init__("transaction cancelled: " + ", ".join(
            f"#{i} {r}" for i, r in enumerate(self.reasons) if r))

    def failed_conditions(self) -> set[int]:
        """Positions of the ops whose condition failed (a lost fence, a duplicate)."""
        return {i for i, r in enumerate(self.reasons) if r == "ConditionalCheckFailed"}

    @property
    def transient(self) -> bool:
        """Cancelled only for reasons that pass (a conflict with another request on one of
        its items, throttling): the same transaction may commit if tried again."""
        given = [r for r in self.reasons if r]
        return bool(given) and all(r in TRANSIENT_REASONS for r in given)


class TableUnavailable(LongjobsError):
    """The table did not do a request: throttled, an internal error (HTTP 5xx), a transaction
    still in progress, the connection lost, or refused for a reason the port has no error for
    (``retryable`` False: access denied, ...). ``code`` is DynamoDB's error code, ``status``
    the HTTP status (0 when no response came). After a 5xx or a lost connection the request may
    have been done all the same: a retry must be idempotent (``Table.transact``'s token)."""

    def __init__(self, operation: str, code: str, message: str = "", *, status: int = 0,
                 retryable: bool = True) -> None:
        self.operation, self.code, self.message = operation, code, message
        self.status, self.retryable = status, retryable
        http = f" (HTTP {status})" if status else ""
        super().__init__(f"{operation}: {code}{http}: {message}" if message
                         else f"{operation}: {code}{http}")


def transient(exc: BaseException) -> bool:
    """The failure passes: the same request may succeed if sent again a moment later."""
    if isinstance(exc, TransactionCancelled):
        return exc.transient
    return isinstance(exc, TableUnavailable) and exc.retryable


class InvalidTransaction(LongjobsError, ValueError):
    """A transaction DynamoDB would refuse outright: empty, over 100 ops, or two ops on one
    item."""


# -- the port -----------------------------------------------------------------------------------
class Table(ABC):
    """The primitives of the single table. Adapters raise :class:`ConditionFailed`,
    :class:`TransactionCancelled`, :class:`InvalidTransaction`, :class:`TableUnavailable`, and
    ``ResourceMissing`` for a table that does not exist."""

    @abstractmethod
    def get(self, pk: str) -> Record | None:
        """The item, read strongly consistent; None if it does not exist."""

    @abstractmethod
    def get_many(self, pks: list[str]) -> list[Record]:
        """The items that exist among ``pks``, strongly consistent, in no particular order."""

    @abstractmethod
    def query(self, status_key: str, *, at_most: str | None = None,
              at_least: str | None = None, limit: int | None = None,
              newest_first: bool = False, where: Condition | None = None,
              after: Record | None = None) -> list[Record]:
        """Items of the status index with this ``status_key`` (one partition key), ordered by
        ``status_at`` (ascending unless ``newest_first``), within ``[at_least, at_most]``,
        keeping those that match ``where`` (a filter), at most ``limit`` of them (after the
        filter). ``after``: start past this item of the same partition (an item the query
        returned, by its ``status_at`` and ``pk``; DynamoDB's ExclusiveStartKey, so items
        with equal ``status_at`` are paged through too); it need not still be there.
        Each holds only what the index projects (:data:`INDEX_KEYS`,
        :data:`INDEX_ATTRIBUTES`; the rest None), and ``where`` may name only those. The
        index is eventually consistent in DynamoDB. Several keys as one index:
        :mod:`dispatcher.store.index`."""

    @abstractmethod
    def count(self, status_key: str, *, at_least: str | None = None,
              where: Condition | None = None) -> int:
        """How many items ``query`` would return without a limit (a COUNT query)."""

    @abstractmethod
    def write(self, op: Put | Update | Delete) -> Record | None:
        """One conditional write. Returns the item as it is after an ``Update``, else None.
        Raises :class:`ConditionFailed` if the condition is false."""

    def transact(self, ops: list[Op], *, token: str | None = None) -> None:
        """All ops or none (TransactWriteItems). Raises :class:`TransactionCancelled` with
        reasons aligned to ``ops``; :class:`InvalidTransaction` for an empty one, more than
        :data:`MAX_TRANSACTION_ITEMS` ops, or two ops on one item; :class:`TableUnavailable`
        when the table did not answer it.

        ``token`` (at most 36 characters; DynamoDB's ClientRequestToken): the same ops sent
        again with the same token within 10 minutes of the first are done once; a retry after
        a lost response then succeeds instead of finding its own items.
        https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html"""
        if not ops:
            raise InvalidTransaction("a transaction needs at least one op")
        if len(ops) > MAX_TRANSACTION_ITEMS:
            raise InvalidTransaction(f"{len(ops)} ops in one transaction; at most "
                                     f"{MAX_TRANSACTION_ITEMS}")
        pks = [op.pk for op in ops]
        if len(set(pks)) != len(pks):
            raise InvalidTransaction("two ops of one transaction on the same item")
        if token is None:
            self._transact(ops)
        else:
            self._transact_once(ops, token)

    @abstractmethod
    def _transact(self, ops: list[Op]) -> None:
        """The adapter's TransactWriteItems (the checks of :meth:`transact` are done)."""

    def _transact_once(self, ops: list[Op], token: str) -> None:
        """:meth:`_transact` with a ClientRequestToken; an adapter that has none ignores it
        (a retry is then guarded only by the callers' conditions)."""
        self._transact(ops)

    # provisioning (local mode, tests)
    @abstractmethod
    def create(self) -> None:
        """Create the table and its index if they do not exist."""

    @abstractmethod
    def clear(self) -> None:
        """Delete every item (tests)."""


__all__ = ["ATTRIBUTES", "INDEX_ATTRIBUTES", "INDEX_KEYS", "JSON_ATTRIBUTES", "LIST_ATTRIBUTES",
           "MAX_TRANSACTION_BYTES",
           "MAX_TRANSACTION_ITEMS", "NUMBER_ATTRIBUTES", "TRANSIENT_CODES", "TRANSIENT_REASONS",
           "Absent", "Action", "Add", "And", "Append", "Check", "Condition", "ConditionFailed",
           "Delete", "Eq", "Exists", "Ge", "Gt", "Has", "In", "InvalidTransaction", "Lacks",
           "Le", "Lt", "Op", "Or", "Put", "Record", "Remove", "Set", "Table",
           "TableUnavailable", "TransactionCancelled", "Update", "transient"]
