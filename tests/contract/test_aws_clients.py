"""The boto3 clients' retry policy: ``retries`` is the total number of HTTP attempts a call
makes (botocore's ``total_max_attempts``; its ``max_attempts`` counts retries after the first).
No network: every attempt is answered in-process with HTTP 500, which botocore retries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError

from dispatcher.aws.clients import endpoint_client
from dispatcher.aws.dynamodb import DynamoTable
from dispatcher.aws.dynamodb.model import create_table
from dispatcher.ports.table import Put, Record
from dispatcher.testing.moto import MotoEndpoint


class Body:
    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        yield b'{"__type":"ServerException","message":"try again"}'


class Http500:
    """Answers every attempt (a ``before-send`` handler: nothing goes on the wire)."""

    def __init__(self) -> None:
        self.attempts = 0

    def __call__(self, request: Any, **kwargs: Any) -> AWSResponse:
        self.attempts += 1
        return AWSResponse(request.url, 500, HTTPHeaders(), Body())


@pytest.mark.parametrize("retries", [1, 4])
def test_retries_is_the_total_number_of_attempts(retries: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(time, "sleep", lambda seconds: None)  # botocore's backoff
    ecs = endpoint_client("ecs", "http://127.0.0.1:9", "us-east-1", retries=retries)
    answer = Http500()
    ecs.meta.events.register("before-send.ecs.ListClusters", answer)
    with pytest.raises(ClientError):
        ecs.list_clusters()
    assert answer.attempts == retries
    assert ecs.meta.config.retries["total_max_attempts"] == retries


def test_clients_share_botocore_models_yet_read_the_environment_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each client has a session of its own, so an endpoint set in the environment between
    two clients is seen by the second; the models they are built from are parsed once."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:8001")
    first = endpoint_client("sqs", "http://127.0.0.1:9", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:8002")
    second = endpoint_client("sqs", "http://127.0.0.1:9", "us-east-1")
    assert first.meta.endpoint_url == "http://127.0.0.1:8001"
    assert second.meta.endpoint_url == "http://127.0.0.1:8002"
    models = [c.meta.service_model._service_description for c in (first, second)]
    assert models[0] is models[1]


def test_the_tables_connections_share_the_models_and_make_one_client_each(
        moto_server: MotoEndpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """pynamodb's connections (the model's, the transactions') are built over the same parsed
    models as every other client; threads that call at once get one client, not one each."""
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(k, v)
    made: list[str] = []
    real = botocore.session.Session.create_client

    def counted(self: botocore.session.Session, service: str, *args: Any,
                **kwargs: Any) -> Any:
        made.append(service)
        return real(self, service, *args, **kwargs)

    monkeypatch.setattr(botocore.session.Session, "create_client", counted)
    name = f"clients-{time.monotonic_ns()}"
    create_table(name, "us-east-1", moto_server.url)
    table = DynamoTable(name, "us-east-1", moto_server.url)
    made.clear()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: table.get(f"J#{i}"), range(8)))
        list(pool.map(lambda i: table.transact([Put(Record(f"J#{i}"))]), range(8)))
    # The reads use the model's client, made by create_table before; the eight threads'
    # first transactions made one client for the transactions' connection.
    assert made == ["dynamodb"], made
    table = DynamoTable(name, "us-east-1", moto_server.url)  # the same model, a new _conn
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: table.transact([Put(Record(f"K#{i}"))]), range(8)))
    assert made == ["dynamodb", "dynamodb"], made
    sqs = endpoint_client("sqs", "http://127.0.0.1:9", "us-east-1")
    ddb = table.model._get_connection().connection.client
    assert ddb.meta.service_model._service_description is not None
    assert ddb._loader is sqs._loader  # the same parsed data files
