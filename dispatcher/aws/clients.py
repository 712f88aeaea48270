"""AWS clients, made in one place so endpoint, region and retry policy are uniform.

They are botocore's clients, made by botocore's session: boto3's ``Session.client`` makes the
same object, but importing boto3 imports s3transfer too (boto3.compat), a tenth of a second
of every Lambda cold start for a service longjobs never calls.
"""

from __future__ import annotations

import functools
from typing import Any

import botocore.loaders
import botocore.session
from botocore.config import Config as BotoConfig
from botocore.configprovider import ConfiguredEndpointProvider

# LONGJOBS_TICK_CONCURRENCY's maximum: calls a tick may have in flight on one client.
MAX_POOL_CONNECTIONS = 64


def service_endpoint(service: str, session: Any = None) -> str | None:
    """The endpoint configured for ``service`` alone, if any: ``AWS_ENDPOINT_URL_<SERVICE>``
    (e.g. ``AWS_ENDPOINT_URL_SQS``) or a ``services`` section of the shared config file.

    botocore resolves these itself, but only for a client made without an explicit
    ``endpoint_url``; this asks the same resolver botocore uses, so the lookup (variable names,
    service aliases, config file) stays botocore's.
    """
    session = session or botocore.session.get_session()
    try:
        scoped = session.get_scoped_config()
    except Exception:  # a profile that does not exist: no config-file endpoints then
        scoped = {}
    provider = ConfiguredEndpointProvider(full_config=session.full_config,
                                          scoped_config=scoped, client_name=service)
    for lookup in ("_get_endpoint_url_environment_service", "_get_endpoint_url_config_service"):
        found = getattr(provider, lookup, None)
        url = found() if found is not None else None
        if url:
            return str(url)
    return None


@functools.cache
def _loader(data_path: str | None) -> botocore.loaders.Loader:
    """botocore's data files (service models, endpoint rules), parsed once per process.

    Each client here gets a session of its own (so the environment it reads, endpoints
    included, is the one of the moment), and a new session parses its models again: a few MB
    of JSON per client, most of the time it took to make one (EC2's model alone is ~1 MB). The
    loader caches what it parsed and never changes it, so sessions can share it; it is keyed by
    ``AWS_DATA_PATH`` as botocore's own loader would read it.
    """
    return botocore.loaders.create_loader(data_path)


def new_session() -> botocore.session.Session:
    """A botocore session of its own (it reads the environment of the moment) over the data
    files this process has parsed already (:func:`_loader`)."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _loader(core.get_config_variable("data_path")))
    return core


def parse_ahead(service: str) -> None:
    """Parse botocore's data files for ``service`` now: in a process that forks workers, each
    worker's first client of it then skips the parse (~50 ms of CPU each)."""
    new_session().create_client(service, region_name="us-east-1")


def endpoint_client(service: str, endpoint: str | None, region: str | None, *,
                    retries: int = 4) -> Any:
    """A client on ``endpoint`` (``AWS_ENDPOINT_URL``) in ``region``; ``retries`` is the total
    number of attempts of a call, the first included (the ECS launcher passes 1: it retries
    RunTask itself, with the same clientToken).

    A per-service endpoint (``AWS_ENDPOINT_URL_SQS``, as boto3 documents it) wins over
    ``endpoint``, the global ``AWS_ENDPOINT_URL``: local mode can then keep DynamoDB and ECS on
    moto and put SQS on an emulator that handles deep queues.
    """
    core = new_session()
    return core.create_client(
        service,
        endpoint_url=service_endpoint(service, core) or endpoint,
        region_name=region,
        # total_max_attempts counts every attempt, the first included; botocore's
        # max_attempts would count retries after it (one attempt more than meant).
        # https://boto3.amazonaws.com/v1/documentation/api/latest/guide/retries.html
        # One client serves every thread of a tick (LONGJOBS_TICK_CONCURRENCY, up to 64):
        # botocore's default pool of 10 connections would open and drop one per call beyond.
        config=BotoConfig(retries={"total_max_attempts": retries, "mode": "standard"},
                          connect_timeout=5, read_timeout=30,
                          max_pool_connections=MAX_POOL_CONNECTIONS),
    )
