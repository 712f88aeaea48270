"""The event-sink port's contract: MemoryEventSink (the twin) and EventBridgeSink (PutEvents
on moto) publish alike: every event, in order, ten to a request, and a refused event is named
in one domain error, never dropped without a word.

On moto, what a bus received is read back through a rule that sends the longjobs events to an
SQS queue (moto delivers put_events to rule targets; local-aws.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from dispatcher.aws.eventbridge import EventBridgeSink
from dispatcher.domain.errors import EventsNotPublished, ResourceMissing
from dispatcher.domain.job_events import (
    BILLED_DETAIL_TYPE,
    DETAIL_TYPE,
    SOURCE,
    JobStateChange,
    TaskBilled,
)
from dispatcher.ports.event_sink import EventSink
from dispatcher.testing.memory_event_sink import MemoryEventSink

BUS = "longjobs-test-bus"


class Counting:
    """An events client that counts its PutEvents requests."""

    def __init__(self, client: Any) -> None:
        self.client, self.requests = client, 0

    def put_events(self, **kwargs: Any) -> Any:
        self.requests += 1
        return self.client.put_events(**kwargs)


class Sinks:
    """A sink, how many requests it made, and what its bus received (in order)."""

    def __init__(self, sink: EventSink, requests: Callable[[], int],
                 received: Callable[[], list[dict[str, Any]]]) -> None:
        self.sink, self.requests, self.received = sink, requests, received


@pytest.fixture(params=["memory", "eventbridge"])
def sinks(request: pytest.FixtureRequest) -> Sinks:
    if request.param == "memory":
        twin = MemoryEventSink()
        return Sinks(twin, lambda: twin.requests,
                     lambda: [e.detail() for e in [*twin.events, *twin.bills]])
    request.getfixturevalue("aws")
    events, sqs = boto3.client("events"), boto3.client("sqs")
    events.create_event_bus(Name=BUS)
    url = sqs.create_queue(QueueName="longjobs-test-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    events.put_rule(Name="all-job-events", EventBusName=BUS, EventPattern=json.dumps(
        {"source": [SOURCE], "detail-type": [DETAIL_TYPE, BILLED_DETAIL_TYPE]}))
    events.put_targets(Rule="all-job-events", EventBusName=BUS,
                       Targets=[{"Id": "q", "Arn": arn}])
    counting = Counting(events)

    def received() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while msgs := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
                "Messages", []):
            for m in msgs:
                event = json.loads(m["Body"])
                assert (event["source"], event["detail-type"]) == (
                    SOURCE, BILLED_DETAIL_TYPE if "task_arn" in event["detail"] else DETAIL_TYPE)
                out.append(event["detail"])
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        return out

    return Sinks(EventBridgeSink(counting, BUS, sleep=lambda s: None),
                 lambda: counting.requests, received)


def event(job_id: str, n: int, state: str = "PENDING") -> JobStateChange:
    return JobStateChange(job_id, "k", state, None, 0, None, "w:3", n, 1_700_000_000.0 + n)


def test_every_event_arrives_in_order_ten_to_a_request(sinks: Sinks) -> None:
    sent = [event(f"j{i % 3}", i // 3 + 1) for i in range(23)]
    sinks.sink.publish(sent)
    assert sinks.requests() == 3  # PutEvents' limit: 10 entries per request
    got = sinks.received()
    assert sorted(got, key=lambda d: (d["job_id"], d["sequence"])) == \
        sorted((e.detail() for e in sent), key=lambda d: (d["job_id"], d["sequence"]))
    for job_id in ("j0", "j1", "j2"):
        numbers = [d["sequence"] for d in got if d["job_id"] == job_id]
        assert sorted(numbers) == list(range(1, len(numbers) + 1))


def test_a_tasks_bill_goes_out_beside_the_job_events_under_its_own_detail_type(
        sinks: Sinks) -> None:
    bill = TaskBilled("arn:aws:ecs:eu-west-1:1:task/c/t1", 0.006, 100.0, 0.00006,
                      {"cpu": 1024, "memory": 2048, "capacity": "FARGATE"}, 1_700_000_100.0)
    sinks.sink.publish([event("j0", 1), bill])
    got = sinks.received()
    assert sorted(got, key=lambda d: "task_arn" in d) == [event("j0", 1).detail(),
                                                          bill.detail()]
    assert sinks.requests() == 1


def test_nothing_to_publish_makes_no_request(sinks: Sinks) -> None:
    sinks.sink.publish([])
    assert sinks.requests() == 0 and sinks.received() == []


class Refusing:
    """PutEvents answering as EventBridge does when some entries fail: the call succeeds,
    ``FailedEntryCount`` counts them, each failed entry carries an ErrorCode (the others an
    EventId), in request order. ``refuse`` jobs fail every time; ``once`` jobs the first."""

    def __init__(self, refuse: set[str], once: set[str]) -> None:
        self.refuse, self.once, self.requests = refuse, once, 0
        self.published: list[dict[str, Any]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests += 1
        answers = []
        for entry in Entries:
            job = json.loads(entry["Detail"])["job_id"]
            if job in self.refuse or job in self.once:
                self.once.discard(job)
                answers.append({"ErrorCode": "ThrottlingException", "ErrorMessage": "slow"})
            else:
                self.published.append(json.loads(entry["Detail"]))
                answers.append({"EventId": str(len(self.published))})
        return {"FailedEntryCount": sum("ErrorCode" in a for a in answers), "Entries": answers}


def test_failed_entries_are_sent_again_then_named() -> None:
    client = Refusing({"bad"}, {"slow"})
    sink = EventBridgeSink(client, attempts=3, sleep=lambda s: None)
    with pytest.raises(EventsNotPublished) as caught:
        sink.publish([event("ok", 1), event("slow", 1), event("bad", 1), event("bad", 2)])
    assert sorted(caught.value.failed) == ["bad#1", "bad#2"]
    assert "ThrottlingException" in caught.value.failed["bad#1"]
    assert [d["job_id"] for d in client.published] == ["ok", "slow"]
    assert client.requests == 3  # the first, then the failed entries twice


def test_the_twin_names_what_it_refused() -> None:
    twin = MemoryEventSink()
    twin.refuse("bad")
    with pytest.raises(EventsNotPublished) as caught:
        twin.publish([event("ok", 1), event("bad", 1)])
    assert list(caught.value.failed) == ["bad#1"] and [e.job_id for e in twin.events] == ["ok"]


def test_a_bus_that_does_not_exist_is_named(aws: Any) -> None:
    """moto refuses the whole call (ResourceNotFoundException); an answer that fails the
    entries instead is named by EventsNotPublished (above)."""
    sink = EventBridgeSink(boto3.client("events"), "no-such-bus", sleep=lambda s: None)
    with pytest.raises(ResourceMissing, match="no-such-bus"):
        sink.publish([event("j", 1)])
