"""boto3 clients, made in one place so endpoint, region and retry policy are uniform."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from dispatcher.settings import Config


def client(service: str, cfg: Config, *, retries: int = 4) -> Any:
    """A client honouring AWS_ENDPOINT_URL/AWS_REGION from the validated config.

    ``retries`` is botocore's total attempts; the ECS launcher passes 1 because it retries
    RunTask itself (tenacity) with the same clientToken.
    """
    return endpoint_client(service, cfg.endpoint_url, cfg.region, retries=retries)


def endpoint_client(service: str, endpoint: str | None, region: str | None, *,
                    retries: int = 4) -> Any:
    """The same, before a Config exists (provisioning a fresh endpoint)."""
    return boto3.session.Session().client(
        service,  # type: ignore[call-overload]
        endpoint_url=endpoint,
        region_name=region,
        config=BotoConfig(retries={"max_attempts": retries, "mode": "standard"},
                          connect_timeout=5, read_timeout=30),
    )
