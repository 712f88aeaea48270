"""10,000 schedules across a simulated day make exactly one job per fire, however their fires
are delivered: a tenth of them twice, a twentieth late (after the next ticks), some both.

The fires are made by local mode's loop (EventBridge Scheduler's part) every ten minutes of
the day, through a queue that duplicates and delays them, admitted by the real tick on the
twins, and run by runners after each tick. The day is 2026-03-29, when Europe's clocks go
forward: the schedules run in five zones. What the day should fire is computed apart, from
each schedule's expression; what it made is read from the table: one job for each of those
fires, and none other; a fire skipped only by a ``skip`` schedule, with the reason."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from dispatcher.domain import schedule_times, schedules
from dispatcher.domain.jobs import PRIORITY_ORDER, JobState
from dispatcher.domain.schedules import Overlap
from dispatcher.local.schedule_loop import ScheduleLoop
from dispatcher.ops.schedule_ops import Schedules
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_schedule_book import MemoryScheduleBook
from tests.twins import Twins
from tests.twins.test_array_jobs import run_launched

DAY = datetime(2026, 3, 29, tzinfo=UTC).timestamp()
STEP = 600.0  # the loop, the tick and the runners, every ten minutes of the day
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney")
SCHEDULES = 10_000


class LateAndTwice(MemoryQueue):
    """The queue as Scheduler and SQS deliver to it: some fires twice, some late."""

    def __init__(self, twins: Twins, rng: random.Random) -> None:
        super().__init__(clock=twins.clock)
        self._rng = rng
        self._late: list[tuple[float, list[tuple[str, str]]]] = []
        self.doubled = self.delayed = 0

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        if self._rng.random() < 0.05:  # late: after the next tick or two
            self.delayed += 1
            self._late.append((self._clock() + self._rng.choice((STEP, 2 * STEP)), entries))
            return {}
        if self._rng.random() < 0.10:
            self.doubled += 1
            if self._rng.random() < 0.5:
                self._late.append((self._clock() + STEP, entries))
            else:
                super().send(entries)
        return super().send(entries)

    def deliver_late(self) -> None:
        due = [e for at, e in self._late if at <= self._clock()]
        self._late = [(at, e) for at, e in self._late if at > self._clock()]
        for entries in due:
            super().send(entries)


def expression(rng: random.Random, n: int) -> str:
    """Daily crons mostly; one in 25 hourly, one in 100 a rate, one in 100 every half hour
    of working hours (about 22,000 fires in all)."""
    if n % 100 == 1:
        return f"rate({rng.choice((15, 30, 45, 60))} minutes)"
    if n % 100 == 2:
        return "cron(0/30 9-17 ? * MON-FRI,SUN *)"
    if n % 25 == 3:
        return f"cron({rng.randrange(60)} * * * ? *)"
    return f"cron({rng.randrange(60)} {rng.randrange(24)} * * ? *)"


def test_ten_thousand_schedules_make_one_job_per_fire_across_a_day() -> None:
    rng = random.Random(20261205)
    t = Twins(DAY - 3600)
    queue = LateAndTwice(t, rng)
    t.queue = queue
    book = MemoryScheduleBook()
    ops = Schedules(book, lambda: t.store, lambda body: t.client().submit_many([body])[0],
                    clock=t.clock)
    for n in range(SCHEDULES):
        ops.create(f"s{n:05d}", expression(rng, n),
                   {"kind": "k", "payload": {"n": n}, "estimated_seconds": 2},
                   timezone=ZONES[n % len(ZONES)],
                   overlap=Overlap.SKIP if n % 7 == 0 else Overlap.ALLOW)
    loop = ScheduleLoop(book, {p: queue for p in PRIORITY_ORDER}, t.clock)
    tick = t.stages(LONGJOBS_MAX_RUNNING_TASKS="20").tick  # small jobs share a task
    loop.step()  # sees them all, an hour before the day

    t.clock.set(DAY)
    while t.clock() <= DAY + 86_400 + 3 * STEP:  # the late ones delivered too
        if t.clock() <= DAY + 86_400:
            loop.step()
        queue.deliver_late()
        tick.tick()
        run_launched(t)  # every job ends: a skip schedule's next fire runs
        t.clock.advance(STEP)
    tick.tick()

    expected: dict[str, str] = {}
    for name in book.names():
        s = book.get(name)
        expr = schedule_times.parse(s.expression)
        assert s.start == DAY - 3600  # fires from its creation on
        for at in schedule_times.fires(expr, s.timezone, s.start - 1e-6, 200, start=s.start,
                                       end=DAY + 86_400):
            expected[schedules.fire_id(name, schedules.fire_time(at))] = name
    made = {j.job_id: j for j in t.jobs()}
    assert len(expected) > 20_000
    assert queue.doubled > 1_000 and queue.delayed > 1_000
    assert set(made) == set(expected), "a fire without its job, or a job without its fire"
    assert t.queue_counts() == (0, 0)
    # Only a skip schedule skips, and only for its last run, live when the fire came: a
    # delivery late past the next fire, or the fire of a loop step behind its job's run.
    for job_id, job in made.items():
        if job.state == JobState.CANCELLED:
            name = expected[job_id]
            assert int(name[1:]) % 7 == 0, job_id
            assert job.reason and job.reason.startswith(
                f"skipped: schedule {name!r} skips a fire while its last run is live"), job
        else:
            assert job.state == JobState.SUCCEEDED, job
    assert any(j.state == JobState.CANCELLED for j in made.values())
