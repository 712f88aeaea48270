"""The schedule-book port's contract: MemoryScheduleBook (the twin) and EventBridgeScheduleBook
(EventBridge Scheduler on moto) keep schedules alike: what is created reads back whole, a
replace changes every field, names are listed sorted past a page, and a missing or taken name
is the same domain error. On moto, the schedule's target is what Scheduler needs to send a
fire to the job queue of its priority with no code of ours between: the queue's ARN, the
role, the input with the scheduled-time placeholder in its job id, the retry policy and the
dead-letter queue."""

from __future__ import annotations

import json
from collections.abc import Callable

import boto3
import pytest

from dispatcher import settings
from dispatcher.domain import schedules
from dispatcher.domain.errors import ScheduleExists, ScheduleNotFound
from dispatcher.domain.schedules import JobSchedule, Overlap
from dispatcher.ports.schedule_book import ScheduleBook
from dispatcher.testing.memory_schedule_book import MemoryScheduleBook
from dispatcher.wiring import adapters
from tests.conftest import Aws

NIGHTLY = JobSchedule(name="nightly", expression="cron(0 2 * * ? *)",
                   job={"kind": "report", "payload": {"day": "<today>", "n": 1},
                        "priority": "high", "max_attempts": 5},
                   timezone="Europe/Berlin", overlap=Overlap.SKIP, start=1_800_000_000.0,
                   description="the nightly report")


@pytest.fixture(params=["memory", "eventbridge"])
def book(request: pytest.FixtureRequest) -> ScheduleBook:
    if request.param == "memory":
        return MemoryScheduleBook()
    request.getfixturevalue("aws")
    return adapters.schedule_book(settings.load("client"))


def test_a_schedule_reads_back_whole(book: ScheduleBook) -> None:
    book.create(NIGHTLY)
    assert book.get("nightly") == NIGHTLY
    with pytest.raises(ScheduleExists):
        book.create(NIGHTLY)


def test_replace_changes_every_field(book: ScheduleBook) -> None:
    book.create(NIGHTLY)
    paused = JobSchedule(name="nightly", expression="rate(2 hours)",
                      job={"kind": "other", "payload": {}}, enabled=False)
    book.replace(paused)
    assert book.get("nightly") == paused
    with pytest.raises(ScheduleNotFound):
        book.replace(JobSchedule(name="missing", expression="rate(1 hour)", job={}))


def test_names_are_listed_sorted_and_a_deleted_one_is_gone(book: ScheduleBook) -> None:
    names = [f"s-{n:03d}" for n in range(120)]  # past one page of ListSchedules (100)
    for name in reversed(names):
        book.create(JobSchedule(name=name, expression="rate(1 day)", job={"kind": "k"}))
    assert book.names() == names
    book.delete("s-007")
    assert "s-007" not in book.names()
    for missing in (lambda: book.get("s-007"), lambda: book.delete("s-007")):
        with pytest.raises(ScheduleNotFound):
            missing()


def test_the_target_is_the_job_queue_of_its_priority(aws: Aws) -> None:
    book = adapters.schedule_book(settings.load("client"))
    book.create(NIGHTLY)
    raw = boto3.client("scheduler").get_schedule(Name="nightly",
                                                 GroupName=aws.env["LONGJOBS_SCHEDULE_GROUP"])
    target = raw["Target"]
    sqs = boto3.client("sqs")

    def arn(url_key: str) -> str:
        return str(sqs.get_queue_attributes(QueueUrl=aws.env[url_key], AttributeNames=[
            "QueueArn"])["Attributes"]["QueueArn"])

    assert target["Arn"] == arn("LONGJOBS_HIGH_QUEUE_URL")
    assert target["RoleArn"] == aws.env["LONGJOBS_SCHEDULER_ROLE_ARN"]
    assert target["DeadLetterConfig"] == {"Arn": aws.env["LONGJOBS_SCHEDULE_DLQ_ARN"]}
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 86400,
                                     "MaximumRetryAttempts": 185}
    assert raw["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert raw["ScheduleExpressionTimezone"] == "Europe/Berlin"
    body = json.loads(target["Input"])
    assert body["job_id"] == schedules.fire_id("nightly", schedules.SCHEDULED_TIME)
    assert body["schedule"] == {"name": "nightly", "overlap": "skip"}
    normal: Callable[[], None] = lambda: book.replace(  # noqa: E731
        JobSchedule(name="nightly", expression="rate(1 hour)", job={"kind": "k"}))
    normal()
    again = boto3.client("scheduler").get_schedule(
        Name="nightly", GroupName=aws.env["LONGJOBS_SCHEDULE_GROUP"])
    assert again["Target"]["Arn"] == arn("LONGJOBS_QUEUE_URL")
