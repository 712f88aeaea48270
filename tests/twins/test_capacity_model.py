"""The capacity model's rules (dispatcher.testing.capacity), on hand-made item changes: what
DynamoDB charges for a write to the table and to an index, and which partition key takes it."""

from __future__ import annotations

from typing import Any

from dispatcher.ports.record import INDEX_ATTRIBUTES
from dispatcher.testing.capacity import TABLE, IndexSpec, model, unsharded
from dispatcher.testing.item_changes import ItemChange, ReadSizes, item_bytes, value_bytes
from dispatcher.testing.proxy import RecordedCall

INCLUDE = IndexSpec("shard", "status_key", "status_at", "INCLUDE", frozenset(INDEX_ATTRIBUTES))
ALL = IndexSpec("all", "status_key", "status_at", "ALL")


def job(state: str, *, payload: int = 10, at: str = "t0", **more: Any) -> dict[str, Any]:
    return {"pk": {"S": "JOB#a"}, "status_key": {"S": f"JOB#{state}#3"},
            "status_at": {"S": at}, "state": {"S": state}, "payload": {"S": "x" * payload},
            **{k: {"N": str(v)} for k, v in more.items()}}


def call(*changes: ItemChange) -> RecordedCall:
    return RecordedCall("test", "dynamodb.TransactWriteItems", {}, items=changes)


def test_sizes_follow_dynamodb_rules() -> None:
    assert value_bytes({"S": "héllo"}) == 6
    assert value_bytes({"N": "12345"}) == 4  # 3 bytes of digits, one more
    assert value_bytes({"L": [{"S": "ab"}, {"BOOL": True}]}) == 3 + (1 + 2) + (1 + 1)
    assert item_bytes({"pk": {"S": "JOB#a"}}) == 2 + 5


def test_a_new_item_writes_the_table_and_each_index_it_is_in() -> None:
    cap = model([call(ItemChange("t", None, job("PENDING"), transactional=False))], 1,
                [INCLUDE, ALL])
    assert cap.writes == {(TABLE, "JOB#a"): 1, ("shard", "JOB#PENDING#3"): 1,
                          ("all", "JOB#PENDING#3"): 1}


def test_a_key_change_is_a_delete_and_a_put_and_a_transaction_doubles_only_the_table() -> None:
    cap = model([call(ItemChange("t", job("PENDING"), job("RUNNING"), transactional=True))], 1,
                [INCLUDE])
    assert cap.writes == {(TABLE, "JOB#a"): 2, ("shard", "JOB#PENDING#3"): 1,
                          ("shard", "JOB#RUNNING#3"): 1}
    # As before sharding, both entries are counted under the state's one partition key.
    old = model([call(ItemChange("t", job("PENDING"), job("RUNNING")))], 1, [INCLUDE],
                partition=unsharded)
    assert set(old.writes) == {(TABLE, "JOB#a"), ("shard", "JOB#PENDING"),
                               ("shard", "JOB#RUNNING")}


def test_only_a_projected_change_writes_the_index_and_at_its_projected_size() -> None:
    big = job("RUNNING", payload=2800)
    checkpointed = dict(big, checkpoint={"S": "y" * 500})  # not projected by INCLUDE
    cap = model([call(ItemChange("t", big, checkpointed))], 1, [INCLUDE, ALL])
    assert cap.writes == {(TABLE, "JOB#a"): 4, ("all", "JOB#RUNNING#3"): 4}
    moved = model([call(ItemChange("t", big, job("SUCCEEDED", payload=2800)))], 1,
                  [INCLUDE, ALL])
    # INCLUDE leaves the payload out: one unit per entry, where ALL writes the whole item.
    assert moved.writes[("shard", "JOB#RUNNING#3")] == 1
    assert moved.writes[("all", "JOB#RUNNING#3")] == 3
    assert moved.wcu_per_job("all") == 6 and moved.wcu_per_job("shard") == 2


def test_a_refused_write_is_charged_to_the_table_only() -> None:
    cap = model([call(ItemChange("t", job("PENDING"), job("PENDING"), done=False))], 1,
                [INCLUDE])
    assert cap.writes == {(TABLE, "JOB#a"): 1}


def test_reads_round_per_item_or_per_answer() -> None:
    gets = RecordedCall("t", "dynamodb.BatchGetItem", {},
                        read=ReadSizes((100, 5000), 2, True, True))
    query = RecordedCall("t", "dynamodb.Query", {}, read=ReadSizes((100,) * 10, 50, False, False))
    counted = RecordedCall("t", "dynamodb.Query", {}, read=ReadSizes((), 100, False, False))
    assert model([gets], 1, []).reads == 1 + 2
    assert model([query], 1, []).reads == 0.5 * 2  # 50 read x 100 bytes: 5,000 bytes
    assert model([counted], 1, []).reads == 0.5 * 8  # 100 entries x 300 bytes


def test_the_hottest_key_and_the_rate_it_allows() -> None:
    changes = [ItemChange("t", None, job("PENDING")), ItemChange("t", job("PENDING"), None)]
    cap = model([call(*changes)], 4, [INCLUDE])
    assert cap.hottest("shard") == ("shard", "JOB#PENDING#3", 0.5)
    assert cap.rate("shard", 1000) == 500
    assert cap.max_jobs_per_second() == 2000
