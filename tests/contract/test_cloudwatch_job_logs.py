"""The CloudWatch Logs adapter of the job-log port: the stream it derives from the task
definition's awslogs options, the request it sends, its paging, and its own check of each line.

moto stores and pages log events but ignores JSON filter patterns (it matches every event), so
the request shape is checked with botocore's Stubber: FilterLogEvents on the task's one stream
with ``{ $.job_id = "ID" }``, as CloudWatch Logs documents JSON filter patterns
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/matching-terms-json-log-events.html).
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from dispatcher.aws.cloudwatch_logs import CloudWatchJobLogs, console_url

TASK = "arn:aws:ecs:us-east-1:123456789012:task/longjobs/0f1e2d3c4b5a"
GROUP = "/aws/ecs/longjobs-worker"


def line(job_id: str, message: str, attempt: int = 1, task: str = TASK) -> str:
    return json.dumps({"level": "INFO", "message": message, "service": "longjobs-runner",
                       "timestamp": "2026-12-01 10:00:00,000+0000", "task_arn": task,
                       "job_id": job_id, "job_attempt": attempt, "logger": "mypkg"},
                      separators=(",", ":"))


def register(ecs: Any, prefix: str = "worker") -> str:
    td = ecs.register_task_definition(family="longjobs-worker", containerDefinitions=[{
        "name": "worker", "image": "img", "memory": 512,
        "logConfiguration": {"logDriver": "awslogs", "options": {
            "awslogs-group": GROUP, "awslogs-region": "us-east-1",
            "awslogs-stream-prefix": prefix}}}])
    return str(td["taskDefinition"]["taskDefinitionArn"])


@pytest.fixture
def aws_logs() -> Any:
    with mock_aws():
        yield boto3.client("logs", region_name="us-east-1"), \
            boto3.client("ecs", region_name="us-east-1")


def test_reads_only_the_jobs_lines_of_its_tasks_stream_across_pages(aws_logs: Any) -> None:
    logs, ecs = aws_logs
    td = register(ecs)
    stream = "worker/worker/0f1e2d3c4b5a"  # awslogs: prefix/container/task id
    logs.create_log_group(logGroupName=GROUP)
    logs.create_log_stream(logGroupName=GROUP, logStreamName=stream)
    logs.create_log_stream(logGroupName=GROUP, logStreamName="worker/worker/other")
    events = []
    for n in range(30):
        events.append(line("a", f"a{n}"))
        events.append(line("b", f"b{n}"))
    events.append("not JSON: a bare line of the runner")
    logs.put_log_events(logGroupName=GROUP, logStreamName=stream, logEvents=[
        {"timestamp": 1_796_000_000_000 + n, "message": m} for n, m in enumerate(events)])
    logs.put_log_events(logGroupName=GROUP, logStreamName="worker/worker/other", logEvents=[
        {"timestamp": 1_796_000_000_000, "message": line("a", "elsewhere")}])
    reader = CloudWatchJobLogs(logs, ecs, container="worker", task_family="longjobs-worker",
                               region="eu-west-1", page_limit=7)
    found = reader.locate(TASK, td, "a")
    assert found is not None and (found.group, found.name) == (GROUP, stream)
    assert found.console_url is not None and found.console_url.startswith(
        "https://eu-west-1.console.aws.amazon.com/cloudwatch/home?region=eu-west-1#logsV2:")
    got = reader.read(found, "a")
    assert [x.message for x in got] == [f"a{n}" for n in range(30)]
    assert reader.calls == 9  # 61 events, 7 a page: the whole stream came in pages
    assert reader.read(found, "a", since=got[-1].at)[0].message == "a29"
    assert reader.locate(TASK, None, "a") == found  # no revision known: the family's latest


def test_a_task_definition_without_a_stream_prefix_has_no_findable_stream(
        aws_logs: Any) -> None:
    logs, ecs = aws_logs
    ecs.register_task_definition(family="plain", containerDefinitions=[
        {"name": "worker", "image": "img", "memory": 512}])
    reader = CloudWatchJobLogs(logs, ecs, container="worker", task_family="plain",
                               region=None)
    assert reader.locate(TASK, None) is None


def test_a_stream_not_written_yet_reads_as_no_lines(aws_logs: Any) -> None:
    logs, ecs = aws_logs
    register(ecs)
    reader = CloudWatchJobLogs(logs, ecs, container="worker", task_family="longjobs-worker",
                               region=None)
    found = reader.locate(TASK, None)
    assert found is not None and reader.read(found, "a") == []


def test_the_request_filters_by_job_id_on_the_one_stream_and_follows_next_tokens() -> None:
    logs = boto3.client("logs", region_name="us-east-1")
    ecs = boto3.client("ecs", region_name="us-east-1")
    stub_logs, stub_ecs = Stubber(logs), Stubber(ecs)
    stub_ecs.add_response("describe_task_definition", {"taskDefinition": {
        "containerDefinitions": [{"name": "worker", "logConfiguration": {
            "logDriver": "awslogs", "options": {"awslogs-group": GROUP,
                                                "awslogs-stream-prefix": "worker"}}}]}},
        {"taskDefinition": "longjobs-worker:7"})
    expected = {"logGroupName": GROUP, "logStreamNames": ["worker/worker/0f1e2d3c4b5a"],
                "filterPattern": '{ $.job_id = "job-1" }', "startTime": 1_796_000_000_000}
    stub_logs.add_response("filter_log_events", {"events": [
        {"eventId": "e1", "timestamp": 1_796_000_000_001, "message": line("job-1", "one")}],
        "nextToken": "t2"}, expected)
    stub_logs.add_response("filter_log_events", {"events": [
        {"eventId": "e2", "timestamp": 1_796_000_000_002, "message": line("job-1", "two")}]},
        {**expected, "nextToken": "t2"})
    with stub_logs, stub_ecs:
        reader = CloudWatchJobLogs(logs, ecs, container="worker",
                                   task_family="longjobs-worker", region="us-east-1")
        found = reader.locate(TASK, "longjobs-worker:7")
        assert found is not None
        got = reader.read(found, "job-1", since=1_796_000_000.0)
        stub_logs.assert_no_pending_responses()
    assert [(x.key, x.message, x.attempt) for x in got] == [("e1", "one", 1), ("e2", "two", 1)]


def test_the_console_link_escapes_the_group_the_stream_and_the_filter_as_the_console_does(
        ) -> None:
    url = console_url("us-east-1", "/a/b", "worker/worker/t1", '{ $.job_id = "x" }')
    assert url.endswith("#logsV2:log-groups/log-group/$252Fa$252Fb/log-events/"
                        "worker$252Fworker$252Ft1$3FfilterPattern$3D"
                        "$257B$2520$2524.job_id$2520$253D$2520$2522x$2522$2520$257D")
