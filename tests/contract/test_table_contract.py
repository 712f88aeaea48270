"""The Table port's contract: MemoryTable (the twin) and DynamoTable (pynamodb on moto) answer
alike, op by op: conditions, update actions, transactions and their per-item reasons, the
status index (its projection too). Every test runs on both, so the twin cannot drift from
the adapter."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.aws.dynamodb import DynamoTable
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
    Lacks,
    Le,
    Lt,
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
from dispatcher.store import index
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
    (Has("state"), True), (Has("kind"), False), (Lacks("kind"), True), (Lacks("state"), False),
    (Lt("state", "Q"), True), (Gt("state", "P"), False),  # strings compare too
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


def test_a_transaction_with_a_token_is_done_once(table: Table) -> None:
    ops = [Put(_item("T#1", state="PENDING", reason="PENDING"), Absent()),
           Update("T#2", [Add("attempts", 1)])]
    table.transact(ops, token="tok-1")  # type: ignore[arg-type]
    assert table.get("T#1") is not None
    if isinstance(table, DynamoTable):
        pytest.skip("moto ignores ClientRequestToken (DynamoDB replays a success for 10 min)")
    table.transact(ops, token="tok-1")  # type: ignore[arg-type]  # the retry of a lost answer
    # A retry made anew: equal ops whose equal values are distinct objects, not shared ones.
    rebuilt = [Put(_item("T#1", state="".join(["PEN", "DING"]), reason="".join(["PEN", "DING"])),
                   Absent()),
               Update("T#2", [Add("attempts", 1)])]
    table.transact(rebuilt, token="tok-1")  # type: ignore[arg-type]
    assert table.get("T#2").attempts == 1  # type: ignore[union-attr]
    with pytest.raises(TransactionCancelled):
        table.transact(ops, token="tok-2")  # type: ignore[arg-type]  # a new request
    with pytest.raises(TableUnavailable, match="IdempotentParameterMismatch"):
        table.transact([Put(_item("T#3"))], token="tok-1")  # the token, other ops


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
    # Every kind but "a", or none (the due-bundle read's filter: the port has no inequality).
    table.write(Put(_item("B#n", status_key="BUNDLE#PENDING", status_at="2024-01-05")))
    not_a = Or(Lacks("kind"), And(Or(Lt("kind", "a"), Gt("kind", "a"))))
    assert pks(table.query("BUNDLE#PENDING", where=not_a)) == ["B#2", "B#0", "B#n"]
    assert pks(table.query("BUNDLE#PENDING", where=not_a, limit=2)) == ["B#2", "B#0"]


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


# -- DynamoDB's item-size and number limits: both refuse alike, with InvalidTransaction -------
# An item is at most 400 KB; a number is 0 or has a magnitude from 1E-130 to
# 9.9999999999999999999999999999999999999E+125 (NaN/Infinity are not numbers).
# https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.NamingRulesDataTypes.html
_ZEROS = [0] * 150_000  # compact JSON: 300,001 bytes; with ", " separators: 450,000


def test_json_attributes_are_stored_compactly(table: Table) -> None:
    table.write(Put(_item("J#1", payload={"xs": _ZEROS})))
    table.transact([Put(_item("J#2", payload={"xs": _ZEROS})),
                    Update("J#3", [Set("result", {"xs": _ZEROS})])])
    for pk, attr in [("J#1", "payload"), ("J#2", "payload"), ("J#3", "result")]:
        got = table.get(pk)
        assert got is not None and getattr(got, attr) == {"xs": _ZEROS}


@pytest.mark.parametrize("record", [
    _item("L#1", body="x" * 420_000),
    _item("L#1", payload={"s": "x" * 420_000}),
    _item("L#1", estimated_seconds=1e300),
    _item("L#1", estimated_seconds=-1e300),
    _item("L#1", timeout_seconds=1e-200),
    _item("L#1", estimated_seconds=float("inf")),
    _item("L#1", estimated_seconds=float("nan")),
    _item("L#1", payload={"x": {1, 2}}),
], ids=["size-string", "size-json", "overflow", "negative-overflow", "underflow", "inf",
        "nan", "not-json"])
def test_an_item_dynamodb_refuses_is_refused_alike(table: Table, record: Record) -> None:
    table.write(Put(_item("L#0", state="kept")))
    with pytest.raises(InvalidTransaction):
        table.write(Put(record))
    with pytest.raises(InvalidTransaction):
        table.transact([Put(record), Put(_item("L#2", state="x"))])
    # refused before any condition is evaluated (the store's probe relies on it)
    with pytest.raises(InvalidTransaction):
        table.write(Put(record, Exists()))
    with pytest.raises(InvalidTransaction):
        table.transact([Put(record, Absent()), Check("L#never", Exists())])
    assert table.get("L#1") is None and table.get("L#2") is None
    assert table.get("L#0").state == "kept"  # type: ignore[union-attr]


@pytest.mark.parametrize("action", [Set("estimated_seconds", 1e300),
                                    Set("timeout_seconds", 1e-131),
                                    Set("attempt", float("inf")),
                                    Set("result", {"v": object()}),
                                    Set("reason", "x" * 420_000)],
                         ids=["overflow", "underflow", "inf", "not-json", "size"])
def test_an_update_dynamodb_refuses_is_refused_alike(table: Table, action: Set) -> None:
    table.write(Put(_item("U#1", state="P", attempt=1)))
    with pytest.raises(InvalidTransaction):
        table.write(Update("U#1", [action]))
    with pytest.raises(InvalidTransaction):
        table.transact([Update("U#1", [action])])
    got = table.get("U#1")
    assert got is not None and (got.state, got.attempt, got.reason) == ("P", 1, None)


def test_numbers_inside_json_attributes_are_characters_of_a_string(table: Table) -> None:
    # out of DynamoDB's number range, even NaN/Infinity (a handler's result may hold one)
    doc = {"big": 1e300, "tiny": 1e-300, "inf": float("inf"), "nan": float("nan")}
    table.write(Put(_item("JN#1", payload=doc)))
    table.transact([Update("JN#2", [Set("result", doc)])])
    for pk, attr in [("JN#1", "payload"), ("JN#2", "result")]:
        got = getattr(table.get(pk), attr)
        assert (got["big"], got["tiny"], got["inf"]) == (1e300, 1e-300, float("inf"))
        assert got["nan"] != got["nan"]  # NaN


def test_numbers_at_the_edges_of_the_range_are_stored(table: Table) -> None:
    table.write(Put(_item("N#1", estimated_seconds=9.9e125, timeout_seconds=1.5e-130,
                          attempt=0, lease_until=-9.9e125)))
    got = table.get("N#1")
    assert got is not None
    assert (got.estimated_seconds, got.timeout_seconds, got.attempt, got.lease_until) == (
        9.9e125, 1.5e-130, 0, -9.9e125)


def test_a_valid_item_with_a_failed_check_is_only_cancelled(table: Table) -> None:
    with pytest.raises(TransactionCancelled) as caught:
        table.transact([Put(_item("P#1", payload={"ok": 1}), Absent()),
                        Check("P#never", Exists())])
    assert caught.value.reasons == [None, "ConditionalCheckFailed"]
    assert table.get("P#1") is None


def test_reasons_follow_the_ops_order_whatever_their_types(table: Table) -> None:
    # pynamodb sends checks, deletes, puts, updates in that order; reasons still follow ours
    for pk in ("O#1", "O#2", "O#4"):
        table.write(Put(_item(pk, state="a")))
    with pytest.raises(TransactionCancelled) as caught:
        table.transact([Update("O#1", [Set("state", "b")], Eq("state", "zzz")),
                        Put(_item("O#3", state="c")),
                        Delete("O#2", Eq("state", "a")),
                        Check("O#4", Exists())])
    assert caught.value.reasons == ["ConditionalCheckFailed", None, None, None]
    with pytest.raises(TransactionCancelled) as caught:
        table.transact([Put(_item("O#3", state="c")), Check("O#5", Exists())])
    assert caught.value.reasons == [None, "ConditionalCheckFailed"]
    assert table.get("O#3") is None and table.get("O#2") is not None


def test_the_index_holds_only_what_it_projects_and_filters_on_that(table: Table) -> None:
    table.write(Put(_item("J#1", status_key="JOB#RUNNING#0", status_at="t1", kind="k",
                          timeout_seconds=60, payload={"big": "x" * 100}, history=[{"a": 1}],
                          checkpoint={"c": 1}, expires_at=5)))
    (row,) = table.query("JOB#RUNNING#0")
    assert (row.pk, row.status_key, row.status_at, row.kind, row.timeout_seconds) == (
        "J#1", "JOB#RUNNING#0", "t1", "k", 60)
    assert (row.payload, row.history, row.checkpoint, row.expires_at) == (None,) * 4
    # A filter on an attribute the index does not hold finds nothing, on both backends.
    assert table.query("JOB#RUNNING#0", where=Has("payload")) == []
    assert table.count("JOB#RUNNING#0", where=Has("payload")) == 0
    assert index.full(table, [row])[0].payload == {"big": "x" * 100}


def test_shards_read_as_one_index_in_order_with_limits(table: Table) -> None:
    """Items spread over shards (and the unsharded key of before) merge into one order by
    status_at (ties by pk), newest first if asked, cut at the limit after the filter."""
    ats = {"a": "t5", "b": "t1", "c": "t3", "d": "t3", "e": "t2", "f": "t4", "g": "t0"}
    keys = [f"JOB#PENDING#{n}" for n in range(3)] + ["JOB#PENDING"]
    for i, (name, at) in enumerate(ats.items()):
        table.write(Put(_item(f"J#{name}", status_key=keys[i % len(keys)], status_at=at,
                              kind="odd" if i % 2 else "even")))
    table.write(Put(_item("J#z", status_key="JOB#RUNNING#0", status_at="t0")))

    def pks(rows: list[Record]) -> list[str]:
        return [r.pk.removeprefix("J#") for r in rows]

    assert pks(index.query(table, keys)) == ["g", "b", "e", "c", "d", "f", "a"]
    assert pks(index.query(table, keys, limit=3)) == ["g", "b", "e"]
    assert pks(index.query(table, keys, newest_first=True, limit=4)) == ["a", "f", "d", "c"]
    assert pks(index.query(table, keys, at_least="t2", at_most="t4")) == ["e", "c", "d", "f"]
    assert pks(index.query(table, keys, where=Eq("kind", "odd"), newest_first=True,
                           limit=2)) == ["f", "d"]
    assert index.query(table, keys, limit=0) == []
    assert index.count(table, keys) == 7
    assert index.count(table, keys, at_least="t3") == 4
    assert index.count(table, keys, where=Eq("kind", "even")) == 4
    # Each shard is asked for at most the limit: the merge reads no more than that per key.
    asked: list[int | None] = []
    original = table.query

    def spy(key: str, **kwargs: Any) -> list[Record]:
        asked.append(kwargs.get("limit"))
        return original(key, **kwargs)

    table.query = spy  # type: ignore[method-assign]
    assert len(index.query(table, keys, limit=2)) == 2
    assert asked == [2] * len(keys)
