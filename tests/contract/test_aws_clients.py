"""The boto3 clients' retry policy: ``retries`` is the total number of HTTP attempts a call
makes (botocore's ``total_max_attempts``; its ``max_attempts`` counts retries after the first).
No network: every attempt is answered in-process with HTTP 500, which botocore retries."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ClientError

from dispatcher.aws.clients import endpoint_client


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
