"""A bounded search of the status index (``dispatcher.store.index.newest_matching``: newest
first, pages from ``after``, no filter sent) finds on both backends the newest rows that match,
however many rows share one ``status_at``, and reads no further than it is allowed."""

from __future__ import annotations

import pytest

from dispatcher.ports.table import Put, Record, Table
from dispatcher.store import index
from tests.contract.tables import BACKENDS, make_table

KEYS = ["JOB#FAILED#0", "JOB#FAILED#1"]


@pytest.fixture(params=BACKENDS)
def table(request: pytest.FixtureRequest) -> Table:
    return make_table(request)


def test_the_newest_matches_within_the_rows_allowed(table: Table) -> None:
    """60 rows per key in runs of 7 sharing one ``status_at``; every fifth is kind b."""
    for k, key in enumerate(KEYS):
        for i in range(60):
            table.write(Put(Record(f"JOB#{k}-{i:03}", status_key=key,
                                   status_at=f"2026-12-01T00:00:{i // 7:02}Z", state="FAILED",
                                   kind="b" if i % 5 == 0 else "a")))
    newest_b = sorted(((f"2026-12-01T00:00:{i // 7:02}Z", f"JOB#{k}-{i:03}")
                       for k in range(2) for i in range(0, 60, 5)), reverse=True)

    def search(limit: int, read_at_most: int) -> list[str]:
        return [rec.pk for rec in index.newest_matching(
            table, KEYS, lambda rec: rec.kind == "b", limit=limit, read_at_most=read_at_most)]

    assert search(100, 1000) == [pk for _, pk in newest_b]
    assert search(5, 1000) == [pk for _, pk in newest_b[:5]]
    # Only the newest 10 rows of each key are looked at: rows 50..59 hold b at 50 and 55.
    assert sorted(search(100, 10)) == ["JOB#0-050", "JOB#0-055", "JOB#1-050", "JOB#1-055"]
