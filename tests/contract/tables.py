"""The two Table backends the store contract suites run on: the twin and DynamoDB on moto."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from dispatcher.aws.dynamodb import DynamoTable
from dispatcher.aws.dynamodb.model import create_table
from dispatcher.ports.table import Table
from dispatcher.store import Store
from dispatcher.testing.memory_table import MemoryTable

BACKENDS = ["memory", "dynamodb"]
_tables = itertools.count()


def make_table(request: pytest.FixtureRequest) -> Table:
    """The twin, or a fresh table of its own on the session's moto server: creating one is
    much cheaper than resetting and provisioning the whole environment for every case."""
    if request.param == "memory":
        return MemoryTable()
    moto = request.getfixturevalue("moto_server")
    name = f"contract-{next(_tables)}"
    create_table(name, "us-east-1", moto.url)
    return DynamoTable(name, "us-east-1", moto.url)


class Clock:
    """A settable clock for the store roles."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make_store(table: Table, clock: Callable[[], float] | None = None) -> Store:
    return Store(table, clock)
