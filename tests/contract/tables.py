"""The two Table backends the store contract suites run on: the twin and DynamoDB on moto."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.aws.dynamodb import DynamoTable
from dispatcher.ports.store import Store
from dispatcher.ports.table import Table
from dispatcher.testing.memory_table import MemoryTable

BACKENDS = ["memory", "dynamodb"]


def make_table(request: pytest.FixtureRequest) -> Table:
    if request.param == "memory":
        return MemoryTable()
    aws = request.getfixturevalue("aws")  # moto behind the proxy, table provisioned
    return DynamoTable(aws.env["LONGJOBS_TABLE"])


class Clock:
    """A settable clock for the store roles."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_store(table: Table, clock: Callable[[], float] | None = None) -> Store:
    return Store(table, clock)
