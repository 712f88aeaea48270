"""The overview's chart of jobs ended per hour: read from the usage counters the tasks'
stops add to (no job read), one bar an hour for the last 24, failed on top of succeeded, its
figures as text; drawn as SVG with classes only (the CSP allows no inline style)."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from dispatcher.console.chart import HEIGHT, chart
from dispatcher.console.guard import Guard
from dispatcher.console.routes import console_app
from dispatcher.console.source import ConsoleSource
from dispatcher.domain import costs
from dispatcher.domain.costs import Prices, TaskBill, Usage
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.ops.usage import EndedHour
from tests.twins import Twins


def stopped(twins: Twins, task: str, at: float, kinds: dict[str, tuple[int, int]]) -> None:
    """A task that stopped at ``at`` having ended, per kind, (jobs, of them failed): its
    counters as its stop's settlement writes them (the pointer's own write aside)."""
    usage = Usage()
    for kind, (jobs, failed) in kinds.items():
        for n in range(jobs):
            usage.add(1.0, costs.groups_of(kind), failed=n < failed)
    bill = TaskBill(256, 512, at - 60, at)
    ops = twins.store.bill_ops(costs.settle(f"arn:task/{task}", bill, usage, Prices()))
    twins.store.table.transact(ops[1:])


def test_the_hours_count_what_the_tasks_stops_counted(twins: Twins) -> None:
    now = twins.clock()
    hour = now // 3600 * 3600
    stopped(twins, "a", hour + 1, {"k": (5, 2), "j": (3, 0)})
    stopped(twins, "b", hour - 3600 + 5, {"k": (4, 1)})
    stopped(twins, "c", hour - 30 * 3600, {"k": (9, 9)})  # a day and more ago: not counted
    hours = Queries(twins.store, clock=twins.clock).ended_by_hour(24)
    assert len(hours) == 24 and hours[-1].hour == hour
    assert (hours[-1].ended, hours[-1].failed) == (8, 2)
    assert (hours[-2].ended, hours[-2].failed) == (4, 1)
    assert sum(h.ended for h in hours[:-2]) == 0


def test_the_busiest_hour_fills_the_chart_and_failed_sits_on_top() -> None:
    drawn = chart([EndedHour(0.0, 10, 4), EndedHour(3600.0, 5, 0), EndedHour(7200.0, 0, 0)])
    first, second, third = drawn.bars
    assert first.succeeded_height + first.failed_height == HEIGHT
    assert first.failed_height == HEIGHT * 4 / 10
    assert second.succeeded_height == HEIGHT / 2 and third.succeeded_height == 0
    assert "10 ended, 6 succeeded, 4 failed" in first.title
    assert (drawn.ended, drawn.failed, drawn.peak) == (15, 4, 10)


def overview(twins: Twins) -> str:
    web = TestClient(console_app(
        ConsoleSource(twins.client(), Queries(twins.store, queue=twins.queue, clock=twins.clock),
                      Top(twins.store, queue=twins.queue, clock=twins.clock),
                      has_dead_letters=False),
        Guard.serving("127.0.0.1", 8765, operate=False), clock=twins.clock),
        base_url="http://127.0.0.1:8765")
    return web.get("/").text


def test_the_overview_draws_the_chart_as_svg_with_its_figures(twins: Twins) -> None:
    assert "No job ended in the last 24 hours" in overview(twins)
    stopped(twins, "a", twins.clock() - 10, {"k": (5, 2)})
    page = overview(twins)  # a console of its own: the chart is read once a minute
    svg = page.split('<figure class="chart" id="ended-chart">', 1)[1].split("</figure>", 1)[0]
    assert "5 ended, 3 succeeded, 2 failed" in svg
    assert "5 jobs ended in the last 24 hours (2 failed" in svg
    assert len(re.findall(r'<rect class="bar-failed"', svg)) == 24
    assert "style=" not in svg
