"""The stack's job state-change events: the table's stream, the publisher function with its
own minimal role and its stream mapping, and the example rule that sends this stack's failed
jobs to an encrypted SNS topic. The last test runs the publisher's handler in-process on
moto, on records read from a real (moto) stream, into a bus whose rule is the template's."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from dispatcher import handlers
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.launches import Launch
from dispatcher.store import Fence, JobUpdate, LaunchOutcome
from dispatcher.wiring.adapters import open_store
from tests.helpers import stream_records
from tests.integration.test_infra import matches, resolve


def test_the_table_streams_each_items_old_and_new_image(template: dict[str, Any]) -> None:
    spec = template["Resources"]["JobTable"]["Properties"]["StreamSpecification"]
    assert spec == {"StreamViewType": "NEW_AND_OLD_IMAGES"}


def stream_record(pk: str, event_name: str = "MODIFY") -> dict[str, Any]:
    return {"eventName": event_name, "dynamodb": {"Keys": {"pk": {"S": pk}}}}


def test_the_mapping_hands_over_jobs_writes_in_batches_and_gives_up_loudly(
        template: dict[str, Any]) -> None:
    mapping = template["Resources"]["JobEventsStreamMapping"]["Properties"]
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["JobTable", "StreamArn"]}
    assert mapping["FunctionName"] == {"Ref": "JobEventsFunction"}
    assert mapping["BatchSize"] == 100 and mapping["MaximumBatchingWindowInSeconds"] == 0
    assert mapping["BisectBatchOnFunctionError"] is True
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["MaximumRetryAttempts"] > 0
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["EventDeadLetterQueue", "Arn"]}
    patterns = [json.loads(f["Pattern"]) for f in mapping["FilterCriteria"]["Filters"]]

    def any_matches(record: dict[str, Any]) -> bool:  # the filters are ORed
        return any(matches(p, record) for p in patterns)

    assert any_matches(stream_record("JOB#j1"))
    assert any_matches(stream_record("JOB#j1", "INSERT"))
    assert not any_matches(stream_record("JOB#j1", "REMOVE"))  # TTL's deletes
    assert not any_matches(stream_record("BUNDLE#b1"))  # heartbeats
    assert not any_matches(stream_record("REJECT#m1", "INSERT"))
    # A task's pointer, once its bill is on it (a "Task Billed" event); not before
    settled = {"N": "0.0123"}
    assert any_matches({**stream_record("TASK#arn:t"), "dynamodb": {
        "Keys": {"pk": {"S": "TASK#arn:t"}}, "NewImage": {"cost": settled}}})
    assert not any_matches(stream_record("TASK#arn:t"))
    assert not any_matches({"eventName": "INSERT", "dynamodb": {
        "Keys": {"pk": {"S": "TASK#arn:t"}}, "NewImage": {"bundle_id": {"S": "b"}}}})


def test_the_publisher_reads_this_tables_stream_and_puts_on_the_bus_only(
        template: dict[str, Any], expanded: dict[str, Any]) -> None:
    function = template["Resources"]["JobEventsFunction"]["Properties"]
    assert function["Handler"] == "dispatcher.handlers.publish_job_events"
    assert callable(handlers.publish_job_events)
    assert function["Environment"]["Variables"] == {"LONGJOBS_EVENT_BUS": {"Ref": "EventBus"}}
    role = expanded["Resources"]["JobEventsFunctionRole"]["Properties"]
    statements = [s for p in role.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    grants = {s["Sid"]: (sorted(s["Action"]) if isinstance(s["Action"], list)
                         else [s["Action"]], s["Resource"]) for s in statements}
    assert grants == {
        "ReadJobTableStream": (["dynamodb:DescribeStream", "dynamodb:GetRecords",
                                "dynamodb:GetShardIterator", "dynamodb:ListStreams"],
                               {"Fn::Sub": "${JobTable.Arn}/stream/*"}),
        "PublishJobEvents": (["events:PutEvents"], {"Fn::Sub": "arn:${AWS::Partition}:events:"
                             "${AWS::Region}:${AWS::AccountId}:event-bus/${EventBus}"}),
        "RecordsGivenUp": (["sqs:SendMessage"], {"Fn::GetAtt": ["EventDeadLetterQueue", "Arn"]}),
    }
    # Beside them only the logs (SAM's basic execution role), no managed stream policy (its
    # stream reads are on "*").
    assert [str(m).rsplit("/", 1)[-1] for m in role["ManagedPolicyArns"]] == [
        "AWSLambdaBasicExecutionRole"]


def test_the_failed_job_topic_is_encrypted_and_only_the_rule_publishes(
        template: dict[str, Any]) -> None:
    res = template["Resources"]
    assert res["JobFailedTopic"]["Properties"]["KmsMasterKeyId"] == {"Ref": "JobFailedTopicKey"}
    assert res["JobFailedTopicKey"]["Properties"]["EnableKeyRotation"] is True
    (publish,) = res["JobFailedTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert publish["Principal"] == {"Service": "events.amazonaws.com"}
    assert publish["Condition"] == {"ArnEquals": {"aws:SourceArn": {
        "Fn::GetAtt": ["JobFailedRule", "Arn"]}}}
    assert template["Outputs"]["JobFailedTopicArn"]["Value"] == {"Ref": "JobFailedTopic"}
    rule = res["JobFailedRule"]["Properties"]
    assert rule["EventBusName"] == {"Ref": "EventBus"}
    assert rule["Targets"] == [{"Id": "job-failed-topic", "Arn": {"Ref": "JobFailedTopic"}}]


def test_the_handler_publishes_what_the_template_rule_sends_to_the_topic(
        aws: Any, template: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    table = aws.env["LONGJOBS_TABLE"]
    ddb, events, sqs = boto3.client("dynamodb"), boto3.client("events"), boto3.client("sqs")
    ddb.update_table(TableName=table, StreamSpecification={
        "StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"})
    table_arn = ddb.describe_table(TableName=table)["Table"]["TableArn"]
    # The template's rule, on a bus of this test's, sending to a queue the test reads.
    rule = template["Resources"]["JobFailedRule"]["Properties"]
    pattern = json.loads(json.dumps(rule["EventPattern"]).replace(
        json.dumps({"Fn::GetAtt": ["JobTable", "Arn"]}), json.dumps(table_arn)))
    pattern = resolve(pattern, template)
    events.create_event_bus(Name="jobs")
    url = sqs.create_queue(QueueName="failed-jobs")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    events.put_rule(Name="job-failed", EventBusName="jobs", EventPattern=json.dumps(pattern))
    events.put_targets(Rule="job-failed", EventBusName="jobs",
                       Targets=[{"Id": "q", "Arn": queue_arn}])

    store = open_store(table)
    jobs = [Job(job_id=j, kind="k", payload={}, bundle_id="b1", max_attempts=1)
            for j in ("good", "poor")]
    store.record([Bundle("b1", ["good", "poor"])], jobs)
    launch = Launch("L-b1", ["b1"], "longjobs-worker:1")
    store.begin_launch(launch, [Bundle("b1", ["good", "poor"])])
    arn = "arn:aws:ecs:us-east-1:123456789012:task/longjobs/t1"
    store.finish_launch(launch, LaunchOutcome(assigned=[("b1", arn)]), {})
    fence = Fence("b1", 1, arn)
    store.claim(fence)
    store.apply(fence, [
        JobUpdate("good", JobState.PENDING, JobState.SUCCEEDED, via=JobState.RUNNING,
                  attempts_delta=1, result={"ok": True}),
        JobUpdate("poor", JobState.PENDING, JobState.FAILED, via=JobState.RUNNING,
                  attempts_delta=1, reason="it broke")])
    records = stream_records(table)
    assert any(r["dynamodb"]["Keys"]["pk"]["S"].startswith("BUNDLE#") for r in records)

    monkeypatch.setenv("LONGJOBS_EVENT_BUS", "jobs")
    puts = aws.proxy.counts().get("events.PutEvents", 0)
    assert handlers.publish_job_events({"Records": records}, None) == {"batchItemFailures": []}
    # Six events (each job: PENDING, then RUNNING and its end from one write) in one request.
    assert aws.proxy.counts().get("events.PutEvents", 0) - puts == 1
    got = [json.loads(m["Body"]) for m in sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])]
    assert [(e["detail"]["job_id"], e["detail"]["state"], e["detail"]["sequence"])
            for e in got] == [("poor", "FAILED", 3)]
    (failed,) = got
    assert failed["resources"] == [table_arn] and failed["detail"]["reason"] == "it broke"
    assert failed["detail"]["previous_state"] == "RUNNING" and failed["detail"]["attempt"] == 1


def ending(pk: str, state: str, waiters: int | None) -> dict[str, Any]:
    image: dict[str, Any] = {"pk": {"S": pk}, "state": {"S": state}}
    if waiters is not None:
        image["waiters"] = {"N": str(waiters)}
    return {"eventName": "MODIFY", "dynamodb": {"Keys": {"pk": {"S": pk}}, "NewImage": image}}


def test_the_dependents_mapping_hands_over_only_ends_of_jobs_with_waiters(
        template: dict[str, Any]) -> None:
    """The stream's second reader: the function that releases dependents gets the writes that
    end a job someone waits for, and no other (no bundle, no job without waiters, no state
    that is not an end)."""
    mapping = template["Resources"]["DependentsStreamMapping"]["Properties"]
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["JobTable", "StreamArn"]}
    assert mapping["FunctionName"] == {"Ref": "DependentsFunction"}
    assert template["Resources"]["DependentsFunction"]["Properties"]["Handler"] == \
        "dispatcher.handlers.release_dependents"
    assert callable(handlers.release_dependents)
    (only,) = mapping["FilterCriteria"]["Filters"]
    pattern = json.loads(only["Pattern"])
    for state in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert matches(pattern, ending("JOB#a", state, 1))
    assert not matches(pattern, ending("JOB#a", "SUCCEEDED", None))  # nobody waits for it
    assert not matches(pattern, ending("JOB#a", "RUNNING", 2))  # not an end
    assert not matches(pattern, ending("BUNDLE#b", "DONE", 1))
    assert not matches(pattern, {**ending("JOB#a", "FAILED", 1), "eventName": "INSERT"})
    from moto.events.models import EventPattern  # the same verdicts from another matcher

    other = EventPattern.load(only["Pattern"])
    assert other.matches_event(ending("JOB#a", "FAILED", 1))
    assert not other.matches_event(ending("JOB#a", "FAILED", None))
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["EventDeadLetterQueue", "Arn"]}

