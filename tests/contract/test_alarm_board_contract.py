"""The alarm-board port's contract: MemoryAlarmBoard (the twin) and CloudWatchAlarmBoard
(CloudWatch on moto) tell the same alarms in alarm: only those named under the board's
prefix (not another stack's whose name starts alike), only those in ALARM, the prefix left
off their names, past a page of 100."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import boto3
import pytest

from dispatcher import settings
from dispatcher.ports.alarm_board import AlarmBoard
from dispatcher.testing.memory_alarms import MemoryAlarmBoard
from dispatcher.wiring import adapters
from tests.conftest import Aws

PREFIX = "prod-longjobs-"


@dataclass
class Board:
    board: AlarmBoard
    put: Callable[[str, str], None]
    fire: Callable[[str, str], None]


def _cloudwatch(monkeypatch: pytest.MonkeyPatch) -> Board:
    monkeypatch.setenv("LONGJOBS_ALARM_PREFIX", PREFIX)
    board = adapters.alarm_board(settings.load("client"))
    assert board is not None
    cw = boto3.client("cloudwatch")

    def put(name: str, description: str) -> None:
        cw.put_metric_alarm(AlarmName=name, AlarmDescription=description, Namespace="ns",
                            MetricName="m", Statistic="Sum", Period=60, EvaluationPeriods=1,
                            Threshold=1, ComparisonOperator="GreaterThanThreshold")

    def fire(name: str, reason: str) -> None:
        cw.set_alarm_state(AlarmName=name, StateValue="ALARM", StateReason=reason)
    return Board(board, put, fire)


def _memory() -> Board:
    board = MemoryAlarmBoard(PREFIX)

    def fire(name: str, reason: str) -> None:
        board.set_state(name, "ALARM", reason, 1_800_000_000.0)
    return Board(board, board.put, fire)


@pytest.fixture(params=["memory", "cloudwatch"])
def board(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Board:
    if request.param == "memory":
        return _memory()
    request.getfixturevalue("aws")
    return _cloudwatch(monkeypatch)


def test_only_this_stacks_alarms_in_alarm_are_told(board: Board) -> None:
    board.put(PREFIX + "queue-age", "Jobs wait in the queue")
    board.put(PREFIX + "jobs-failed", "Jobs failed")
    board.put("prod-eu-longjobs-queue-age", "another stack's")  # starts alike, not ours
    board.put("unrelated", "not a stack's")
    assert board.board.firing() == []
    board.fire(PREFIX + "queue-age", "Threshold Crossed: 1 datapoint [900.0] > 600.0")
    board.fire("prod-eu-longjobs-queue-age", "theirs")
    board.fire("unrelated", "not ours")
    (alarm,) = board.board.firing()
    assert alarm.name == "queue-age"
    assert alarm.description == "Jobs wait in the queue"
    assert alarm.reason == "Threshold Crossed: 1 datapoint [900.0] > 600.0"
    assert alarm.since > 0


def test_more_alarms_than_a_page_are_all_told(board: Board) -> None:
    names = [f"{PREFIX}a{n:03d}" for n in range(105)]
    for name in names:
        board.put(name, "")
        board.fire(name, "fired")
    assert sorted(a.name for a in board.board.firing()) == [n.removeprefix(PREFIX)
                                                           for n in names]


def test_no_prefix_no_board(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LONGJOBS_ALARM_PREFIX", raising=False)
    assert adapters.alarm_board(settings.load("client")) is None
