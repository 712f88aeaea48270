"""A walk through the status index page by page (``Table.query(after=...)``,
``dispatcher.store.index.pages``) meets every row once on both backends, however many rows
share one ``status_at``, and whether or not the rows already met leave the index meanwhile."""

from __future__ import annotations

import pytest

from dispatcher.ports.table import Eq, Put, Record, Set, Table, Update
from dispatcher.store import index
from tests.contract.tables import BACKENDS, make_table

KEY = "JOB#PENDING#0"


@pytest.fixture(params=BACKENDS)
def table(request: pytest.FixtureRequest) -> Table:
    return make_table(request)


def rows(table: Table, n: int) -> list[str]:
    """``n`` rows, in runs of 7 sharing one ``status_at`` (a tick's batch)."""
    pks = [f"JOB#{i:04}" for i in range(n)]
    for i, pk in enumerate(pks):
        table.write(Put(Record(pk, status_key=KEY, status_at=f"2026-12-01T00:00:{i // 7:02}Z",
                               state="PENDING", kind="a" if i % 3 else "b")))
    return pks


def test_pages_meet_every_row_once_with_runs_of_equal_times(table: Table) -> None:
    pks = rows(table, 40)
    seen = [rec.pk for page in index.pages(table, [KEY], page=5) for rec in page]
    assert sorted(seen) == pks and len(seen) == len(set(seen))
    kinds = [rec.pk for page in index.pages(table, [KEY], page=4, where=_kind_a())
             for rec in page]
    assert sorted(kinds) == [pk for i, pk in enumerate(pks) if i % 3]


def test_rows_leaving_the_index_as_they_are_met_skip_none(table: Table) -> None:
    pks = rows(table, 33)
    seen: list[str] = []
    for page in index.pages(table, [KEY], page=6):
        for rec in page:
            seen.append(rec.pk)
            if len(seen) % 2:  # every other one acted on: it leaves this partition
                table.write(Update(rec.pk, [Set("status_key", "JOB#CANCELLED#0")]))
    assert sorted(seen) == pks and len(seen) == len(set(seen))


def _kind_a() -> Eq:
    return Eq("kind", "a")
