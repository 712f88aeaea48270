"""Schema v1's optional fields for jobs of different shapes: ``cpu``/``memory``/
``ephemeral_storage`` (a Fargate task size), ``priority`` and ``not_before``; the producer
client sending each job to its priority's queue; ``longjobs submit``'s flags for them."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from typer.testing import CliRunner

from dispatcher.cli.app import app
from dispatcher.domain import fargate, message, published_schema
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Priority, Resources
from dispatcher.ops.client import JobClient
from dispatcher.testing.memory_queue import MemoryQueue
from tests.twins import ENV

T = datetime(2026, 1, 31, 2, 0, tzinfo=UTC)


def _parse(**fields: Any) -> message.JobMessage:
    return message.parse(json.dumps({"schema_version": 1, "job_id": "j-1", "kind": "k",
                                     "payload": {}, **fields}))


def _reason(**fields: Any) -> str:
    with pytest.raises(InvalidMessage) as info:
        _parse(**fields)
    return info.value.reason


# -- old messages -------------------------------------------------------------------------------
def test_a_message_without_the_new_fields_is_still_valid() -> None:
    msg = _parse()
    assert msg.resources == Resources() and msg.resources.default
    assert msg.priority is Priority.NORMAL
    assert msg.not_before is None


# -- cpu and memory -----------------------------------------------------------------------------
@pytest.mark.parametrize(("cpu", "memory"), [
    (256, 512), (256, 2048), (512, 1024), (512, 4096), (1024, 2048), (1024, 8192),
    (2048, 4096), (2048, 16384), (4096, 8192), (4096, 30720), (8192, 16384), (8192, 61440),
    (16384, 32768), (16384, 122880),
])
def test_documented_pairs_are_accepted(cpu: int, memory: int) -> None:
    msg = _parse(cpu=cpu, memory=memory, ephemeral_storage=50)
    assert msg.resources == Resources(cpu=cpu, memory=memory, ephemeral_storage=50)


def test_the_table_holds_exactly_fargates_documented_sizes() -> None:
    """Counted from the documentation's table: 3 + 4 + 7 + 13 + 23 + 12 + 12 pairs."""
    assert {cpu: len(sizes) for cpu, sizes in fargate.CPU_MEMORY.items()} == {
        256: 3, 512: 4, 1024: 7, 2048: 13, 4096: 23, 8192: 12, 16384: 12}
    for cpu, sizes in fargate.CPU_MEMORY.items():
        for memory in sizes:
            assert fargate.size_problem(cpu, memory) is None
            assert cpu in fargate.cpus_for(memory)


@pytest.mark.parametrize(("cpu", "memory", "expected"), [
    (256, 4096, "cpu 256 takes memory 512, 1024 or 2048 MiB; got 4096"),
    (512, 512, "cpu 512 takes memory 1024, 2048, 3072 or 4096 MiB; got 512"),
    (4096, 8000, "cpu 4096 takes memory 8192 to 30720 MiB in steps of 1024; got 8000"),
    (8192, 17408, "cpu 8192 takes memory 16384 to 61440 MiB in steps of 4096; got 17408"),
    (16384, 36864, "cpu 16384 takes memory 32768 to 122880 MiB in steps of 8192; got 36864"),
])
def test_a_pair_fargate_refuses_is_rejected_naming_the_valid_choices(
        cpu: int, memory: int, expected: str) -> None:
    reason = _reason(cpu=cpu, memory=memory)
    assert expected in reason
    assert reason.startswith("schema violation: memory: ")


def test_cpu_and_memory_go_together() -> None:
    assert "cpu 4096 needs memory too (give both): it takes memory 8192 to 30720 MiB" \
        in _reason(cpu=4096)
    assert "memory 4096 MiB needs cpu too (give both): it takes cpu 512, 1024 or 2048" \
        in _reason(memory=4096)
    no_size = _reason(memory=5000)
    assert "memory 5000 MiB is no Fargate size" in no_size and "cpu 256: 512" in no_size


def test_a_cpu_value_fargate_does_not_have_is_rejected_once() -> None:
    reason = _reason(cpu=300, memory=1024)
    assert "cpu: Input should be 256, 512, 1024, 2048, 4096, 8192 or 16384" in reason
    assert "memory" not in reason  # no second error about the pair


@pytest.mark.parametrize("gib", [21, 200])
def test_ephemeral_storage_from_21_to_200_gib(gib: int) -> None:
    assert _parse(ephemeral_storage=gib).resources == Resources(ephemeral_storage=gib)


@pytest.mark.parametrize("gib", [20, 201, 0])
def test_ephemeral_storage_outside_21_to_200_is_rejected(gib: int) -> None:
    assert "ephemeral_storage" in _reason(ephemeral_storage=gib)


# -- priority -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["high", "normal", "low"])
def test_priority_values(value: str) -> None:
    assert _parse(priority=value).priority is Priority(value)


@pytest.mark.parametrize("value", ["urgent", "HIGH", 1, None])
def test_other_priorities_are_rejected(value: Any) -> None:
    assert "priority: Input should be 'high', 'normal' or 'low'" in _reason(priority=value)


# -- not_before ---------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [
    "2026-01-31T02:00:00Z", "2026-01-31T02:00:00+00:00", "2026-01-31T03:00:00+01:00",
    "2026-01-30T21:00:00-05:00", T.timestamp(), int(T.timestamp()),
])
def test_not_before_takes_iso_8601_with_a_timezone_or_epoch_seconds(value: Any) -> None:
    msg = _parse(not_before=value)
    assert isinstance(msg.not_before, float)
    assert msg.not_before == T.timestamp()


def test_not_before_keeps_fractions_of_a_second() -> None:
    assert _parse(not_before="2026-01-31T02:00:00.250Z").not_before == T.timestamp() + 0.25


@pytest.mark.parametrize(("value", "expected"), [
    ("2026-01-31T02:00:00", "has no UTC offset: add Z"),
    ("2026-01-31", "is not an RFC 3339 time"),
    ("tomorrow", "is not an RFC 3339 time"),
    ("1769824800", "is not an RFC 3339 time"),  # a number in a string is neither
    (True, "RFC 3339"),
    (-1, "greater than or equal to 0"),
    (1e12, "less than or equal to"),
])
def test_not_before_refuses_what_is_not_a_utc_time(value: Any, expected: str) -> None:
    reason = _reason(not_before=value)
    assert reason.startswith("schema violation: not_before") and expected in reason
    assert "Value error" not in reason and "not_before: not_before" not in reason


def test_not_before_refuses_nan() -> None:
    body = ('{"schema_version":1,"job_id":"j","kind":"k","payload":{},'
            '"not_before":NaN}')
    with pytest.raises(InvalidMessage, match="not_before"):
        message.parse(body)


# -- the exported JSON Schema -------------------------------------------------------------------
def test_the_json_schema_states_the_new_fields() -> None:
    schema = published_schema.json_schema()
    props = schema["properties"]
    assert {"cpu", "memory", "ephemeral_storage", "priority", "not_before"} <= set(props)
    assert set(schema["required"]) == {"schema_version", "job_id", "kind", "payload"}
    cpu = next(s for s in props["cpu"]["anyOf"] if s.get("type") == "integer")
    assert cpu["enum"] == list(fargate.CPU_VALUES)
    assert fargate.DOC_URL in props["cpu"]["description"]
    storage = next(s for s in props["ephemeral_storage"]["anyOf"] if s.get("type") == "integer")
    assert (storage["minimum"], storage["maximum"]) == (21, 200)
    assert schema["$defs"]["Priority"]["enum"] == ["high", "normal", "low"]
    assert props["priority"]["default"] == "normal"
    kinds = {s.get("type"): s for s in props["not_before"]["anyOf"]}
    assert set(kinds) == {"number", "string", "null"}
    assert kinds["string"]["format"] == "date-time"
    # cpu and memory together: each present (and not null) asks for the other
    pairs = [(r["if"]["required"], r["then"]["required"]) for r in schema["allOf"][:2]]
    assert pairs == [(["cpu"], ["memory"]), (["memory"], ["cpu"])]


def test_the_schema_command_prints_the_new_fields() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    assert "not_before" in json.loads(result.output)["properties"]


def test_the_schema_declares_its_dialect_and_is_a_valid_2020_12_schema() -> None:
    """A validator that is not ours reads the dialect from the schema itself (a validator
    on its default draft would judge messages by other rules) and finds the schema valid."""
    from jsonschema import Draft202012Validator, validators

    schema = json.loads(CliRunner().invoke(app, ["schema"]).output)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert validators.validator_for(schema) is Draft202012Validator
    Draft202012Validator.check_schema(schema)
    checker = Draft202012Validator(schema)
    assert checker.is_valid({"schema_version": 1, "job_id": "a", "kind": "k", "payload": {}})
    assert not checker.is_valid({"schema_version": 1, "job_id": "a", "kind": "k", "payload": {},
                                 "cpu": 1024})  # memory goes with it


# -- the producer client ------------------------------------------------------------------------
def _queues() -> dict[Priority, MemoryQueue]:
    return {p: MemoryQueue() for p in Priority}


def _client(**kwargs: Any) -> JobClient:
    return JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"], table_name=ENV["LONGJOBS_TABLE"],
                     region="us-east-1", **kwargs)


def _bodies(queue: MemoryQueue) -> list[dict[str, Any]]:
    return [json.loads(m.body) for m in queue.receive(10)]


def test_the_client_sends_each_job_to_its_prioritys_queue() -> None:
    queues = _queues()
    client = _client(queues=queues)
    client.submit_many([
        {"kind": "k", "payload": {}, "job_id": "h1", "priority": "high"},
        {"kind": "k", "payload": {}, "job_id": "n1"},
        {"kind": "k", "payload": {}, "job_id": "l1", "priority": Priority.LOW},
        {"kind": "k", "payload": {}, "job_id": "h2", "priority": Priority.HIGH},
        {"kind": "k", "payload": {}, "job_id": "n2", "priority": "normal"},
    ])
    got = {p: [b["job_id"] for b in _bodies(q)] for p, q in queues.items()}
    assert got == {Priority.HIGH: ["h1", "h2"], Priority.NORMAL: ["n1", "n2"],
                   Priority.LOW: ["l1"]}


def test_submit_sends_every_field_and_leaves_out_the_default_priority() -> None:
    queues = _queues()
    client = _client(queues=queues)
    client.submit("k", {}, job_id="big", cpu=4096, memory=8192, ephemeral_storage=50,
                  priority="high", not_before=T)
    client.submit("k", {}, job_id="plain")
    (big,) = _bodies(queues[Priority.HIGH])
    assert big == {"schema_version": 1, "job_id": "big", "kind": "k", "payload": {},
                   "max_attempts": 3, "cpu": 4096, "memory": 8192, "ephemeral_storage": 50,
                   "priority": "high", "not_before": T.timestamp()}
    (plain,) = _bodies(queues[Priority.NORMAL])
    # A normal job's body is what it was before these fields existed.
    assert plain == {"schema_version": 1, "job_id": "plain", "kind": "k", "payload": {},
                     "max_attempts": 3}
    assert message.parse(json.dumps(big)).resources == Resources(4096, 8192, 50)


def test_the_client_takes_not_before_in_every_form() -> None:
    queue = MemoryQueue()
    client = _client(queue=queue)
    later = T + timedelta(hours=1)
    client.submit("k", {}, job_id="dt", not_before=later.astimezone(timezone(timedelta(hours=5))))
    client.submit("k", {}, job_id="iso", not_before="2026-01-31T03:00:00Z")
    client.submit("k", {}, job_id="epoch", not_before=later.timestamp())
    assert {b["job_id"]: b["not_before"] for b in _bodies(queue)} == {
        "dt": later.timestamp(), "iso": later.timestamp(), "epoch": later.timestamp()}
    with pytest.raises(InvalidMessage, match="has no timezone"):
        client.submit("k", {}, not_before=datetime(2026, 1, 31))


def test_one_queue_takes_every_priority() -> None:
    queue = MemoryQueue()
    client = _client(queue=queue)
    for p in Priority:
        client.submit("k", {}, job_id=f"j-{p}", priority=p)
    assert sorted(b["job_id"] for b in _bodies(queue)) == ["j-high", "j-low", "j-normal"]


def test_a_priority_without_its_own_queue_goes_to_the_normal_one() -> None:
    normal, high = MemoryQueue(), MemoryQueue()
    client = _client(queues={Priority.NORMAL: normal, Priority.HIGH: high})
    client.submit("k", {}, job_id="l", priority="low")
    client.submit("k", {}, job_id="h", priority="high")
    assert [b["job_id"] for b in _bodies(normal)] == ["l"]
    assert [b["job_id"] for b in _bodies(high)] == ["h"]


def test_the_client_validates_before_sending_anything() -> None:
    queues = _queues()
    client = _client(queues=queues)
    with pytest.raises(InvalidMessage, match="cpu 256 takes memory 512, 1024 or 2048 MiB; "
                                             "got 4096"):
        client.submit_many([{"kind": "k", "payload": {}, "job_id": "ok", "priority": "high"},
                            {"kind": "k", "payload": {}, "job_id": "bad", "cpu": 256,
                             "memory": 4096}])
    with pytest.raises(InvalidMessage, match="priority"):
        client.submit("k", {}, priority="urgent")
    assert all(q.backlog().visible == 0 for q in queues.values())


# -- the CLI ------------------------------------------------------------------------------------
@pytest.fixture
def cli_queues(monkeypatch: pytest.MonkeyPatch) -> dict[Priority, MemoryQueue]:
    """``longjobs submit`` with its JobClient on twin queues (one per priority)."""
    queues = _queues()
    client = _client(queues=queues)
    monkeypatch.setattr("dispatcher.ops.client.JobClient", lambda *a, **kw: client)
    return queues


def test_submit_flags(cli_queues: dict[Priority, MemoryQueue]) -> None:
    result = CliRunner().invoke(app, [
        "submit", "k", "--job-id", "cli-1", "--cpu", "4096", "--memory", "8192",
        "--ephemeral-storage", "50", "--priority", "high",
        "--not-before", "2026-01-31T02:00:00Z"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "cli-1"
    (body,) = _bodies(cli_queues[Priority.HIGH])
    msg = message.parse(json.dumps(body))
    assert msg.resources == Resources(cpu=4096, memory=8192, ephemeral_storage=50)
    assert msg.priority is Priority.HIGH and msg.not_before == T.timestamp()

    result = CliRunner().invoke(app, ["submit", "k", "--job-id", "cli-2", "--priority", "low",
                                      "--not-before", str(T.timestamp())])
    assert result.exit_code == 0, result.output
    (body,) = _bodies(cli_queues[Priority.LOW])
    assert body["not_before"] == T.timestamp()


@pytest.mark.parametrize(("args", "expected"), [
    (["--cpu", "256", "--memory", "4096"], "cpu 256 takes memory 512, 1024 or 2048 MiB; got 4096"),
    (["--memory", "4096"], "needs cpu too"),
    (["--cpu", "300", "--memory", "1024"], "256, 512, 1024, 2048, 4096, 8192 or 16384"),
    (["--priority", "urgent"], "'high', 'normal' or 'low'"),
    (["--not-before", "2026-01-31T02:00:00"], "has no UTC offset"),
    (["--not-before", "nan"], "--not-before"),
    (["--array", "10", "--tolerated-failures", "20"],
     "--tolerated-failures 20 is more than the array's 10 children: at most 10"),
    (["--depends-on", "x", "--condition", "sometimes"],
     "--condition 'sometimes' is not one of succeeded, finished, failed"),
    (["--n-to-n"], "--n-to-n makes each --depends-on element-wise for an array"),
    (["--depends-on", "x", "--n-to-n"], "give it with --array N and --depends-on ARRAY_ID"),
])
def test_submit_refuses_a_bad_size_in_one_line(cli_queues: dict[Priority, MemoryQueue],
                                               args: list[str], expected: str) -> None:
    result = CliRunner().invoke(app, ["submit", "k", *args])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert expected in lines[0]
    assert all(q.backlog().visible == 0 for q in cli_queues.values())


@pytest.mark.parametrize(("payload", "says"), [
    ({"when": datetime(2026, 1, 1, tzinfo=UTC)}, "payload.when: a datetime is not JSON"),
    ({"amount": Decimal("1.5")}, "payload.amount: a Decimal is not JSON"),
    ({"tags": {"a", "b"}}, "payload.tags: a set is not JSON"),
    ({"raw": b"\x00"}, "payload.raw: a bytes is not JSON"),
    ({"nested": [{"at": object()}]}, "payload.nested.0.at: a object is not JSON"),
    ({"nested": {(1, 2): "tuple key"}}, "payload.nested: a key of type tuple is not JSON"),
    ({(1, 2): "tuple key"}, "payload.(1, 2).[key]: Input should be a valid string"),
    (None, "payload: Field required"),
])
def test_a_payload_value_that_is_not_json_is_a_clear_error_before_sending(
        payload: Any, says: str) -> None:
    queue = MemoryQueue()
    with pytest.raises(InvalidMessage) as info:
        _client(queue=queue).submit("k", payload, job_id="j-1")
    assert says in info.value.reason and info.value.job_id == "j-1"
    assert queue.backlog().visible == 0


def test_a_producer_sends_without_the_table_and_reads_ask_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Producers hold sqs:SendMessage only: the job table's name is needed to read, not to
    send."""
    from dispatcher.domain.errors import ConfigError

    monkeypatch.delenv("LONGJOBS_TABLE", raising=False)
    queue = MemoryQueue()
    client = JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"], region="us-east-1", queue=queue)
    assert client.submit("k", {"n": 1}, job_id="sent") == "sent"
    assert [b["job_id"] for b in _bodies(queue)] == ["sent"]
    with pytest.raises(ConfigError, match="LONGJOBS_TABLE is not set"):
        client.get("sent")


def test_an_api_error_names_no_id_its_caller_did_not_choose() -> None:
    """A job submitted without a job id: the error says what is wrong, not a random id made up
    for it, nor pydantic's words; with an id, that id."""
    client = _client(queues=_queues())
    with pytest.raises(InvalidMessage) as raised:
        client.submit("k", {"when": datetime(2026, 1, 1, tzinfo=UTC)})
    assert str(raised.value) == ("schema violation: payload.when: a datetime is not JSON (send "
                                 "a string, number, boolean, null, list or object)")
    with pytest.raises(InvalidMessage) as raised:
        client.submit("k", {}, job_id="mine", depends_on=[{"job_id": "x", "condition": "no"}])
    assert str(raised.value) == ("mine: schema violation: depends_on.0.condition: Input should "
                                 "be 'succeeded', 'finished' or 'failed'")


@pytest.mark.parametrize("extra", [{}, {"tolerated_failures": 1}])
def test_an_arrays_id_too_long_for_its_childrens_is_refused_under_job_id(
        extra: dict[str, Any]) -> None:
    """With or without tolerated failures (the check once lived in theirs, and so ran only
    when they were given, and named them)."""
    with pytest.raises(InvalidMessage) as raised:
        message.parse(json.dumps({"schema_version": 1, "job_id": "a" * 123, "kind": "k",
                                  "payload": {}, "array_size": 3, **extra}))
    assert raised.value.reason == ("schema violation: job_id: an array job's job_id has at "
                                   "most 122 characters (its children's ids add :<index>)")
    assert message.parse(json.dumps({"schema_version": 1, "job_id": "a" * 122, "kind": "k",
                                     "payload": {}, "array_size": 3, **extra})).array_size == 3
