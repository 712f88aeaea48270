"""The Launcher port's contract: MemoryLauncher (the twin) and EcsLauncher (on moto behind the
AwsProxy, which adds what moto lacks) answer alike.

Every test runs once per implementation, so the twin cannot drift from the adapter. Each
backend comes with a small harness for what a test must do outside the port: inject placement
failures, count the tasks really started, register a new task definition revision.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from botocore.config import Config

from dispatcher.aws.ecs import EcsLauncher
from dispatcher.domain.errors import LaunchError
from dispatcher.domain.jobs import Resources
from dispatcher.domain.pacing import RateExceeded
from dispatcher.domain.stops import LastStatus, StopCode
from dispatcher.ports.launcher import (
    MAX_TASKS_PER_CALL,
    NOT_STARTED_BY_FIRST_CALL,
    Launcher,
    LaunchRequest,
)
from dispatcher.testing.memory_launcher import MemoryLauncher
from dispatcher.wiring import adapters

RETRY_ONCE = Config(retries={"max_attempts": 1, "mode": "standard"})


@dataclass
class Harness:
    launcher: Launcher
    inject_failures: Callable[[list[str]], None]
    started: Callable[[], int]  # tasks really started so far
    register_revision: Callable[[], str]  # family:revision of a new ACTIVE revision
    throttle: Callable[[int], None]  # the next n run() calls are throttled on every try
    # The proxy's clientToken cache lives as long as the test session: tokens are per test.
    token_prefix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


def _memory() -> Harness:
    launcher = MemoryLauncher()
    return Harness(launcher, launcher.inject_failures, lambda: len(launcher.tasks),
                   launcher.register_task_definition, launcher.inject_throttle)


def _stop_codes_on(ecs: Any) -> None:
    """Give tasks stopped by StopTask ECS's stopCode UserInitiated, which moto leaves out.

    A stand-in until ``AwsProxy`` injects it at the HTTP boundary (``dispatcher/testing/proxy.py``):
    it mutates the parsed DescribeTasks answer of this one client, after botocore parsed it.
    """
    stopped: set[str] = set()

    def after_stop(parsed: dict[str, Any], **_: Any) -> None:
        if arn := parsed.get("task", {}).get("taskArn"):
            stopped.add(arn)

    def after_describe(parsed: dict[str, Any], **_: Any) -> None:
        for task in parsed.get("tasks", []):
            if task.get("taskArn") in stopped and task.get("lastStatus") == "STOPPED":
                task.setdefault("stopCode", StopCode.USER_INITIATED.value)

    ecs.meta.events.register("after-call.ecs.StopTask", after_stop)
    ecs.meta.events.register("after-call.ecs.DescribeTasks", after_describe)


def _ecs(aws: Any) -> Harness:
    target = adapters.ecs_target(aws.config())
    ecs = boto3.client("ecs", config=RETRY_ONCE)
    _stop_codes_on(ecs)

    def started() -> int:
        pages = ecs.get_paginator("list_tasks").paginate(cluster=target.cluster)
        return sum(len(page["taskArns"]) for page in pages)

    def register_revision() -> str:
        td = ecs.describe_task_definition(taskDefinition=target.task_family)["taskDefinition"]
        arn = ecs.register_task_definition(
            family=td["family"], networkMode=td["networkMode"],
            requiresCompatibilities=td["requiresCompatibilities"], cpu=td["cpu"],
            memory=td["memory"], containerDefinitions=td["containerDefinitions"],
        )["taskDefinition"]["taskDefinitionArn"]
        return str(arn).rsplit("/", 1)[-1]

    # Each of the adapter's tries is two HTTP attempts: RETRY_ONCE's max_attempts counts the
    # retries after the first (botocore's legacy meaning of the key).
    tries = 2
    attempts = tries * 2
    return Harness(EcsLauncher(ecs, target, max_tries=tries), aws.proxy.inject_runtask_failures,
                   started, register_revision, lambda n: aws.proxy.inject_throttle(n * attempts))


@pytest.fixture(params=["memory", "ecs"])
def harness(request: pytest.FixtureRequest) -> Harness:
    if request.param == "memory":
        return _memory()
    return _ecs(request.getfixturevalue("aws"))


def _request(h: Harness, count: int = 2, token: str = "tok-1", **kw: Any) -> LaunchRequest:
    return LaunchRequest(h.launcher.resolve_task_definition(), count,
                         f"{h.token_prefix}-{token}", "contract",
                         env=kw.get("env", {"LONGJOBS_BUNDLE": "b1"}), tags={"app": "longjobs"},
                         resources=kw.get("resources", Resources()))


def test_run_starts_count_tasks(harness: Harness) -> None:
    result = harness.launcher.run(_request(harness, 3))
    assert len(result.task_arns) == 3 and len(set(result.task_arns)) == 3
    assert result.failures == []
    assert harness.started() == 3


def test_a_repeated_client_token_returns_the_first_tasks_and_starts_none(
        harness: Harness) -> None:
    request = _request(harness, 2)
    first = harness.launcher.run(request)
    again = harness.launcher.run(request)
    assert again.task_arns == first.task_arns
    assert harness.started() == 2
    other = harness.launcher.run(_request(harness, 2, token="tok-2"))
    assert set(other.task_arns).isdisjoint(first.task_arns)
    assert harness.started() == 4


def test_a_client_token_reused_with_other_parameters_returns_the_first_tasks(
        harness: Harness) -> None:
    """ECS refuses it (ConflictException) and names the tasks the first call started: they
    are the launch's; what the first call did not start is a failure, and nothing new runs."""
    first = harness.launcher.run(_request(harness, 2))
    fewer = harness.launcher.run(_request(harness, 1))
    assert fewer.task_arns == first.task_arns[:1] and fewer.failures == []
    more = harness.launcher.run(_request(harness, 3))
    assert more.task_arns == first.task_arns and more.failures == [NOT_STARTED_BY_FIRST_CALL]
    assert harness.started() == 2


def test_a_task_size_is_part_of_the_parameters_a_client_token_fixes(harness: Harness) -> None:
    big = _request(harness, 2, token="sized", resources=Resources(4096, 8192, 50))
    first = harness.launcher.run(big)
    assert len(first.task_arns) == 2
    assert harness.launcher.run(big) == first  # the same size: the same tasks
    # Another size with the same token starts nothing: the first call's tasks come back.
    other = harness.launcher.run(_request(harness, 2, token="sized",
                                          resources=Resources(256, 512)))
    assert other.task_arns == first.task_arns
    assert harness.launcher.run(_request(harness, 2, token="sized")).task_arns == \
        first.task_arns  # the default size
    assert harness.started() == 2


@pytest.mark.parametrize("count", [MAX_TASKS_PER_CALL + 1, 0])
def test_count_outside_one_to_ten_is_refused(harness: Harness, count: int) -> None:
    with pytest.raises(LaunchError, match="InvalidParameterException"):
        harness.launcher.run(_request(harness, count))
    assert harness.started() == 0


def test_ten_tasks_per_call_is_allowed(harness: Harness) -> None:
    result = harness.launcher.run(_request(harness, MAX_TASKS_PER_CALL))
    assert len(result.task_arns) == MAX_TASKS_PER_CALL


def test_placement_failures_come_back_as_failures_with_their_reasons(harness: Harness) -> None:
    harness.inject_failures(["RESOURCE:MEMORY"])
    partial = harness.launcher.run(_request(harness, 3, token="t1"))
    assert len(partial.task_arns) == 2
    assert partial.failures == ["RESOURCE:MEMORY"]
    # The degraded answer is what the token replays.
    assert harness.launcher.run(_request(harness, 3, token="t1")) == partial

    capacity = "Capacity is unavailable at this time. Please try again later or in a different "\
               "availability zone"
    harness.inject_failures([capacity, capacity])
    none = harness.launcher.run(_request(harness, 2, token="t2"))
    assert none.task_arns == [] and none.failures == [capacity, capacity]
    assert harness.started() == 2


def test_a_throttled_runtask_raises_rate_exceeded_and_its_token_works_later(
        harness: Harness) -> None:
    """ThrottlingException on every try: ``RateExceeded`` (an unknown outcome to the port,
    not a ``LaunchError``); the same clientToken, repeated later, starts the tasks once."""
    harness.throttle(1)
    with pytest.raises(RateExceeded, match="ThrottlingException"):
        harness.launcher.run(_request(harness, 2, token="throttled"))
    assert harness.started() == 0
    first = harness.launcher.run(_request(harness, 2, token="throttled"))
    assert len(first.task_arns) == 2
    assert harness.launcher.run(_request(harness, 2, token="throttled")) == first
    assert harness.started() == 2


def test_describe_answers_in_order_and_missing_for_unknown_arns(harness: Harness) -> None:
    arns = harness.launcher.run(_request(harness, 2)).task_arns
    unknown = arns[0].rsplit("/", 1)[0] + "/0123456789abcdef0123456789abcdef"
    statuses = harness.launcher.describe([unknown, *arns])
    assert [s.task_arn for s in statuses] == [unknown, *arns]
    assert statuses[0].last_status is LastStatus.MISSING
    assert statuses[0].last_status.gone
    for status in statuses[1:]:
        assert isinstance(status.last_status, LastStatus)
        assert not status.last_status.gone
        assert status.stop_code is None


def test_stop_leaves_the_task_stopped_user_initiated_with_the_reason(harness: Harness) -> None:
    keep, stop = harness.launcher.run(_request(harness, 2)).task_arns
    harness.launcher.stop(stop, "longjobs: cancelled by an operator")
    stopped, running = harness.launcher.describe([stop, keep])
    assert stopped.last_status is LastStatus.STOPPED
    assert stopped.stop_code == StopCode.USER_INITIATED
    assert stopped.stopped_reason == "longjobs: cancelled by an operator"
    assert not running.last_status.gone
    harness.launcher.stop(stop, "again")  # stopping a stopped task is not an error
    assert harness.launcher.describe([stop])[0].last_status is LastStatus.STOPPED


def test_stop_reason_is_cut_to_255_characters(harness: Harness) -> None:
    (arn,) = harness.launcher.run(_request(harness, 1)).task_arns
    harness.launcher.stop(arn, "r" * 300)
    assert harness.launcher.describe([arn])[0].stopped_reason == "r" * 255


def test_resolve_picks_the_latest_revision(harness: Harness) -> None:
    first = harness.launcher.resolve_task_definition()
    family, _, revision = first.rpartition(":")
    newer = harness.register_revision()
    assert newer == f"{family}:{int(revision) + 1}"
    assert harness.launcher.resolve_task_definition() == newer
    (arn,) = harness.launcher.run(_request(harness, 1)).task_arns  # the new revision runs
    assert arn
