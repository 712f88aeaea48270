"""boto3 clients, made in one place so endpoint, region and retry policy are uniform."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from dispatcher.config import Config


def client(service: str, cfg: Config, *, retries: int = 4) -> Any:
    """A client honouring AWS_ENDPOINT_URL/AWS_REGION from the validated config.

    ``retries`` is botocore's total attempts; the ECS launcher passes 1 because it retries
    RunTask itself (tenacity) with the same clientToken.
    """
    return boto3.session.Session().client(
        service,  # type: ignore[call-overload]
        endpoint_url=cfg.endpoint_url,
        region_name=cfg.region,
        config=BotoConfig(retries={"max_attempts": retries, "mode": "standard"},
                          connect_timeout=5, read_timeout=30),
    )
