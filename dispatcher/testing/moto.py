"""Start moto's server in-process for tests and local mode.

Server mode (not ``mock_aws``) is used because the job runner runs as a second process and
must reach the same fake AWS over HTTP.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import urllib.request
from dataclasses import dataclass
from typing import Any

from moto.server import ThreadedMotoServer

from dispatcher.testing.moto_speed import patch_moto_speed
from dispatcher.testing.sqs_clock import patch_sqs_clock
from dispatcher.testing.sqs_deletes import patch_sqs_deletes

__all__ = ["MotoEndpoint", "patch_transactions", "start_moto"]

log = logging.getLogger("longjobs.moto")

# Services whose state outlives MotoEndpoint.reset (see there).
KEPT_ON_RESET = frozenset({"ec2"})


class MotoEndpoint:
    """A running moto server plus the control-plane calls tests need (reset, task pinning)."""

    def __init__(self, server: ThreadedMotoServer, url: str) -> None:
        self._server = server
        self.url = url

    def _post(self, path: str, body: bytes = b"", content_type: str = "application/json") -> None:
        request = urllib.request.Request(  # noqa: S310 - always our own http://127.0.0.1 URL
            self.url + path, data=body, method="POST", headers={"Content-Type": content_type}
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            response.read()

    def reset(self) -> None:
        """Clear every backend but EC2's so tests don't see each other's queues, tables and tasks.

        EC2 is kept because what it holds is the network tasks run in (the default VPC and
        its subnets) and the interfaces RunTask attaches there, which nothing reads back;
        rebuilding it (moto makes the default VPC on first use after a reset) took ~2 s of
        every test that provisions. moto's own ``/moto-api/reset`` clears everything, so this
        does what it does (reset, then forget, each service's backends) for the other
        services, here, where the server runs (a thread of this process).

        The state manager's transitions are global and survive a reset; call
        :meth:`pin_ecs_tasks` again only if something unset them.
        """
        from moto.core.base_backend import BackendDict, backend_lock

        instances: list[Any] = BackendDict._instances  # type: ignore[misc]  # (as moto's)
        with backend_lock:
            for backends in list(instances):
                if backends.service_name in KEPT_ON_RESET:
                    continue
                for account in backends.values():
                    account.reset()
                backends.clear()
                instances.remove(backends)
        release_model_copies()

    def pin_ecs_tasks(self) -> None:
        """Keep ECS tasks RUNNING instead of advancing one state per DescribeTasks call.

        moto otherwise walks every task to STOPPED on its own (without a stopCode), which makes
        tests that poll task state race against the emulator rather than against our code.
        """
        transition: dict[str, Any] = {"progression": "manual", "times": 1_000_000}
        body = json.dumps({"model_name": "ecs::task", "transition": transition}).encode()
        self._post("/moto-api/state-manager/set-transition", body)

    def stop(self) -> None:
        """Shut the server down and join its thread."""
        self._server.stop()

    def __enter__(self) -> MotoEndpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_moto() -> MotoEndpoint:
    """Start moto on 127.0.0.1 with an OS-assigned port and return its endpoint.

    Port 0 lets the kernel pick the port when binding, so parallel test sessions cannot race
    for a port probed as free beforehand.
    """
    # werkzeug logs one line per request at INFO; with a polling dispatcher that drowns output.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    patch_transactions()
    patch_sqs_clock()
    patch_sqs_deletes()
    patch_moto_speed()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return MotoEndpoint(server, f"http://{host}:{port}")


def release_model_copies() -> None:
    """Work around a moto (5.2) leak that otherwise sinks long local runs.

    The registry behind moto's web dashboard (``instances_tracked``) keeps every model object
    it ever made alive. Unpatched, moto deep-copies the whole table for every action of a
    TransactWriteItems call (its rollback copy; :func:`patch_transactions` removes that), and
    the registry kept every copy: ~10 M objects by the end of a 500-job run, multi-second GC
    pauses inside the endpoint (which serves the runners' heartbeats too) and a 10 s interpreter
    exit. The registry only feeds that dashboard; moto's own reset clears it the same way.
    """
    try:
        from moto.core.model_instances import reset_model_data
    except ImportError:
        return
    reset_model_data()


def release_stream_iterators(keep: int = 100) -> int:
    """Forget all but the ``keep`` newest DynamoDB stream shard iterators moto has handed out;
    return how many were forgotten.

    moto (5.2) keeps every iterator it makes in a dict for good, and makes one on every
    GetRecords, records or not: local mode's event feed (``--events``) polls ten times a second,
    some 36,000 iterators (of ~1 KB each) an hour. The feed reads only with the newest one of
    its shard, so the newest are kept.
    """
    try:
        from moto.dynamodbstreams.models import dynamodbstreams_backends
    except ImportError:
        return 0
    forgotten = 0
    for regions in list(dict.values(dynamodbstreams_backends)):
        for backend in list(dict.values(regions)):
            iterators = backend.shard_iterators
            for arn in list(iterators)[:max(len(iterators) - keep, 0)]:
                del iterators[arn]
                forgotten += 1
    return forgotten


# -- DynamoDB TransactWriteItems without whole-table copies ---------------------------------------
# moto (5.2) makes its rollback copy of TransactWriteItems by deep-copying every table the
# transaction names, once per action: a 99-action transaction on a 20,000-item table copies
# ~2 M items. The replacement below is moto's own algorithm line for line, except that it saves
# only the items the transaction touches (a deep copy of each, taken before its action runs) and
# puts those back on rollback. That is exact because a moto Table keeps its rows in one place,
# ``table.items`` ({hash: Item}, or {hash: {range: Item}} with a range key), and derives
# everything else from them on each read: GSIs and LSIs are computed from the items by every
# query and scan (which also sort them, so the dicts' insertion order is never visible), and
# ItemCount is ``len(table)``. The only other state an action changes is the table's stream
# shard, which is truncated back to its length before the transaction (the old whole-table copy
# dropped those records too).
_PATCHED_MOTO = ("5.2.5",)  # moto versions whose transact_write_items the replacement mirrors
_moto_transact_write_items: Any = None  # moto's own, kept for comparison (tests, benchmarks)


@dataclass
class _Saved:
    table: Any
    hash_key: Any
    range_key: Any
    had_partition: bool  # range-key tables: the {range: Item} dict of this hash existed
    item: Any  # a deep copy of the item as it was, or None if there was none


# moto's backends are one per process (the server's threads share them): so is this lock. It
# is held by each patched transaction and each single-item write (re-entrant: a transaction
# writes through those), so a transaction's rollback never puts an item back over a write
# made meanwhile (DynamoDB refuses such a write with TransactionConflict instead).
_ONE_TRANSACTION = threading.RLock()
_SINGLE_WRITES = ("put_item", "update_item", "delete_item")


class _Journal:
    """What a transaction changed, item by item, so that a rollback can put it back."""

    def __init__(self) -> None:
        self._saved: dict[tuple[int, Any, Any], _Saved] = {}
        self._streams: dict[int, tuple[Any, int]] = {}

    def save(self, table: Any, hash_key: Any, range_key: Any) -> None:
        """Remember one item as it is now (only the first time it is seen)."""
        slot = (id(table), hash_key, range_key)
        if slot in self._saved:
            return
        # dict.get, never [], so that looking does not create a partition (a defaultdict).
        partition = table.items.get(hash_key)
        if table.range_key_attr is None:
            had_partition, item = partition is not None, partition
        else:
            had_partition = partition is not None
            item = partition.get(range_key) if partition is not None else None
        self._saved[slot] = _Saved(table, hash_key, range_key, had_partition,
                                   copy.deepcopy(item) if item is not None else None)
        shard = table.stream_shard
        if id(table) not in self._streams and shard is not None:
            self._streams[id(table)] = (shard, len(shard.items))

    def restore(self) -> None:
        """Put every saved item back; newest first, so a partition created by the
        transaction is dropped after the items created inside it."""
        for saved in reversed(list(self._saved.values())):
            items = saved.table.items
            if saved.table.range_key_attr is None:
                if saved.item is None:
                    items.pop(saved.hash_key, None)
                else:
                    items[saved.hash_key] = saved.item
            elif not saved.had_partition:
                items.pop(saved.hash_key, None)
            elif saved.item is None:
                items[saved.hash_key].pop(saved.range_key, None)
            else:
                items[saved.hash_key][saved.range_key] = saved.item
        for shard, length in self._streams.values():
            del shard.items[length:]

    @property
    def saved_items(self) -> int:
        return len(self._saved)


def _transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto 5.2's DynamoDBBackend.transact_write_items, with a per-item rollback journal, one
    transaction at a time: the server answers each request on a thread of its own, and two
    transactions interleaved could each see the other's half-done writes (DynamoDB isolates
    them: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis.html#transaction-isolation)."""
    with _ONE_TRANSACTION:
        _transact_write_items_alone(self, transact_items)


def _transact_write_items_alone(self: Any, transact_items: list[dict[str, Any]]) -> None:
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    journal = _Journal()
    target_items: set[tuple[str, str]] = set()

    def check_unicity(table_name: str, key: dict[str, Any]) -> None:
        item = (str(table_name), str(dict(sorted(key.items()))))
        if item in target_items:
            raise MultipleTransactionsException()
        target_items.add(item)

    errors: list[tuple[str, str, dict[str, Any] | None] | tuple[None, None, None]] = []
    for item in transact_items:
        original_item: dict[str, Any] | None = None
        if len(list(item.keys())) > 1:
            raise TransactWriteSingleOpException
        try:
            op_type, op = next(iter(item.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table_name = op["TableName"]
            condition_expression = op.get("ConditionExpression")
            expression_attribute_names = op.get("ExpressionAttributeNames")
            expression_attribute_values = op.get("ExpressionAttributeValues")
            return_values_on_condition_check_failure = op.get(
                "ReturnValuesOnConditionCheckFailure")
            if op_type == "Put":
                attrs = op["Item"]
                table = self.get_table(table_name)
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]
            check_unicity(table_name, key)
            # The one addition: save this item before anything can change it. The lookups raise
            # exactly what moto's get_item on the next line would raise, at the same point.
            table = self.get_table(table_name)
            journal.save(table, *self.get_keys_value(table, key))
            current = self.get_item(table_name, key)
            if condition_expression is not None:
                condition_op = get_filter_expression(
                    condition_expression, expression_attribute_names,
                    expression_attribute_values)
                if not condition_op.expr(current):
                    if return_values_on_condition_check_failure == "ALL_OLD" and current:
                        original_item = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original_item)
            if op_type == "Put":
                self.put_item(table_name, op["Item"], condition_expression=condition_expression,
                              expression_attribute_names=expression_attribute_names,
                              expression_attribute_values=expression_attribute_values)
            elif op_type == "Delete":
                self.delete_item(table_name, key, condition_expression=condition_expression,
                                 expression_attribute_names=expression_attribute_names,
                                 expression_attribute_values=expression_attribute_values)
            elif op_type == "Update":
                self.update_item(table_name, key, update_expression=op["UpdateExpression"],
                                 condition_expression=condition_expression,
                                 expression_attribute_names=expression_attribute_names,
                                 expression_attribute_values=expression_attribute_values)
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            journal.restore()
            raise
        except ConditionalCheckFailed as e:
            errors.append(("ConditionalCheckFailed", str(e.message), original_item))
        except Exception as e:
            errors.append((type(e).__name__, str(e), original_item))
    if any(code is not None for code, _, _ in errors):
        journal.restore()
        raise TransactionCanceledException(errors)


def patch_transactions() -> bool:
    """Install the journal-based TransactWriteItems into moto's DynamoDB backend (idempotent).

    Returns whether it is installed: a moto version it was not written against keeps its own
    implementation (slow but correct), and ``tests/integration/test_local_backends.py`` fails so
    that somebody compares the two again.
    """
    import moto
    from moto.dynamodb.models import DynamoDBBackend

    if str(moto.__version__) not in _PATCHED_MOTO:
        log.warning("moto %s: TransactWriteItems left unpatched (written for %s)",
                    moto.__version__, ", ".join(_PATCHED_MOTO))
        return False
    global _moto_transact_write_items
    if DynamoDBBackend.transact_write_items is not _transact_write_items:
        _moto_transact_write_items = DynamoDBBackend.transact_write_items
        DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]
        for name in _SINGLE_WRITES:
            setattr(DynamoDBBackend, name, _one_at_a_time(getattr(DynamoDBBackend, name)))
    return True


def _one_at_a_time(write: Any) -> Any:
    """``write`` (a DynamoDBBackend method) under the lock the patched transactions hold."""
    def locked(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _ONE_TRANSACTION:
            return write(self, *args, **kwargs)

    locked.__wrapped__ = write  # type: ignore[attr-defined]
    return locked


def moto_transact_write_items() -> Any:
    """moto's own TransactWriteItems (whole-table copies), as it was before the patch."""
    from moto.dynamodb.models import DynamoDBBackend

    return _moto_transact_write_items or DynamoDBBackend.transact_write_items
