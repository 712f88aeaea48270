"""The Table port's contract: MemoryTable (the twin) and DynamoTable (pynamodb on moto) answer
alike, op by op: conditions, update actions, transactions and their per-item reasons, the
by_status index. Every test runs on both, so the twin cannot drift from the adapter."""

from __future__ import annotations

import pytest

from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    Absent,
    Add,
    And,
    Append,
    Check,
    ConditionFailed,
    Delete,
    Eq,
    Exists,
    Ge,
    Gt,
    Has,
    In,
    InvalidTransaction,
    Le,
    Lt,
    Or,
    Put,
    Record,
    Remove,
    Set,
    Table,
    TransactionCancelled,
    Update,
)
from tests.contract.tables import BACKENDS, make_table


@pytest.fixture(params=BACKENDS)
def table(request: pytest.FixtureRequest) -> Table:
    return make_table(request)


def _item(pk: str, **attrs: object) -> Record:
    return Record(pk, **attrs)  # type: ignore[arg-type]


def test_put_get_roundtrip_and_missing(table: Table) -> None:
    table.write(Put(_item("A#1", state="X", attempt=2, payload={"n": [1, "two"]},
                          job_ids=["a", "b"], created_at=1.5)))
    got = table.get("A#1")
    assert got is not None
    assert (got.state, got.attempt, got.payload, got.job_ids, got.created_at) == (
        "X", 2, {"n": [1, "two"]}, ["a", "b"], 1.5)
    assert got.kind is None
    assert table.get("A#2") is None


def test_conditional_put(table: Table) -> None:
    table.write(Put(_item("A#1", owner="a"), Absent()))
    with pytest.raises(ConditionFailed):
        table.write(Put(_item("A#1", owner="b"), Absent()))
    assert table.get("A#1").owner == "a"  # type: ignore[union-attr]
    table.write(Put(_item("A#1", owner="b"), Or(Absent(), Eq("owner", "a"))))
    assert table.get("A#1").owner == "b"  # type: ignore[union-attr]
    table.write(Put(_item("A#1", owner="c"), Exists()))
    with pytest.raises(ConditionFailed):
        table.write(Put(_item("A#9", owner="c"), Exists()))
    assert table.get("A#9") is None


def test_update_returns_the_new_item_and_applies_actions(table: Table) -> None:
    table.write(Put(_item("B#1", state="P", attempt=1, reason="r", launch_failures=1)))
    after = table.write(Update("B#1", [Set("state", "Q"), Add("attempt", 1),
                                       Add("launch_failures", 2), Remove("reason"),
                                       Append("cancel_jobs", ["j1"]), Set("last_failure", None)],
                               And(Eq("state", "P"), Eq("attempt", 1))))
    assert after is not None
    assert (after.state, after.attempt, after.launch_failures, after.reason,
            after.cancel_jobs) == ("Q", 2, 3, None, ["j1"])
    after = table.write(Update("B#1", [Append("cancel_jobs", ["j2", "j3"])]))
    assert after is not None and after.cancel_jobs == ["j1", "j2", "j3"]
    assert table.get("B#1") == after


def test_update_condition_failure_writes_nothing(table: Table) -> None:
    table.write(Put(_item("B#1", state="P", attempt=1)))
    with pytest.raises(ConditionFailed):
        table.write(Update("B#1", [Set("state", "Q")], And(Eq("state", "P"),
                                                           Eq("attempt", 2))))
    assert table.get("B#1").state == "P"  # type: ignore[union-attr]
    with pytest.raises(ConditionFailed):  # a missing item fails an Exists condition
        table.write(Update("B#2", [Set("state", "Q")], Exists()))
    assert table.get("B#2") is None


def test_update_without_condition_creates_the_item(table: Table) -> None:
    after = table.write(Update("C#1", [Add("attempt", 1), Set("state", "N")]))
    assert after is not None and (after.pk, after.attempt, after.state) == ("C#1", 1, "N")


def test_conditional_delete(table: Table) -> None:
    table.write(Put(_item("LEASE#x", owner="a")))
    with pytest.raises(ConditionFailed):
        table.write(Delete("LEASE#x", Eq("owner", "b")))
    assert table.get("LEASE#x") is not None
    table.write(Delete("LEASE#x", Eq("owner", "a")))
    assert table.get("LEASE#x") is None
    table.write(Delete("LEASE#x"))  # deleting nothing is fine without a condition


@pytest.mark.parametrize(("cond", "holds"), [
    (Eq("state", "P"), True), (Eq("state", "Q"), False),
    (Eq("kind", "P"), False),  # missing attribute
    (In("state", ["Q", "P"]), True), (In("state", ["Q"]), False), (In("kind", ["P"]), False),
    (Lt("attempt", 2), True), (Lt("attempt", 1), False), (Le("attempt", 1), True),
    (Gt("attempt", 0), True), (Gt("attempt", 1), False), (Ge("attempt", 1), True),
    (Lt("lease_until", 5), False),  # missing attribute compares false
    (Has("state"), True), (Has("kind"), False),
    (And(Eq("state", "P"), Eq("attempt", 1)), True), (And(Eq("state", "P"), Eq("attempt", 2)),
                                                        False),
    (Or(Eq("state", "Q"), Eq("attempt", 1)), True), (Or(Absent(), Eq("attempt", 2)), False),
    (Exists(), True), (Absent(), False),
])
def test_condition_semantics(table: Table, cond: object, holds: bool) -> None:
    table.write(Put(_item("D#1", state="P", attempt=1)))
    try:
        table.write(Update("D#1", [Set("reason", "touched")], cond))  # type: ignore[arg-type]
    except ConditionFailed:
        assert not holds
    else:
        assert holds
        assert table.get("D#1").reason == "touched"  # type: ignore[union-attr]


def test_transaction_is_all_or_nothing_with_reasons_by_position(table: Table) -> None:
    table.write(Put(_item("J#1", state="PENDING")))
    table.write(Put(_item("B#1", state="RUNNING", attempt=2)))
    ops = [Put(_item("J#2", state="PENDING"), Absent()),
           Update("J#1", [Set("state", "RUNNING")], Eq("state", "RUNNING")),
           Check("B#1", Eq("attempt", 2)),
           Put(_item("J#1x", state="PENDING"), Absent()),
           Delete("B#9", Exists())]
    with pytest.raises(TransactionCancelled) as err:
        table.transact(ops)  # type: ignore[arg-type]
    assert err.value.reasons == [None, "ConditionalCheckFailed", None, None,
                                 "ConditionalCheckFailed"]
    assert err.value.failed_conditions() == {1, 4}
    assert table.get("J#2") is None and table.get("J#1x") is None
    assert table.get("J#1").state == "PENDING"  # type: ignore[union-attr]


def test_transaction_success_writes_every_op(table: Table) -> None:
    table.write(Put(_item("J#1", state="PENDING")))
    table.write(Put(_item("X#1", state="gone")))
    table.transact([Put(_item("J#2", state="PENDING"), Absent()),
                    Update("J#1", [Set("state", "RUNNING"), Add("attempts", 1)],
                           Eq("state", "PENDING")),
                    Delete("X#1", Exists())])
    assert table.get("J#2") is not None and table.get("X#1") is None
    j1 = table.get("J#1")
    assert j1 is not None and (j1.state, j1.attempts) == ("RUNNING", 1)


def test_transaction_limits(table: Table) -> None:
    with pytest.raises(InvalidTransaction):
        table.transact([Put(_item(f"T#{i}")) for i in range(MAX_TRANSACTION_ITEMS + 1)])
    with pytest.raises(InvalidTransaction):
        table.transact([Put(_item("T#1")), Update("T#1", [Set("state", "x")])])
    with pytest.raises(InvalidTransaction):
        table.transact([])
    table.transact([Put(_item(f"T#{i}")) for i in range(MAX_TRANSACTION_ITEMS)])
    assert len(table.get_many([f"T#{i}" for i in range(MAX_TRANSACTION_ITEMS)])) == 100


def test_query_order_limit_and_range(table: Table) -> None:
    for i, at in enumerate(["2024-01-03", "2024-01-01", "2024-01-02", "2024-01-04"]):
        table.write(Put(_item(f"B#{i}", status_key="BUNDLE#PENDING", status_at=at,
                              kind="a" if i % 2 else "b")))
    table.write(Put(_item("B#x", status_key="BUNDLE#DONE", status_at="2024-01-01")))
    table.write(Put(_item("B#y", status_key="BUNDLE#PENDING")))  # not in the index

    def pks(rows: list[Record]) -> list[str]:
        return [r.pk for r in rows]

    assert pks(table.query("BUNDLE#PENDING")) == ["B#1", "B#2", "B#0", "B#3"]
    assert pks(table.query("BUNDLE#PENDING", limit=2)) == ["B#1", "B#2"]
    assert pks(table.query("BUNDLE#PENDING", at_most="2024-01-02")) == ["B#1", "B#2"]
    assert pks(table.query("BUNDLE#PENDING", at_least="2024-01-02")) == ["B#2", "B#0", "B#3"]
    assert pks(table.query("BUNDLE#PENDING", at_least="2024-01-02", at_most="2024-01-03")) == [
        "B#2", "B#0"]
    assert pks(table.query("BUNDLE#PENDING", newest_first=True, limit=3)) == [
        "B#3", "B#0", "B#2"]
    assert pks(table.query("BUNDLE#PENDING", where=Eq("kind", "a"), limit=1)) == ["B#1"]
    assert pks(table.query("BUNDLE#PENDING", where=Eq("kind", "b"), newest_first=True,
                           limit=2)) == ["B#0", "B#2"]
    assert table.query("BUNDLE#PENDING", limit=0) == []
    assert table.query("BUNDLE#NONE") == []
    assert table.count("BUNDLE#PENDING") == 4
    assert table.count("BUNDLE#PENDING", at_least="2024-01-03") == 2
    assert table.count("BUNDLE#PENDING", where=Eq("kind", "a")) == 2


def test_get_many_skips_missing_and_duplicates(table: Table) -> None:
    table.write(Put(_item("J#1")))
    table.write(Put(_item("J#2")))
    assert sorted(r.pk for r in table.get_many(["J#1", "J#3", "J#2", "J#1"])) == ["J#1", "J#2"]
    assert table.get_many([]) == []


def test_callers_cannot_mutate_stored_state(table: Table) -> None:
    rec = _item("J#1", job_ids=["a"], payload={"k": [1]})
    table.write(Put(rec))
    rec.job_ids.append("b")  # type: ignore[union-attr]
    rec.payload["k"].append(2)
    got = table.get("J#1")
    assert got is not None and got.job_ids == ["a"] and got.payload == {"k": [1]}
    got.job_ids.append("c")
    assert table.get("J#1").job_ids == ["a"]  # type: ignore[union-attr]


def test_clear_deletes_every_item(table: Table) -> None:
    for i in range(3):
        table.write(Put(_item(f"J#{i}", status_key="JOB#PENDING", status_at=f"2024-01-0{i + 1}")))
    table.clear()
    assert table.get_many(["J#0", "J#1", "J#2"]) == [] and table.count("JOB#PENDING") == 0


def test_a_missing_table_is_a_readable_error(aws: object) -> None:
    from dispatcher.aws.dynamodb import DynamoTable
    from dispatcher.domain.errors import ResourceMissing

    with pytest.raises(ResourceMissing, match="no-such-table"):
        DynamoTable("no-such-table").get("J#1")
    with pytest.raises(ResourceMissing):
        DynamoTable("no-such-table").transact([Put(_item("J#1"))])
