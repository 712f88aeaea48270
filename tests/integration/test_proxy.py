"""AwsProxy against a real moto server: the fidelity it adds must look like AWS to botocore."""

from __future__ import annotations

import http.client
import json
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dispatcher.testing.moto import MotoEndpoint, start_moto
from dispatcher.testing.proxy import AwsProxy

REGION = "us-east-1"
# botocore's retries["max_attempts"] counts retries, not attempts (total_max_attempts does):
# this config makes ONE retry, which is enough to surface moto 500s without hiding them.
RETRY_ONCE = Config(retries={"max_attempts": 1, "mode": "standard"})


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoEndpoint]:
    endpoint = start_moto()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def proxy(moto: MotoEndpoint, monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsProxy]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SECURITY_TOKEN",
                 "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    moto.reset()
    moto.pin_ecs_tasks()
    with AwsProxy(moto.url) as running:
        yield running


def client(proxy: AwsProxy, service: str) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=proxy.url, config=RETRY_ONCE)


def ecs_setup(proxy: AwsProxy) -> tuple[Any, dict[str, Any]]:
    """A cluster and a Fargate task definition moto will run, plus base RunTask kwargs."""
    ecs = client(proxy, "ecs")
    subnet = client(proxy, "ec2").describe_subnets()["Subnets"][0]["SubnetId"]
    ecs.create_cluster(clusterName="jobs")
    ecs.register_task_definition(
        family="job", networkMode="awsvpc", requiresCompatibilities=["FARGATE"],
        cpu="256", memory="512",
        containerDefinitions=[{"name": "main", "image": "busybox", "memory": 512}],
    )
    kwargs = {
        "cluster": "jobs", "taskDefinition": "job", "launchType": "FARGATE",
        "networkConfiguration": {"awsvpcConfiguration": {
            "subnets": [subnet], "securityGroups": ["sg-123"]}},
    }
    return ecs, kwargs


def task_arns(response: dict[str, Any]) -> list[str]:
    return sorted(task["taskArn"] for task in response["tasks"])


def listed_tasks(ecs: Any) -> list[str]:
    return sorted(ecs.list_tasks(cluster="jobs")["taskArns"])


def test_counts_operations_by_service(proxy: AwsProxy) -> None:
    sqs = client(proxy, "sqs")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    assert url.startswith(proxy.url), "moto builds queue URLs from Host; keep them on the proxy"
    sqs.send_message(QueueUrl=url, MessageBody="a")
    sqs.send_message(QueueUrl=url, MessageBody="b")
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)

    assert proxy.counts() == {"sqs.CreateQueue": 1, "sqs.SendMessage": 2, "sqs.ReceiveMessage": 1}
    proxy.reset_counts()
    assert proxy.counts() == {}


def test_counts_dynamodb_and_query_protocol(proxy: AwsProxy) -> None:
    client(proxy, "dynamodb").list_tables()
    client(proxy, "ec2").describe_subnets()  # EC2 is query protocol: Action= in the form body
    assert proxy.counts() == {"dynamodb.ListTables": 1, "ec2.DescribeSubnets": 1}


def test_runtask_count_above_ten_is_rejected(proxy: AwsProxy) -> None:
    ecs, kwargs = ecs_setup(proxy)
    with pytest.raises(ClientError) as error:
        ecs.run_task(count=11, **kwargs)
    assert error.value.response["Error"]["Code"] == "InvalidParameterException"
    assert proxy.runtask_forwarded == 0
    assert listed_tasks(ecs) == []


def test_runtask_client_token_replays_first_response(proxy: AwsProxy) -> None:
    ecs, kwargs = ecs_setup(proxy)
    token = str(uuid.uuid4())
    first = ecs.run_task(count=2, clientToken=token, **kwargs)
    again = ecs.run_task(count=2, clientToken=token, **kwargs)

    assert len(task_arns(first)) == 2
    assert task_arns(again) == task_arns(first)
    assert listed_tasks(ecs) == task_arns(first)
    assert proxy.runtask_forwarded == 1
    assert len(proxy.runtask_requests) == 2

    with pytest.raises(ClientError) as error:
        ecs.run_task(count=1, clientToken=token, **kwargs)
    assert error.value.response["Error"]["Code"] == "ConflictException"
    # As ECS answers it: the tasks the token's first call started.
    assert sorted(error.value.response["resourceIds"]) == sorted(  # type: ignore[typeddict-item]
        task_arns(first))


def test_runtask_injected_failures(proxy: AwsProxy) -> None:
    ecs, kwargs = ecs_setup(proxy)
    proxy.inject_runtask_failures(["RESOURCE:ENI"])
    response = ecs.run_task(count=3, clientToken="t1", **kwargs)

    assert len(response["tasks"]) == 2
    assert [f["reason"] for f in response["failures"]] == ["RESOURCE:ENI"]
    assert proxy.runtask_requests[-1]["count"] == 3
    # The degraded answer is what the token replays, as AWS would.
    assert task_arns(ecs.run_task(count=3, clientToken="t1", **kwargs)) == task_arns(response)

    proxy.inject_runtask_failures(["AGENT", "AGENT"])
    all_failed = ecs.run_task(count=2, **kwargs)
    assert all_failed["tasks"] == []
    assert len(all_failed["failures"]) == 2
    assert proxy.runtask_forwarded == 1
    assert len(listed_tasks(ecs)) == 2


def test_runtask_throttling(proxy: AwsProxy) -> None:
    ecs, kwargs = ecs_setup(proxy)
    proxy.inject_throttle(2)  # the initial attempt and RETRY_ONCE's retry
    with pytest.raises(ClientError) as error:
        ecs.run_task(**kwargs)
    assert error.value.response["Error"]["Code"] == "ThrottlingException"
    assert proxy.counts()["ecs.RunTask"] == 2
    assert proxy.runtask_forwarded == 0
    assert listed_tasks(ecs) == []
    assert len(ecs.run_task(**kwargs)["tasks"]) == 1


def test_runtask_throttle_is_retried_by_default_botocore(proxy: AwsProxy) -> None:
    _, kwargs = ecs_setup(proxy)
    retrying = boto3.client("ecs", region_name=REGION, endpoint_url=proxy.url,
                            config=Config(retries={"max_attempts": 3, "mode": "standard"}))
    proxy.inject_throttle(1)
    assert len(retrying.run_task(**kwargs)["tasks"]) == 1
    assert proxy.counts()["ecs.RunTask"] == 2


def test_a_share_of_dynamodb_calls_throttled_as_aws_throttles_them(proxy: AwsProxy) -> None:
    """botocore sees DynamoDB's throttling error (and retries it); SQS is never throttled."""
    ddb, sqs = client(proxy, "dynamodb"), client(proxy, "sqs")
    ddb.create_table(TableName="t", BillingMode="PAY_PER_REQUEST",
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    proxy.throttle_share(1.0)
    with pytest.raises(ClientError) as error:
        ddb.get_item(TableName="t", Key={"pk": {"S": "a"}})
    assert error.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert proxy.counts()["dynamodb.GetItem"] == 2 == proxy.throttled  # RETRY_ONCE's retry too
    sqs.send_message(QueueUrl=url, MessageBody="never throttled")
    proxy.throttle_share(0.5, seed=1)
    ddb.put_item(TableName="t", Item={"pk": {"S": "b"}})  # throttled or not, botocore retried
    tried = proxy.counts()["dynamodb.PutItem"]
    assert 1 <= tried <= 2 and proxy.throttled == 2 + tried - 1


def test_injected_crash_after_forward_keeps_effects(proxy: AwsProxy) -> None:
    sqs = client(proxy, "sqs")
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    proxy.inject_error("sqs.SendMessage", after_forward=True)
    with pytest.raises(ClientError) as error:
        sqs.send_message(QueueUrl=url, MessageBody="survivor")
    assert error.value.response["Error"]["Code"] == "InjectedCrash"

    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert [m["Body"] for m in messages] == ["survivor"]


@pytest.mark.parametrize("service", ["sqs", "dynamodb", "ecs"])
def test_injected_crash_code_parsed_and_not_retried(proxy: AwsProxy, service: str) -> None:
    retrying = boto3.client(service, region_name=REGION, endpoint_url=proxy.url,
                            config=Config(retries={"max_attempts": 5, "mode": "standard"}))
    operation, method = {"sqs": ("ListQueues", "list_queues"),
                         "dynamodb": ("ListTables", "list_tables"),
                         "ecs": ("ListClusters", "list_clusters")}[service]
    call = getattr(retrying, method)
    proxy.inject_error(f"{service}.{operation}", after_forward=False, times=2)
    with pytest.raises(ClientError) as error:
        call()
    assert error.value.response["Error"]["Code"] == "InjectedCrash"
    assert proxy.counts()[f"{service}.{operation}"] == 1, "botocore must not retry it"
    with pytest.raises(ClientError):
        call()
    call()  # injections exhausted


def test_injected_crash_after_runtask_then_token_retry_replays(proxy: AwsProxy) -> None:
    ecs, kwargs = ecs_setup(proxy)
    proxy.inject_error("ecs.RunTask", after_forward=True)
    with pytest.raises(ClientError):
        ecs.run_task(count=2, clientToken="lost-response", **kwargs)
    started = listed_tasks(ecs)
    assert len(started) == 2
    assert task_arns(ecs.run_task(count=2, clientToken="lost-response", **kwargs)) == started
    assert listed_tasks(ecs) == started


def test_moto_api_not_counted(proxy: AwsProxy) -> None:
    request = urllib.request.Request(proxy.url + "/moto-api/reset", data=b"", method="POST")
    with urllib.request.urlopen(request) as response:
        assert response.status == 200
    assert proxy.counts() == {}


def test_concurrent_token_retries_start_tasks_once(proxy: AwsProxy) -> None:
    ecs, kwargs = ecs_setup(proxy)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: ecs.run_task(clientToken="same", **kwargs), range(4)))
    assert {tuple(task_arns(r)) for r in results} == {tuple(listed_tasks(ecs))}
    assert proxy.runtask_forwarded == 1


def test_keep_alive_connection_serves_several_requests(proxy: AwsProxy) -> None:
    host, port = proxy.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    headers = {"X-Amz-Target": "DynamoDB_20120810.ListTables",
               "Content-Type": "application/x-amz-json-1.0",
               "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/"
                                "dynamodb/aws4_request, SignedHeaders=host, Signature=x"}
    for _ in range(3):
        connection.request("POST", "/", body=b"{}", headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        assert json.loads(response.read()) == {"TableNames": []}
        assert response.getheader("Connection") is None
    connection.close()
    assert proxy.counts() == {"dynamodb.ListTables": 3}
