"""Input edges, where a bad message must hurt only itself.

Numbers DynamoDB cannot store, NaN/Infinity from other producers, ids with a trailing newline,
sizes measured as stored, and a write the table refuses for one job: each message ends with its
own outcome recorded, and no tick-mate is held back or dead-lettered because of it. Runs on the
twins through the real wiring.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain import message, published_schema
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import JobState
from dispatcher.ops.client import JobClient
from dispatcher.ports.table import InvalidTransaction, Op, Put, Record, Update
from dispatcher.store import Store
from dispatcher.testing.memory_launcher import MemoryLauncher
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from dispatcher.wiring import pipeline


def _body(job_id: str, **fields: Any) -> str:
    return json.dumps({"schema_version": 1, "job_id": job_id, "kind": "demo.sleep",
                       "payload": {"n": 1}, "estimated_seconds": 1, **fields})


def _raw(text: str) -> str:
    """A body as a producer in another language may write it (json.dumps cannot)."""
    return text


# -- the schema --------------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "field"), [
    (_body("a", estimated_seconds=1e300), "estimated_seconds"),
    (_body("a", estimated_seconds=1e7 + 1), "estimated_seconds"),
    (_body("a", estimated_seconds=1e-200), "estimated_seconds"),
    (_raw('{"schema_version":1,"job_id":"a","kind":"k","payload":{},'
          '"estimated_seconds":Infinity}'), "estimated_seconds"),
    (_raw('{"schema_version":1,"job_id":"a","kind":"k","payload":{},'
          '"estimated_seconds":NaN}'), "estimated_seconds"),
    (_raw('{"schema_version":1,"job_id":"a","kind":"k","payload":{},'
          '"estimated_seconds":1e400}'), "estimated_seconds"),
    (_body("a", timeout_seconds=1e-200), "timeout_seconds"),
    (_body("a", timeout_seconds=0.0001), "timeout_seconds"),
    (_body("a", timeout_seconds=1e300), "timeout_seconds"),
    (_raw('{"schema_version":1,"job_id":"a","kind":"k","payload":{},'
          '"timeout_seconds":-Infinity}'), "timeout_seconds"),
    (_raw('{"schema_version":1,"job_id":"a","kind":"k","payload":{"x":[1,{"y":NaN}]}}'),
     "payload.x.1.y"),
    (_raw('{"schema_version":1,"job_id":"a","kind":"k","payload":{"x":-1e999}}'), "payload.x"),
])
def test_numbers_dynamodb_cannot_store_are_rejected_naming_the_field(body: str,
                                                                   field: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        message.parse(body)
    assert field in caught.value.reason
    assert caught.value.job_id == "a"  # the REJECTED record can be found by its id


@pytest.mark.parametrize("fields", [
    {"estimated_seconds": 0}, {"estimated_seconds": 0.001}, {"estimated_seconds": 1e7},
    {"timeout_seconds": 0.001}, {"timeout_seconds": 1e7},
    {"payload": {"big": 1e300, "tiny": 1e-300, "neg": -1.5e200}},  # inside a JSON string
])
def test_numbers_within_the_bounds_pass(fields: dict[str, Any]) -> None:
    message.parse(_body("ok", **fields))


@pytest.mark.parametrize(("job_id", "kind"), [("a\n", "k"), ("a", "k\n"), ("a\r", "k"),
                                               ("\na", "k")])
def test_a_trailing_newline_is_not_part_of_a_valid_id(job_id: str, kind: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        message.parse(json.dumps({"schema_version": 1, "job_id": job_id, "kind": kind,
                                  "payload": {}}))
    assert caught.value.job_id is None or "\n" not in caught.value.job_id


def test_deep_nesting_is_rejected_not_a_crash() -> None:
    deep = '{"schema_version":1,"job_id":"a","kind":"k","payload":{"x":' + "[" * 100_000 \
        + "]" * 100_000 + "}}"
    with pytest.raises(InvalidMessage):
        message.parse(deep)
    nested: Any = 0
    for _ in range(message.MAX_PAYLOAD_DEPTH + 1):
        nested = [nested]
    with pytest.raises(InvalidMessage, match="nested deeper"):
        message.parse(_body("a", payload={"x": nested}))


def test_a_huge_integer_literal_is_rejected_not_a_crash() -> None:
    body = '{"schema_version":1,"job_id":"a","kind":"k","payload":{"n":' + "9" * 5000 + "}}"
    with pytest.raises(InvalidMessage, match="not acceptable JSON"):
        message.parse(body)


def test_the_schema_export_states_the_bounds() -> None:
    props = published_schema.json_schema()["properties"]
    text = json.dumps(props)
    assert "10000000" in text or "1e7" in text
    assert math.isclose(message.MAX_SECONDS, 1e7)


# -- sizes as stored ---------------------------------------------------------------------------
def test_the_size_check_measures_what_the_table_stores() -> None:
    payload = {"xs": [0] * 131_000, "s": "é\ud800"}  # lists: ", " would add half again
    msg = message.parse(_body("sized", payload=payload))
    from dispatcher.aws.dynamodb.model import CompactJSONAttribute

    assert CompactJSONAttribute().serialize(msg.payload) == msg.payload_json()
    assert msg.payload_bytes == len(msg.payload_json().encode())
    assert msg.payload_bytes < message.MAX_PAYLOAD_BYTES < len(json.dumps(payload))


def test_a_payload_is_counted_in_the_utf8_bytes_a_producer_counts() -> None:
    """88 kB of three-byte characters is 88 kB, not the 264 kB of their escapes; a character
    more than the limit is refused, its size in bytes in the reason."""
    wrapper = len('{"s":""}')
    room = message.MAX_PAYLOAD_BYTES - wrapper
    fits = {"s": "\u20ac" * (room // 3) + "x" * (room % 3)}  # the euro sign: 3 bytes
    msg = message.parse(_body("euros", payload=fits))
    assert msg.payload_bytes == message.MAX_PAYLOAD_BYTES
    assert msg.payload_json() == json.dumps(fits, separators=(",", ":"), ensure_ascii=False)
    over = {"s": fits["s"] + "\u00e9"}  # two bytes more
    with pytest.raises(InvalidMessage, match=f"{message.MAX_PAYLOAD_BYTES + 2} bytes"):
        message.parse(_body("euros", payload=over))


def test_a_lone_surrogate_is_stored_as_its_escape_and_reads_back() -> None:
    """UTF-8 cannot carry a surrogate without its partner (json reads one from "\\ud800"):
    it is written as its escape, as JavaScript's JSON.stringify writes it, and counted so."""
    payload = {"s": "a\ud800b\\", "\udfff": 1}
    msg = message.parse(json.dumps({"schema_version": 1, "job_id": "lone", "kind": "k",
                                    "payload": payload}))
    assert msg.payload_json() == '{"s":"a\\ud800b\\\\","\\udfff":1}'
    assert msg.payload_bytes == len(msg.payload_json())
    world = _World()
    world.queue.send([("e", message.body_json(msg))])
    world.tick()
    job = world.store.get_job("lone")
    assert job is not None and job.payload == payload


def test_a_body_escapes_what_sqs_refuses_and_reads_back_as_sent() -> None:
    """SQS refuses U+FFFE and U+FFFF in a body (and a surrogate, which UTF-8 cannot carry):
    the client's body escapes them; other characters outside ASCII travel as themselves."""
    payload = {"s": "\ufffe\uffff\ud800é\U0001f4a5"}
    msg = message.parse(_body("refused", payload=payload))
    body = message.body_json(msg)
    assert "\ufffe" not in body and "\uffff" not in body and "é\U0001f4a5" in body
    body.encode()  # no surrogate left
    assert message.parse(body).payload == payload


def test_a_payload_just_under_the_limit_is_recorded() -> None:
    n = (message.MAX_PAYLOAD_BYTES - len('{"xs":[]}') + 1) // 2
    payload = {"xs": [0] * n}
    assert len(message.compact_json(payload).encode()) <= message.MAX_PAYLOAD_BYTES
    world = _World()
    world.queue.send([("e", _body("big", payload=payload))])
    world.tick()
    job = world.store.get_job("big")
    assert job is not None and job.payload == payload
    assert world.queue.backlog().visible == 0


# -- the producer client -----------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "field"), [
    ({"estimated_seconds": math.inf}, "estimated_seconds"),
    ({"estimated_seconds": math.nan}, "estimated_seconds"),
    ({"timeout_seconds": -math.inf}, "timeout_seconds"),
    ({"timeout_seconds": 1e-200}, "timeout_seconds"),
    ({"job_id": "abc\n"}, "job_id"),
])
def test_the_client_refuses_what_json_would_turn_into_null(kwargs: dict[str, Any],
                                                           field: str) -> None:
    queue = MemoryQueue()
    client = JobClient(queue_url="memory://jobs", table_name="jobs", queue=queue)
    with pytest.raises(InvalidMessage) as caught:
        client.submit("demo.sleep", {"n": 1}, **kwargs)
    assert field in caught.value.reason
    assert queue.receive() == []  # nothing was sent


def test_the_client_refuses_nan_inside_the_payload() -> None:
    queue = MemoryQueue()
    client = JobClient(queue_url="memory://jobs", table_name="jobs", queue=queue)
    with pytest.raises(InvalidMessage, match=r"payload\.a"):
        client.submit("demo.sleep", {"a": [math.nan]})
    assert queue.receive() == []


def test_kind_with_a_newline_is_refused_by_the_client() -> None:
    client = JobClient(queue_url="memory://jobs", table_name="jobs", queue=MemoryQueue())
    with pytest.raises(InvalidMessage, match="kind"):
        client.submit("demo.sleep\n", {})


# -- a bad message hurts only itself -----------------------------------------------------------
class PickyTable(MemoryTable):
    """The twin, refusing (as DynamoDB's ValidationException would) any item whose payload
    carries ``poison``: a failure validation did not foresee."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def _check(self, op: Op) -> None:
        if isinstance(op, Put) and isinstance(op.record.payload, dict) \
                and "poison" in op.record.payload:
            self.refused += 1
            raise InvalidTransaction("Item size has exceeded the maximum allowed size")

    def write(self, op: Put | Update | Any) -> Record | None:
        self._check(op)
        return super().write(op)

    def _transact(self, ops: list[Op]) -> None:
        for op in ops:
            self._check(op)
        super()._transact(ops)


class _World:
    def __init__(self, table: MemoryTable | None = None, **cfg: Any) -> None:
        self.table = table or MemoryTable()
        self.store = Store(self.table)
        self.queue = MemoryQueue()
        self.launcher = MemoryLauncher()
        config = settings.Config(**{"max_running_tasks": 50, **cfg})
        self.stages = pipeline.build(config, queue=self.queue, store=self.store,
                                   launcher=self.launcher)
        self.client = JobClient(queue_url="memory://jobs", table_name="jobs", queue=self.queue)

    def tick(self) -> Any:
        return self.stages.tick.tick()


def test_an_out_of_range_message_is_rejected_alone_and_its_tick_mates_are_recorded() -> None:
    world = _World()
    ids = world.client.submit_many([{"kind": "demo.sleep", "payload": {"i": i},
                                     "estimated_seconds": 1} for i in range(6)])
    world.queue.send([("x1", _body("huge", estimated_seconds=1e300)),
                      ("x2", _raw('{"schema_version":1,"job_id":"inf","kind":"demo.sleep",'
                                  '"payload":{},"estimated_seconds":Infinity}')),
                      ("x3", _body("tiny", timeout_seconds=1e-200))])
    decision = world.tick()
    assert decision.intake.rejected == 3
    for job_id in ids:
        job = world.store.get_job(job_id)
        assert job is not None and job.state == JobState.PENDING
    for key, field in [("huge", "estimated_seconds"), ("inf", "estimated_seconds"),
                       ("tiny", "timeout_seconds")]:
        rej = world.store.get_rejection(key)
        assert rej is not None and field in rej.reason
    assert world.queue.backlog().visible + world.queue.backlog().in_flight == 0


@pytest.mark.parametrize("bundled", [True, False])
def test_a_write_the_table_refuses_isolates_that_job(bundled: bool) -> None:
    table = PickyTable()
    world = _World(table)
    est = 1 if bundled else None  # small jobs share bundles; unknown ones run alone
    specs = [{"kind": "demo.sleep", "payload": {"i": i}, "estimated_seconds": est}
             for i in range(8)]
    specs.insert(3, {"kind": "demo.sleep", "payload": {"poison": 1}, "job_id": "bad",
                     "estimated_seconds": est})
    ids = world.client.submit_many(specs)
    decision = world.tick()
    assert table.refused >= 1
    good = [j for j in ids if j != "bad"]
    for job_id in good:
        job = world.store.get_job(job_id)
        assert job is not None and job.state == JobState.PENDING and job.bundle_id
        bundle = world.store.get_bundle(job.bundle_id)
        assert bundle is not None and "bad" not in bundle.job_ids
    assert world.store.get_job("bad") is None
    rej = world.store.get_rejection("bad")
    assert rej is not None and "refused" in rej.reason and "maximum allowed size" in rej.reason
    assert decision.intake.admitted == 8 and decision.intake.rejected == 1
    # every message has its outcome recorded, so every message was deleted: none can reach
    # the DLQ because of a neighbour
    assert world.queue.backlog().visible + world.queue.backlog().in_flight == 0


def test_a_redelivered_refused_message_stays_one_rejection() -> None:
    table = PickyTable()
    world = _World(table)
    body = _body("bad", payload={"poison": 1})
    world.queue.send([("a", body), ("b", _body("good"))])
    world.tick()
    world.queue.send([("c", body)])  # the producer sends it again
    world.tick()
    assert world.store.get_rejection("bad") is not None
    assert world.store.get_job("good") is not None
    assert world.queue.backlog().visible + world.queue.backlog().in_flight == 0


def test_a_rejected_message_fixed_and_sent_again_under_its_id_becomes_the_job() -> None:
    """A REJECTED record holds no job id: the producer fixes its message and sends it again
    under the same id (docs/producing.md says so), and the job is recorded beside the record
    of the first refusal."""
    world = _World()
    world.queue.send([("m1", _body("fixed", tolerated_failures="3"))])
    world.tick()
    refused = world.store.get_rejection("fixed")
    assert refused is not None and "tolerated_failures" in refused.reason
    assert world.store.get_job("fixed") is None
    world.queue.send([("m2", _body("fixed"))])
    world.tick()
    job = world.store.get_job("fixed")
    assert job is not None and job.state in (JobState.PENDING, JobState.RUNNING)
