"""The console's overview tells the stack's alarms in alarm (as text, longest firing first),
says when none is, says where no alarm prefix is known, and says why when they could not be
read while the rest of the overview is still shown."""

from __future__ import annotations

from starlette.testclient import TestClient

from dispatcher.console.guard import Guard
from dispatcher.console.routes import console_app
from dispatcher.console.source import ConsoleSource
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.ports.alarm_board import AlarmBoard, FiringAlarm
from dispatcher.testing.memory_alarms import MemoryAlarmBoard
from tests.twins import Twins

PREFIX = "prod-longjobs-"


def overview(twins: Twins, alarms: AlarmBoard | None) -> str:
    queries = Queries(twins.store, queue=twins.queue, clock=twins.clock, alarms=alarms)
    source = ConsoleSource(twins.client(), queries,
                           Top(twins.store, queue=twins.queue, clock=twins.clock),
                           has_dead_letters=False)
    web = TestClient(console_app(source, Guard.serving("127.0.0.1", 8765, operate=False),
                                 clock=twins.clock), base_url="http://127.0.0.1:8765")
    page = web.get("/")
    assert page.status_code == 200, page.text[:500]
    return page.text


def test_the_alarms_in_alarm_are_listed_longest_firing_first(twins: Twins) -> None:
    board = MemoryAlarmBoard(PREFIX)
    for name in ("queue-age", "jobs-failed", "dispatcher-heartbeat"):
        board.put(PREFIX + name, f"watches {name}")
    board.set_state(PREFIX + "jobs-failed", "ALARM", "<b>3 failed</b> > 0", 1_800_000_100.0)
    board.set_state(PREFIX + "queue-age", "ALARM", "Threshold Crossed", 1_800_000_000.0)
    page = overview(twins, board)
    table = page.split('<table id="alarms">', 1)[1].split("</table>", 1)[0]
    assert table.index("queue-age") < table.index("jobs-failed")
    assert "dispatcher-heartbeat" not in table
    assert "&lt;b&gt;3 failed&lt;/b&gt;" in table and "<b>" not in table


def test_none_in_alarm_is_said(twins: Twins) -> None:
    board = MemoryAlarmBoard(PREFIX)
    board.put(PREFIX + "queue-age")
    assert "None of the stack's alarms is in alarm." in overview(twins, board)


def test_without_a_prefix_the_page_says_which_setting_lists_them(twins: Twins) -> None:
    page = overview(twins, None)
    assert "LONGJOBS_ALARM_PREFIX" in page and "AlarmNamePrefix" in page


class Refused(AlarmBoard):
    def firing(self) -> list[FiringAlarm]:
        raise PermissionError("AccessDenied: cloudwatch:DescribeAlarms")


def test_alarms_that_cannot_be_read_are_said_and_the_rest_is_shown(twins: Twins) -> None:
    page = overview(twins, Refused())
    assert "could not be read (PermissionError: AccessDenied: cloudwatch:DescribeAlarms)" in page
    assert "ReadAlarms" in page
    assert "Backlog per priority queue" in page and "Jobs by state" in page
