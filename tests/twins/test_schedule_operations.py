"""Operators' schedules on the twins: a pause makes no fire and its resume makes up none; a
rate counts from its start and keeps its phase across a pause or an update (no past StartDate
is sent); run-now is the fire of this second; what Scheduler or the dispatcher would refuse is
refused before it is kept; a schedule made again starts with no fires; local mode's loop sends
a fire it could not send at its next step."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain import schedules
from dispatcher.domain.errors import InvalidMessage, InvalidSchedule
from dispatcher.domain.jobs import PRIORITY_ORDER, JobState
from dispatcher.local.schedule_loop import ScheduleLoop
from dispatcher.ops.schedule_ops import Schedules
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_schedule_book import MemoryScheduleBook
from tests.twins import Twins
from tests.twins.test_schedule_fires import HOUR, START, at, fire_jobs, world

__all__ = ["world"]  # the fixture, used by name


def test_a_paused_schedule_makes_no_fire_and_its_resume_makes_up_none(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    ops.create("hourly", "cron(0 * * * ? *)", {"kind": "k", "payload": {}})
    t.clock.set(START + HOUR + 1)
    assert loop.step() == [schedules.fire_id("hourly", at(1))]
    ops.pause("hourly")
    assert ops.next_fires(ops.get("hourly")) == []
    t.clock.set(START + 5 * HOUR + 1800)
    assert loop.step() == []
    ops.resume("hourly")
    assert loop.step() == []  # 5.5 h missed: none made up
    t.clock.set(START + 6 * HOUR + 1)
    assert loop.step() == [schedules.fire_id("hourly", at(6))]


def test_a_rate_counts_from_its_start_and_from_its_resume(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    t.clock.set(START + 7 * 60)
    ops.create("often", "rate(15 minutes)", {"kind": "k", "payload": {}})
    assert [schedules.fire_time(x) for x in ops.next_fires(ops.get("often"))] == [
        schedules.fire_time(START + m * 60) for m in (22, 37, 52)]
    t.clock.set(START + 40 * 60)
    assert len(loop.step()) == 3  # at 7, 22 and 37 minutes
    ops.pause("often")
    t.clock.set(START + 100 * 60)
    ops.resume("often")
    assert loop.step() == [schedules.fire_id("often", schedules.fire_time(START + 100 * 60))]


def test_run_now_is_a_fire_of_this_second(world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, _ = world
    ops.create("nightly", "cron(0 2 * * ? *)", {"kind": "k", "payload": {"day": "x"}},
               timezone="Europe/Berlin")
    job_id = ops.run_now("nightly")
    assert job_id == schedules.fire_id("nightly", schedules.fire_time(t.clock()))
    t.stages().tick.tick()
    job = t.job(job_id)
    assert job is not None and job.payload == {"day": "x"} and job.state == JobState.PENDING


@pytest.mark.parametrize(("expression", "job", "said"), [
    ("cron(0 2 * * * *)", {"kind": "k", "payload": {}}, "?"),
    ("rate(30 seconds)", {"kind": "k", "payload": {}}, "minute"),
    ("cron(0 2 * * ? *)", {"kind": "bad kind", "payload": {}}, "kind"),
    ("cron(0 2 * * ? *)", {"kind": "k", "payload": {}, "not_before": 5}, "not_before"),
    ("cron(0 2 * * ? *)", {"kind": "k", "payload": {}, "cpu": 3}, "cpu"),
])
def test_what_would_be_refused_is_refused_before_it_is_kept(
        world: tuple[Twins, Schedules, ScheduleLoop], expression: str, job: dict[str, Any],
        said: str) -> None:
    _, ops, _ = world
    with pytest.raises((InvalidSchedule, InvalidMessage)) as caught:
        ops.create("x", expression, job)
    assert said in str(caught.value)
    assert ops.list() == []


def test_a_bad_name_or_zone_is_named(world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    _, ops, _ = world
    with pytest.raises(InvalidSchedule, match="1-64 characters"):
        ops.create("no spaces", "cron(0 2 * * ? *)", {"kind": "k", "payload": {}})
    with pytest.raises(InvalidSchedule, match="Mars/Olympus"):
        ops.create("ok", "cron(0 2 * * ? *)", {"kind": "k", "payload": {}},
                   timezone="Mars/Olympus")


def test_a_schedule_made_again_starts_with_no_fires(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    t.clock.set(START + HOUR + 1)
    loop.step()
    t.stages().tick.tick()
    ops.delete("sync")
    ops.create("sync", "cron(30 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    assert t.store.fire_record("sync").fires == ()
    t.clock.set(START + HOUR + 1801)
    loop.step()
    t.stages().tick.tick()
    assert fire_jobs(t, "sync")[schedules.fire_id("sync", schedules.fire_time(
        START + HOUR + 1800))] == JobState.PENDING


def test_a_pause_and_an_update_keep_a_rates_phase_and_send_no_past_start(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """Scheduler refuses an update whose StartDate is more than 5 minutes past: a pause or an
    update a day later moves a rate's start to its next fire (its phase kept), a cron's to
    now."""
    t, ops, _ = world
    t.clock.set(START + 7 * 60)
    ops.create("often", "rate(15 minutes)", {"kind": "k", "payload": {}})
    ops.create("daily", "cron(0 2 * * ? *)", {"kind": "k", "payload": {}})
    t.clock.set(START + 86_400 + 100)
    ops.pause("often")
    ops.update("daily", description="still nightly")
    often, daily = ops.get("often"), ops.get("daily")
    assert often.start == START + 86_400 + 7 * 60  # 00:07 on, every 15 minutes
    assert daily.start == START + 86_400 + 100
    ops.resume("often")
    assert ops.next_fires(ops.get("often"))[1] - ops.next_fires(ops.get("often"))[0] == 900


def test_a_fire_local_mode_could_not_send_is_sent_at_the_next_step() -> None:
    class RefusesOnce(MemoryQueue):
        refused = 0

        def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
            if not self.refused:
                self.refused += 1
                return {entries[0][0]: "the endpoint failed for a moment"}
            return super().send(entries)

    t = Twins(START + 10)
    book = MemoryScheduleBook()
    ops = Schedules(book, lambda: t.store, lambda body: "", clock=t.clock)
    queue = RefusesOnce(clock=t.clock)
    loop = ScheduleLoop(book, {p: queue for p in PRIORITY_ORDER}, t.clock)
    ops.create("hourly", "cron(0 * * * ? *)", {"kind": "k", "payload": {}})
    t.clock.set(START + HOUR + 1)
    assert loop.step() == []  # refused: not made
    assert loop.step() == [schedules.fire_id("hourly", at(1))]  # the same fire, sent
    assert queue.backlog().visible == 1
