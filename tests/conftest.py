"""Shared fixtures: one moto server per session, behind the fidelity proxy, reset per test.

AWS calls go through boto3/pynamodb over HTTP to moto; what moto cannot do (RunTask failures,
clientToken idempotency, throttling, crashes between steps) the proxy injects at the HTTP boundary.

The tests are in three tiers (folders): ``twins`` (in-process, no moto), ``contract`` and
``integration``; the run order puts the longest first (see ``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from dispatcher import settings
from dispatcher.local.provision import provision
from dispatcher.settings import Config
from dispatcher.testing.moto import MotoEndpoint, start_moto
from dispatcher.testing.proxy import AwsProxy
from tests.twins import twins  # noqa: F401  (the in-memory pipeline fixture)

logging.getLogger("werkzeug").setLevel(logging.CRITICAL)

BASE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoEndpoint]:
    for k, v in BASE_ENV.items():
        os.environ.setdefault(k, v)
    endpoint = start_moto()
    endpoint.pin_ecs_tasks()
    yield endpoint
    endpoint.stop()


@pytest.fixture(scope="session")
def proxy(moto_server: MotoEndpoint) -> Iterator[AwsProxy]:
    with AwsProxy(moto_server.url) as p:
        yield p


@dataclass
class Aws:
    """One test's AWS: endpoint URLs, the provisioned environment and the proxy's controls."""

    moto: MotoEndpoint
    proxy: AwsProxy
    env: dict[str, str]

    def config(self, **overrides: str) -> Config:
        return settings.load("dispatcher", {**self.env, **overrides})


@pytest.fixture
def aws(moto_server: MotoEndpoint, proxy: AwsProxy,
        monkeypatch: pytest.MonkeyPatch) -> Aws:
    moto_server.reset()
    moto_server.pin_ecs_tasks()
    for k, v in BASE_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    env = {**BASE_ENV, "AWS_ENDPOINT_URL": proxy.url, **provision(proxy.url)}
    env["LONGJOBS_LAUNCH_RECOVERY_SECONDS"] = "0"
    env["LONGJOBS_LAUNCH_BACKOFF_SECONDS"] = "0"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    proxy.reset_counts()
    proxy.runtask_requests.clear()
    proxy.runtask_forwarded = 0
    return Aws(moto_server, proxy, env)


# The modules whose tests take longest (a minute or more each on two busy cores), started first
# so that the four workers of `make test` end together instead of one of them beginning a
# 100-second scenario while the others run out of work; then integration, contract, twins.
LONGEST_FIRST = ("test_api_calls", "test_system_model", "test_demo", "test_runner",
                 "test_crash", "test_permissions", "test_ops", "test_lifecycle_property")
TIERS = ("integration", "contract", "twins")


def _run_order(item: pytest.Item) -> tuple[int, int]:
    path = item.path
    tier = path.parent.name
    longest = (LONGEST_FIRST.index(path.stem) if path.stem in LONGEST_FIRST
               else len(LONGEST_FIRST))
    return longest, TIERS.index(tier) if tier in TIERS else len(TIERS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort: each module's tests stay together and in their order, so module-scoped
    # fixtures are made once per worker that runs the module.
    items.sort(key=_run_order)
