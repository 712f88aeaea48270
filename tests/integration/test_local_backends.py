"""The local backends' fixes: moto's TransactWriteItems without whole-table copies, its SQS
clock and atomic deletes, and the per-service endpoint (SQS on a second endpoint).

The transaction patch (``dispatcher.testing.moto.patch_transactions``) must keep moto's
behaviour exactly: the same commits, the same cancellation reasons, the same validation errors,
and after a rollback the same table, read back through the API (items and the GSI) and in moto's
own storage. Its cost is checked by counting deep copies, never by timing.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import random
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from moto.dynamodb.models import DynamoDBBackend

from dispatcher.aws import clients
from dispatcher.testing import moto as moto_patch
from dispatcher.testing.moto import MotoEndpoint
from dispatcher.testing.proxy import AwsProxy
from dispatcher.testing.sqs_clock import patch_sqs_clock
from dispatcher.wiring import adapters
from tests.conftest import BASE_ENV, Aws
from tests.helpers import wait_for

ACCOUNT, REGION = "123456789012", "us-east-1"
GSI = "by_status"


def _table_spec(name: str, range_key: bool) -> dict[str, Any]:
    """A table shaped like the job table (hash key + a GSI), optionally with a range key."""
    keys = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attrs = [{"AttributeName": "pk", "AttributeType": "S"},
             {"AttributeName": "status_key", "AttributeType": "S"},
             {"AttributeName": "status_at", "AttributeType": "S"}]
    if range_key:
        keys.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attrs.append({"AttributeName": "sk", "AttributeType": "S"})
    return {"TableName": name, "KeySchema": keys, "AttributeDefinitions": attrs,
            "BillingMode": "PAY_PER_REQUEST",
            "GlobalSecondaryIndexes": [{
                "IndexName": GSI, "Projection": {"ProjectionType": "ALL"},
                "KeySchema": [{"AttributeName": "status_key", "KeyType": "HASH"},
                              {"AttributeName": "status_at", "KeyType": "RANGE"}]}]}


def _key(pk: str, range_key: bool, sk: str = "a") -> dict[str, Any]:
    return {"pk": {"S": pk}, **({"sk": {"S": sk}} if range_key else {})}


def _item(pk: str, range_key: bool, status: str, at: str, sk: str = "a") -> dict[str, Any]:
    return {**_key(pk, range_key, sk), "status_key": {"S": status}, "status_at": {"S": at},
            "n": {"N": "1"}}


def test_the_patch_is_installed_by_start_moto(moto_server: MotoEndpoint) -> None:
    """A moto upgrade that drops the patch fails here: compare the two implementations again."""
    assert DynamoDBBackend.transact_write_items is moto_patch._transact_write_items
    assert moto_patch.moto_transact_write_items() is not moto_patch._transact_write_items


def test_the_sqs_clock_is_installed_by_start_moto_and_reads_motos_time(
        moto_server: MotoEndpoint) -> None:
    """A moto upgrade that renames SQS's clock fails here; the clock is the same time."""
    from moto.core import utils as moto_utils
    from moto.sqs import models as sqs_models

    assert getattr(sqs_models.unix_time, "direct_clock", False)
    assert patch_sqs_clock()  # idempotent: a second call keeps the one installed
    assert abs(sqs_models.unix_time() - moto_utils.unix_time()) < 1.0
    assert abs(sqs_models.unix_time_millis() - moto_utils.unix_time_millis()) < 1000.0
    when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    assert sqs_models.unix_time(when) == moto_utils.unix_time(when)


def test_on_the_sqs_clock_a_received_message_hides_until_its_visibility_ends(aws: Aws) -> None:
    """Visibility and the approximate counts, both read through the patched clock."""
    sqs = boto3.client("sqs", endpoint_url=aws.moto.url, region_name=REGION)
    url = sqs.create_queue(QueueName="clocked")["QueueUrl"]
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)}
                                                  for i in range(3)])

    def counts() -> tuple[int, int]:
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        return (int(attrs["ApproximateNumberOfMessages"]),
                int(attrs["ApproximateNumberOfMessagesNotVisible"]))

    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=4)
    assert len(got["Messages"]) == 2
    assert counts() == (1, 2)
    wait_for(lambda: counts() == (3, 0), what="the received messages visible again")
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60)
    assert len(again["Messages"]) == 3


def test_concurrent_deletes_on_one_queue_all_stick(moto_server: MotoEndpoint) -> None:
    """moto rebuilds a queue's message list on each delete; two at once lost one of them (the
    message stayed in flight after a successful DeleteMessageBatch). Installed by start_moto,
    the locked delete keeps every one. The threads switch every 0.1 ms so that, without the
    lock, deletes interleave (unlocked, this lost ~40% of them)."""
    import sys
    import threading

    from moto.sqs.models import sqs_backends

    from dispatcher.testing.sqs_deletes import patch_sqs_deletes

    assert patch_sqs_deletes()  # installed already; a second call keeps it
    backend = sqs_backends[ACCOUNT][REGION]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        for n in range(3):
            queue = backend.create_queue(f"deletes-{n}")
            for i in range(100):
                backend.send_message(queue.name, str(i))
            handles: list[str] = []
            while got := backend.receive_message(queue.name, 10, 0, 60):
                handles += [m.receipt_handle for m in got]
            assert len(handles) == 100
            threads = [threading.Thread(target=lambda part=handles[k::4], name=queue.name: [
                backend.delete_message(name, h) for h in part]) for k in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert queue._messages == []
            backend.delete_queue(queue.name)
    finally:
        sys.setswitchinterval(interval)


def test_a_reset_forgets_queues_tables_and_tasks_and_keeps_the_network(aws: Aws) -> None:
    """What one test made is gone for the next (provisioned anew), while EC2's default VPC,
    which RunTask's subnets are checked against and which is slow to rebuild, stays."""
    sqs, ddb, ecs, ec2 = (boto3.client(s, endpoint_url=aws.moto.url, region_name=REGION)
                          for s in ("sqs", "dynamodb", "ecs", "ec2"))
    sqs.create_queue(QueueName="made-by-this-test")
    vpcs = ec2.describe_vpcs()["Vpcs"]
    assert ddb.list_tables()["TableNames"] and ecs.list_clusters()["clusterArns"]
    aws.moto.reset()
    assert sqs.list_queues().get("QueueUrls", []) == []
    assert ddb.list_tables()["TableNames"] == [] and ecs.list_clusters()["clusterArns"] == []
    assert ec2.describe_vpcs()["Vpcs"] == vpcs and vpcs


# -- through the server, as the dispatcher and runners see it --------------------------------------
@pytest.fixture
def ddb(aws: Aws) -> Any:
    return boto3.client("dynamodb", endpoint_url=aws.moto.url, region_name=REGION)


def _visible_state(ddb: Any, table: str) -> tuple[list[Any], dict[str, list[Any]], int]:
    """Everything a client can read: the items, each GSI partition in order, the count."""
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    index = {status: ddb.query(TableName=table, IndexName=GSI,
                               KeyConditionExpression="status_key = :s",
                               ExpressionAttributeValues={":s": {"S": status}})["Items"]
             for status in ("JOB#PENDING", "JOB#RUNNING", "JOB#SUCCEEDED", "JOB#NEW")}
    count = ddb.describe_table(TableName=table)["Table"]["ItemCount"]
    return items, index, count


def _stored(table: Any) -> dict[Any, Any]:
    """moto's own storage of a table: every partition (even an empty one) and item."""
    if table.range_key_attr is None:
        return {h: item.to_json() for h, item in table.items.items()}
    return {h: {r: item.to_json() for r, item in part.items()}
            for h, part in table.items.items()}


def _moto_table(name: str) -> Any:
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[ACCOUNT][REGION].get_table(name)


@pytest.mark.parametrize("range_key", [False, True], ids=["hash", "hash+range"])
def test_a_cancelled_transaction_leaves_the_table_as_it_was(ddb: Any, range_key: bool) -> None:
    table = "tx-rollback"
    ddb.create_table(**_table_spec(table, range_key))
    for i in range(12):
        ddb.put_item(TableName=table, Item=_item(f"JOB#{i:02d}", range_key,
                                                 ("JOB#PENDING", "JOB#RUNNING")[i % 2],
                                                 f"2026-01-01T00:00:{i:02d}"))
    before, stored = _visible_state(ddb, table), _stored(_moto_table(table))

    actions: list[dict[str, Any]] = [
        # a new item in a new partition, visible in the index
        {"Put": {"TableName": table, "Item": _item("JOB#new", range_key, "JOB#NEW", "t1"),
                 "ConditionExpression": "attribute_not_exists(pk)"}},
        # an existing item replaced, moving it to another index partition
        {"Put": {"TableName": table, "Item": _item("JOB#00", range_key, "JOB#SUCCEEDED", "t2")}},
        # an existing item updated in place (moto mutates the stored Item object)
        {"Update": {"TableName": table, "Key": _key("JOB#01", range_key),
                    "UpdateExpression": "SET status_key = :s, n = n + :one",
                    "ExpressionAttributeValues": {":s": {"S": "JOB#SUCCEEDED"},
                                                  ":one": {"N": "1"}}}},
        # an existing item deleted
        {"Delete": {"TableName": table, "Key": _key("JOB#02", range_key)}},
        # an update that creates an item
        {"Update": {"TableName": table, "Key": _key("JOB#created", range_key),
                    "UpdateExpression": "SET status_key = :s, status_at = :t",
                    "ExpressionAttributeValues": {":s": {"S": "JOB#NEW"}, ":t": {"S": "t3"}}}},
        # a check that passes on an item that does not exist (a lookup in a new partition)
        {"ConditionCheck": {"TableName": table, "Key": _key("JOB#absent", range_key),
                            "ConditionExpression": "attribute_not_exists(pk)"}},
    ]
    if range_key:  # a second item in a partition that exists: only that item goes again
        actions.append({"Put": {"TableName": table, "Item": _item(
            "JOB#03", range_key, "JOB#NEW", "t4", sk="b")}})
    # ... and one that fails, with the old item returned
    actions.append({"ConditionCheck": {
        "TableName": table, "Key": _key("JOB#04", range_key),
        "ConditionExpression": "attribute_not_exists(pk)",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD"}})

    with pytest.raises(ddb.exceptions.TransactionCanceledException) as raised:
        ddb.transact_write_items(TransactItems=actions)
    reasons = raised.value.response["CancellationReasons"]
    assert [r["Code"] for r in reasons] == ["None"] * (len(actions) - 1) + [
        "ConditionalCheckFailed"]
    assert reasons[-1]["Item"]["pk"] == {"S": "JOB#04"}
    assert _visible_state(ddb, table) == before
    assert _stored(_moto_table(table)) == stored

    # Two actions on one item: a validation error after the first ran; rolled back as well.
    with pytest.raises(botocore.exceptions.ClientError) as invalid:
        ddb.transact_write_items(TransactItems=[actions[1], actions[1]])
    assert invalid.value.response["Error"]["Code"] == "ValidationException"
    assert _visible_state(ddb, table) == before
    assert _stored(_moto_table(table)) == stored

    # Without the failing action the same transaction commits, all of it.
    ddb.transact_write_items(TransactItems=actions[:-1])
    items, index, count = _visible_state(ddb, table)
    assert count == len(before[0]) + (3 if range_key else 2) - 1
    assert [i["pk"]["S"] for i in index["JOB#NEW"]] == ["JOB#new", "JOB#created"] + (
        ["JOB#03"] if range_key else [])
    assert {i["pk"]["S"] for i in index["JOB#SUCCEEDED"]} == {"JOB#00", "JOB#01"}
    assert "JOB#02" not in {i["pk"]["S"] for i in items}


# -- the same transactions against moto's own implementation ---------------------------------------
def _backend(range_key: bool) -> Any:
    backend = DynamoDBBackend(REGION, ACCOUNT)
    spec = _table_spec("t", range_key)
    backend.create_table("t", schema=spec["KeySchema"], throughput=None,
                         attr=spec["AttributeDefinitions"],
                         global_indexes=spec["GlobalSecondaryIndexes"], indexes=None,
                         streams={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
                         billing_mode="PAY_PER_REQUEST", sse_specification=None, tags=[],
                         deletion_protection_enabled=False, warm_throughput=None)
    return backend


def _random_transaction(rng: random.Random, range_key: bool) -> list[dict[str, Any]]:
    actions = []
    for _ in range(rng.randint(1, 8)):
        pk, sk = f"JOB#{rng.randint(0, 9)}", rng.choice("ab")
        key = _key(pk, range_key, sk)
        kind = rng.choice(["Put", "Put", "Update", "Delete", "ConditionCheck", "Bad"])
        cond = rng.choice([None, "attribute_exists(pk)", "attribute_not_exists(pk)"])
        op: dict[str, Any] = {"TableName": "t"}
        if kind == "Put":
            op["Item"] = _item(pk, range_key, rng.choice(["JOB#PENDING", "JOB#RUNNING"]),
                               f"t{rng.randint(0, 99)}", sk)
        elif kind == "Bad":  # a key the table does not have: moto's ValidationException path
            kind, op["Key"] = "Delete", {"other": {"S": pk}}
        else:
            op["Key"] = key
        if kind == "Update":
            op["UpdateExpression"] = "SET status_key = :s ADD n :one"
            op["ExpressionAttributeValues"] = {":s": {"S": "JOB#RUNNING"}, ":one": {"N": "1"}}
        if kind == "ConditionCheck" and cond is None:
            cond = "attribute_exists(pk)"
        if cond is not None:
            op["ConditionExpression"] = cond
        actions.append({kind: op})
    return actions


def _outcome(run: Any, backend: Any, actions: list[dict[str, Any]]) -> Any:
    try:
        run(backend, copy.deepcopy(actions))
    except Exception as exc:
        return type(exc).__name__, str(exc), getattr(exc, "description", None)
    return "committed"


def _state(backend: Any) -> tuple[Any, int, Any]:
    table = backend.get_table("t")
    stream = [(r.record["eventName"], r.record["dynamodb"]["Keys"])
              for r in table.stream_shard.items]
    return _stored(table), len(table), stream


@pytest.mark.parametrize("range_key", [False, True], ids=["hash", "hash+range"])
def test_the_patch_does_what_motos_own_transactions_do(range_key: bool) -> None:
    """100 random transactions (commits, failed conditions, duplicates, bad keys) on two
    backends, one with moto's implementation and one with the patch: same answers, same
    storage (partitions, items, stream records) after every one."""
    theirs, ours = _backend(range_key), _backend(range_key)
    original = moto_patch.moto_transact_write_items()
    rng = random.Random(11)
    outcomes = set()
    for _ in range(100):
        actions = _random_transaction(rng, range_key)
        expected = _outcome(original, theirs, actions)
        got = _outcome(moto_patch._transact_write_items, ours, actions)
        assert got == expected, actions
        assert _state(ours) == _state(theirs), actions
        outcomes.add(expected if isinstance(expected, str) else expected[0])
    # the run covered every path
    assert outcomes >= {"committed", "TransactionCanceledException",
                        "MultipleTransactionsException", "MockValidationException"}


def test_concurrent_transactions_never_undo_each_others_writes() -> None:
    """The server answers each request on a thread of its own. Each transaction adds 1 to a
    counter and checks an item that exists for half of them; some threads add 1 with plain
    writes: a cancelled transaction puts back what it saved of the counter, which must never
    undo a write made meanwhile (it did: a follow-on's take, or its claim, undone by another
    runner's take of the same follow-on, rolled back)."""
    assert moto_patch.patch_transactions()  # the single writes' lock too (idempotent)
    backend = _backend(False)
    backend.put_item("t", _item("COUNT", False, "X", "t0"))
    backend.put_item("t", _item("THERE", False, "X", "t0"))
    committed: list[int] = []

    def worker(n: int) -> None:
        for i in range(40):
            if n % 4 == 3:  # a plain write (a claim, a heartbeat) among the transactions
                backend.update_item("t", {"pk": {"S": "COUNT"}}, update_expression="ADD n :one",
                                    expression_attribute_names=None,
                                    expression_attribute_values={":one": {"N": "1"}})
                committed.append(1)
                continue
            check = "THERE" if (n + i) % 2 else "ABSENT"
            try:
                moto_patch._transact_write_items(backend, [
                    {"Update": {"TableName": "t", "Key": {"pk": {"S": "COUNT"}},
                                "UpdateExpression": "ADD n :one",
                                "ExpressionAttributeValues": {":one": {"N": "1"}}}},
                    {"ConditionCheck": {"TableName": "t", "Key": {"pk": {"S": check}},
                                        "ConditionExpression": "attribute_exists(pk)"}}])
            except Exception:  # cancelled: the check failed
                continue
            committed.append(1)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    count = backend.get_item("t", {"pk": {"S": "COUNT"}}).attrs["n"].value
    assert len(committed) == 120 + 80 and int(count) == 1 + len(committed)


# -- cost: copies of what the transaction touches, not of the table --------------------------------
@pytest.fixture
def deep_copies(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Top-level ``copy.deepcopy`` calls by the copied object's type (recursion not counted)."""
    counts: dict[str, int] = {}
    real = copy.deepcopy

    def counting(x: Any, memo: Any = None, _nil: Any = None) -> Any:
        if memo is None:
            counts[type(x).__name__] = counts.get(type(x).__name__, 0) + 1
        return real(x, memo)

    monkeypatch.setattr(copy, "deepcopy", counting)
    return counts


def _fill(backend: Any, n: int) -> None:
    for i in range(n):
        backend.put_item("t", _item(f"JOB#old-{i:05d}", False, "JOB#SUCCEEDED", f"t{i}"))


def _copies_for_99_actions(n_items: int, fail: bool, deep_copies: dict[str, int],
                           run: Any = moto_patch._transact_write_items) -> dict[str, int]:
    backend = _backend(False)
    _fill(backend, n_items)
    actions: list[dict[str, Any]] = [
        {"Put": {"TableName": "t", "Item": _item(f"JOB#new-{j}", False, "JOB#PENDING", "t"),
                 "ConditionExpression": "attribute_not_exists(pk)"}} for j in range(97)]
    actions.append({"Update": {"TableName": "t", "Key": _key("JOB#old-00001", False),
                               "UpdateExpression": "SET status_key = :s",
                               "ExpressionAttributeValues": {":s": {"S": "JOB#RUNNING"}}}})
    actions.append({"Put": {"TableName": "t", "Item": _item(
        "JOB#old-00002" if fail else "BUNDLE#1", False, "BUNDLE#PENDING", "t"),
        "ConditionExpression": "attribute_not_exists(pk)"}})
    deep_copies.clear()
    outcome = _outcome(run, backend, actions)
    assert (outcome == "committed") is not fail
    assert len(backend.get_table("t")) == n_items + (0 if fail else 98)
    return dict(deep_copies)


@pytest.mark.parametrize("fail", [False, True], ids=["committed", "cancelled"])
def test_a_transaction_copies_only_the_items_it_touches(deep_copies: dict[str, int],
                                                        fail: bool) -> None:
    small = _copies_for_99_actions(100, fail, deep_copies)
    large = _copies_for_99_actions(2_000, fail, deep_copies)
    assert small == large  # nothing depends on the table's size
    assert "Table" not in large
    # The transaction's deep copy of each existing item it touches (the updated one, and the
    # failing Put's target), moto's own pre-image in update_item, the actions list.
    assert large.get("Item", 0) <= 3


def test_motos_own_transaction_copies_the_table_per_action(deep_copies: dict[str, int]) -> None:
    """What the patch removes (kept as a measurement: 99 whole-table copies per transaction)."""
    copies = _copies_for_99_actions(100, False, deep_copies,
                                    run=moto_patch.moto_transact_write_items())
    assert copies["Table"] == 99


# -- per-service endpoints -------------------------------------------------------------------------
@pytest.fixture
def sqs_proxy(moto_server: MotoEndpoint) -> Iterator[AwsProxy]:
    """A second endpoint, told apart by its own call counts. (A second moto server would not
    do: servers in one process share moto's backends, so a queue made on one is on both.)"""
    with AwsProxy(moto_server.url) as p:
        yield p


def test_sqs_goes_to_its_own_endpoint_and_the_rest_to_the_global_one(
        aws: Aws, sqs_proxy: AwsProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", sqs_proxy.url)
    cfg = aws.config()
    assert cfg.endpoint_url == aws.proxy.url
    sqs, ecs = adapters.client("sqs", cfg), adapters.client("ecs", cfg)
    assert sqs.meta.endpoint_url == sqs_proxy.url
    assert ecs.meta.endpoint_url == aws.proxy.url
    assert clients.endpoint_client("dynamodb", aws.proxy.url, REGION).meta.endpoint_url == \
        aws.proxy.url
    aws.proxy.reset_counts()
    sqs.send_message(QueueUrl=aws.env["LONGJOBS_QUEUE_URL"], MessageBody="x")
    ecs.list_clusters()
    assert sqs_proxy.counts() == {"sqs.SendMessage": 1}
    assert aws.proxy.counts() == {"ecs.ListClusters": 1}


def test_without_a_service_endpoint_every_client_uses_the_global_one(
        aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_SQS", raising=False)
    cfg = aws.config()
    assert adapters.client("sqs", cfg).meta.endpoint_url == aws.proxy.url
    assert adapters.client("ecs", cfg).meta.endpoint_url == aws.proxy.url


def test_local_mode_puts_its_queues_on_the_sqs_endpoint(
        moto_server: MotoEndpoint, proxy: AwsProxy, sqs_proxy: AwsProxy) -> None:
    """LocalEnv(sqs_endpoint=...): the queues are made there, the table and cluster on the
    main endpoint, and every client (dispatcher, producers, tasks through the env) told so."""
    from dispatcher.local.environment import LocalEnv
    from dispatcher.ops.client import JobClient

    saved = dict(os.environ)
    moto_server.reset()
    moto_server.pin_ecs_tasks()
    proxy.reset_counts()
    env = LocalEnv(endpoint=proxy.url, sqs_endpoint=sqs_proxy.url, tick_seconds=3600,
                   stream_endpoint=moto_server.url)
    try:
        env.start()
        assert env.env["AWS_ENDPOINT_URL_SQS"] == sqs_proxy.url
        assert f"export AWS_ENDPOINT_URL_SQS={sqs_proxy.url}" in env.exports()
        made_here, made_there = sqs_proxy.counts(), proxy.counts()
        assert made_here["sqs.CreateQueue"] >= 2  # the queue(s) and the DLQ
        assert not any(op.startswith("sqs.") for op in made_there)
        assert made_there["dynamodb.CreateTable"] == 1
        assert made_there["ecs.CreateCluster"] == 1
        JobClient().submit("demo.sleep", {"seconds": 0}, job_id="on-the-second")
        assert sqs_proxy.counts()["sqs.SendMessageBatch"] == 1
        assert adapters.client("sqs", env.cfg).meta.endpoint_url == sqs_proxy.url
    finally:
        env.stop()
        assert os.environ.get("AWS_ENDPOINT_URL_SQS") == saved.get("AWS_ENDPOINT_URL_SQS")
        os.environ.clear()
        os.environ.update(saved)


# -- MiniStack as the SQS endpoint (only where `make ministack` built it) -------------------------
def _ministack_or_skip() -> Any:
    from dispatcher.local.ministack import MiniStackUnavailable, find_ministack, start_ministack

    try:
        find_ministack()
    except MiniStackUnavailable as exc:
        pytest.skip(str(exc))
    return start_ministack("sqs")


def test_ministack_keeps_the_queue_contract_the_dispatcher_relies_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the adapter uses of SQS: batches of 10, visibility, redrive to the DLQ after
    maxReceiveCount, the attributes local mode provisions with, and a stale-handle delete."""
    from dispatcher.local.provision import DLQ_ATTRIBUTES, QUEUE_ATTRIBUTES

    for k, v in BASE_ENV.items():
        monkeypatch.setenv(k, v)
    with _ministack_or_skip() as ministack:
        sqs = clients.endpoint_client("sqs", ministack.url, REGION)
        dlq = sqs.create_queue(QueueName="d", Attributes=DLQ_ATTRIBUTES)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])[
            "Attributes"]["QueueArn"]
        url = sqs.create_queue(QueueName="q", Attributes={
            **QUEUE_ATTRIBUTES, "VisibilityTimeout": "0",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "2"})})[
            "QueueUrl"]
        sent = sqs.send_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "MessageBody": f"m{i}"} for i in range(10)])
        assert len(sent["Successful"]) == 10
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                  AttributeNames=["All"])["Messages"]
        assert sorted(m["Body"] for m in got) == [f"m{i}" for i in range(10)]
        deleted = sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[:9])])
        assert len(deleted["Successful"]) == 9
        # the tenth, received twice and never deleted, goes to the dead-letter queue
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
        assert [m["Body"] for m in again] == [got[9]["Body"]]
        assert sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages",
                                                                              []) == []
        dead = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10)["Messages"]
        assert [m["Body"] for m in dead] == [got[9]["Body"]]
