"""The table's pynamodb model, made per table (name, region, endpoint) and cached.

Key prefixes (built in :mod:`dispatcher.store.codec`): ``JOB#<job_id>``,
``REJECT#<job_id or message_id>``, ``BUNDLE#<id>``, ``LAUNCH#<id>``, ``TASK#<task arn>``,
``LEASE#dispatcher``, ``FAIR#priorities``. The status index (``status_key`` =
``<TYPE>#<STATE>[#<shard>]``, ``status_at`` = ISO time) answers every "which items are in
state S" question without a scan.
``infra/template.yaml`` declares the same schema; a test keeps them equal (:func:`key_schema`).

pynamodb keeps the table name and endpoint on ``Model.Meta``; binding one model class for the
whole process would let one store repoint every other. :func:`model_for` makes a subclass per
(table, region, host) instead, so stores on different tables or endpoints coexist.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any

from pynamodb.attributes import JSONAttribute, ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.indexes import GlobalSecondaryIndex, IncludeProjection
from pynamodb.models import Model

from dispatcher.aws.dynamodb.connection import share_parsed_data
from dispatcher.domain.sizes import compact_json
from dispatcher.ports.table import (
    ATTRIBUTES,
    INDEX_ATTRIBUTES,
    INDEX_KEYS,
    JSON_ATTRIBUTES,
    LIST_ATTRIBUTES,
    NUMBER_ATTRIBUTES,
    InvalidTransaction,
)

# The status index the code queries: its keys sharded (dispatcher.store.codec), projecting only
# what its readers read (INDEX_ATTRIBUTES). A new name, as DynamoDB changes neither the
# projection nor the keys of an index in place.
STATUS_INDEX = "by_status_shard"
TTL_ATTRIBUTE = "expires_at"
KEYS = INDEX_KEYS


class CompactJSONAttribute(JSONAttribute):
    """A JSON document in a string attribute, written compactly.

    pynamodb's JSONAttribute writes ``json.dumps(value)`` with ``", "`` and ``": "`` separators
    (a 262,142-byte payload became 393,207 bytes), so a payload could pass the size check and
    still exceed DynamoDB's 400 KB item limit. This writes :func:`compact_json`, the encoding the
    size checks measure. Numbers inside are characters of a string, so DynamoDB's number range
    does not apply to them (payloads are stored this way; the schema still refuses NaN/Infinity
    in them, for readers in other languages).
    """

    def serialize(self, value: Any) -> str | None:
        if value is None:
            return None
        try:
            return compact_json(value)
        except (TypeError, ValueError) as exc:  # not JSON-serialisable, or circular
            raise InvalidTransaction(f"{self.attr_name}: {exc}") from None


def _attribute(name: str) -> Any:
    if name in JSON_ATTRIBUTES:
        return CompactJSONAttribute(null=True)
    if name in LIST_ATTRIBUTES:
        return ListAttribute(of=UnicodeAttribute, null=True)
    if name in NUMBER_ATTRIBUTES:
        return NumberAttribute(null=True)
    return UnicodeAttribute(null=True)


_lock = threading.Lock()
_models: dict[tuple[str, str | None, str | None], type[Model]] = {}
_uncached = itertools.count(1_000_000)  # distinct class names for the models not cached


def model_for(table: str, region: str | None = None, host: str | None = None) -> type[Model]:
    """The model class of one table on one endpoint (made once, then cached). Without a
    ``host``, botocore takes the endpoint from the environment when the model first connects,
    and that may differ from one call to the next (tests and local mode point it at their own
    servers): such a model is made anew each time, never shared."""
    key = (table, region, host)
    with _lock:
        if host is None:
            return _make(table, region, host, len(_models) + next(_uncached))
        if key not in _models:
            _models[key] = _make(table, region, host, len(_models))
        return _models[key]


def _make(table: str, region: str | None, host: str | None, n: int) -> type[Model]:
    meta: dict[str, Any] = {"table_name": table, "billing_mode": "PAY_PER_REQUEST", "host": host}
    if region:
        meta["region"] = region
    index_meta = type("Meta", (), {"index_name": STATUS_INDEX,
                                   "projection": IncludeProjection(list(INDEX_ATTRIBUTES))})
    index_cls = type(f"StatusIndex{n}", (GlobalSecondaryIndex,), {
        "Meta": index_meta, "status_key": UnicodeAttribute(hash_key=True),
        "status_at": UnicodeAttribute(range_key=True)})
    attrs: dict[str, Any] = {name: _attribute(name) for name in ATTRIBUTES if name not in KEYS}
    attrs.update(__module__=__name__, Meta=type("Meta", (), meta),
                 pk=UnicodeAttribute(hash_key=True),
                 status_key=UnicodeAttribute(null=True), status_at=UnicodeAttribute(null=True),
                 by_status=index_cls())
    model: type[Model] = type(f"Item{n}", (Model,), attrs)
    share_parsed_data(model._get_connection().connection)
    return model


def key_schema() -> dict[str, Any]:
    """The table's key schema and indexes, as the infra template must declare them (the
    status index's NonKeyAttributes are INDEX_ATTRIBUTES)."""
    return {
        "hash_key": "pk",
        "attributes": {"pk": "S", "status_key": "S", "status_at": "S"},
        "indexes": {STATUS_INDEX: {"hash_key": "status_key", "range_key": "status_at",
                                   "projection": "INCLUDE"}},
        "ttl_attribute": TTL_ATTRIBUTE,
    }


def create_table(table: str, region: str | None = None, host: str | None = None) -> None:
    """Create the table with its index and TTL unless it exists (local mode, tests)."""
    model = model_for(table, region, host)
    if not model.exists():
        model.create_table(wait=True, billing_mode="PAY_PER_REQUEST")
    conn: Any = model._get_connection().connection
    conn.client.update_time_to_live(TableName=table, TimeToLiveSpecification={
        "Enabled": True, "AttributeName": TTL_ATTRIBUTE})
