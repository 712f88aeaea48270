"""Shared fixtures: one moto server per session, behind the fidelity proxy, reset per test.

AWS calls go through boto3/pynamodb over HTTP to moto; what moto cannot do (RunTask failures,
clientToken idempotency, throttling, crashes between steps) the proxy injects at the HTTP boundary.

The tests are in three tiers (folders): ``twins`` (in-process, no moto), ``contract`` and
``integration``; the run order deals the longest out first (see ``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

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


# The run order, for `make test`'s four workers (pytest-xdist, SharedSetupScheduling below):
# xdist hands each worker two work units to start with, then one at a time as each frees; a unit
# is one test, or every test of a module in SHARED_SETUP. The longest go first: the modules whose
# tests use a core for a minute or so, and the one test that waits longest (its handlers sleep),
# dealt one after another (the first of each, then the second of each, ...) so that no worker
# starts with two of them and none is left to end the run alone; then the SHARED_SETUP modules.
# The rest are dealt across modules the same way, so that tests that mostly wait (on runner
# processes, local mode, sleeps) run beside in-process tests that use the CPU, rather than all
# four workers waiting at once while a core idles (as a whole module of runner tests did).
LONGEST = ("test_array_at_full_size", "test_system_model", "test_demo", "test_api_calls",
           "test_lifecycle_property", "test_bulk_cli",
           "test_a_retry_waits_for_the_task_its_abandoned_run_keeps_alive_beside_a_mate")
# Modules whose module-scoped fixture is itself a run of ~30 s (a recorded exercise of every
# component on moto, a local mode, a moto server of their own, the Lambda package built from
# PyPI): sent to one worker as one unit, the fixture runs once instead of once on every worker
# that gets one of their tests.
SHARED_SETUP = ("test_permissions", "test_operator_permissions", "test_first_hour",
                "test_readme_commands", "test_proxy", "test_lambda_package")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: dict[str, int] = {}
    modules: dict[str, int] = {}
    order: dict[int, tuple[int, int, int]] = {}
    for item in items:
        module = item.path.stem
        name = getattr(item, "originalname", item.name)
        key = module if module in LONGEST else name if name in LONGEST else None
        nth = seen[module] = seen.get(module, -1) + 1
        if key is not None:
            order[id(item)] = (0, nth if key == module else 0, LONGEST.index(key))
        elif module in SHARED_SETUP:
            order[id(item)] = (1, 0, SHARED_SETUP.index(module))
        else:
            order[id(item)] = (2, nth, modules.setdefault(module, len(modules)))
    items.sort(key=lambda item: order[id(item)])  # stable: each module's order is kept


class SharedSetupScheduling(LoadScopeScheduling):
    """xdist's load scheduling, one test per unit, except a SHARED_SETUP module: one unit.

    Not ``--dist loadgroup`` with ``xdist_group`` marks: xdist 3.8 names a group by rewriting
    ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is ``_id``), so the marks
    group nothing and every test is sent on its own.
    """

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return module if Path(module).stem in SHARED_SETUP else nodeid


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> SharedSetupScheduling:
    return SharedSetupScheduling(config, log)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The README runner's reach, in the summary of a run that ran it (its test runs in a worker,
    whose output xdist does not show): the command blocks it read and what it did with them."""
    ran_here = [r for key in ("passed", "failed") for r in terminalreporter.stats.get(key, [])
                if "test_readme_commands" in getattr(r, "nodeid", "")]
    if not ran_here:
        return
    from tests.integration.test_readme_commands import all_commands, runs_for_real

    blocks, commands = all_commands()
    ran = sum(1 for c in commands if runs_for_real(c))
    failed = sum(1 for r in ran_here if r.failed)
    terminalreporter.write_line(
        f"README runner: {len(blocks)} shell blocks, {len(commands)} longjobs commands parsed, "
        f"{ran} run against local mode, {len(commands) - ran} parsed only (AWS-only or "
        f"long-running); {len(ran_here)} checks, {failed} failed")
