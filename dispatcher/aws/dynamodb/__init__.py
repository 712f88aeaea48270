"""The DynamoDB adapter of the table port (:mod:`.table`) and its pynamodb model (:mod:`.model`)."""

from __future__ import annotations

from collections.abc import Callable

from dispatcher.aws.dynamodb.dynamo_table import DynamoTable
from dispatcher.store import Store
from dispatcher.store.base import DEFAULT_RETENTION_DAYS


def open_store(table: str, region: str | None = None, host: str | None = None,
               clock: Callable[[], float] | None = None, *,
               retention_days: float = DEFAULT_RETENTION_DAYS) -> Store:
    """The full Store on a DynamoDB table (``host``: an endpoint URL, e.g. moto's)."""
    return Store(DynamoTable(table, region, host), clock, retention_days=retention_days)


__all__ = ["DynamoTable", "open_store"]
