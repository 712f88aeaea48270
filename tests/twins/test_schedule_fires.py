"""A schedule's fires on the twins: each fire is one job however often it is delivered; a
``skip`` schedule runs no fire while its last run is live, and records the skipped fire (its
job CANCELLED with the reason, listed by ``schedules show``), also when its fires come late,
twice, as arrays, after a failed recording or an operator's retry; what a fire's judgement
costs. The fires are made by local mode's loop (EventBridge Scheduler's part) on the twin
queue, and admitted by the real tick. The operators' side: test_schedule_operations.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dispatcher.domain import message, schedules
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import PRIORITY_ORDER, JobState
from dispatcher.domain.schedules import FIRES_KEPT, RAN, SKIPPED, JobSchedule, Overlap
from dispatcher.local.schedule_loop import ScheduleLoop
from dispatcher.ops.schedule_ops import Schedules
from dispatcher.ports.queue import Received
from dispatcher.ports.table import Record, TableUnavailable
from dispatcher.stages.admitted import to_job
from dispatcher.stages.fires import FireGate
from dispatcher.store import JobUpdate, Store
from dispatcher.testing.memory_schedule_book import MemoryScheduleBook
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins, finish_as_runner

# 2023-11-14T22:00:00Z: a whole hour, so that hourly fires fall on round times.
START = 1_700_000_000.0 - 1_700_000_000.0 % 3600 + 3600
HOUR = 3600.0


@pytest.fixture
def world() -> tuple[Twins, Schedules, ScheduleLoop]:
    t = Twins(START + 10)  # created just after a whole hour: its first fire is the next
    book = MemoryScheduleBook()
    ops = Schedules(book, lambda: t.store, lambda body: t.client().submit_many([body])[0],
                    clock=t.clock)
    loop = ScheduleLoop(book, {p: t.queue for p in PRIORITY_ORDER}, t.clock)
    return t, ops, loop


def fire_jobs(t: Twins, name: str) -> dict[str, JobState]:
    return {j.job_id: j.state for j in t.jobs() if j.job_id.startswith(f"schedule/{name}/")}


def each_minute_run(t: Twins, loop: ScheduleLoop, name: str, minutes: int) -> None:
    """A schedule firing every minute for ``minutes`` minutes, each fire's job admitted by a
    tick and run to its end (its slot free again)."""
    tick = t.stages().tick
    for minute in range(1, minutes + 1):
        t.clock.set(START + minute * 60 + 1)
        loop.step()
        tick.tick()
        (job_id,) = [j for j, s in fire_jobs(t, name).items() if s == JobState.PENDING]
        finish_as_runner(t.store, job_id, JobState.SUCCEEDED)


def at(hours: float) -> str:
    return schedules.fire_time(START + hours * HOUR)


def test_each_fire_is_one_job_however_often_it_is_delivered(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    ops.create("hourly", "cron(0 * * * ? *)", {"kind": "k", "payload": {"n": 1}})
    tick = t.stages().tick
    for hour in range(1, 4):
        t.clock.set(START + hour * HOUR + 5)
        sent = loop.step()
        assert sent == [schedules.fire_id("hourly", at(hour))]
        # Scheduler's retry and SQS's at-least-once: the same fire twice more, one late.
        body = ops.get("hourly").message(at(hour))
        t.client().submit_many([body, body])
        tick.tick()
        t.client().submit_many([body])
        tick.tick()
    assert sorted(fire_jobs(t, "hourly")) == [schedules.fire_id("hourly", at(h))
                                              for h in (1, 2, 3)]
    assert t.queue_counts() == (0, 0)
    record = t.store.fire_record("hourly")
    assert [f.at for f in record.fires] == [at(3), at(2), at(1)]
    assert {f.outcome for f in record.fires} == {RAN}


def test_a_skip_schedule_skips_a_fire_while_its_last_run_is_live(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    tick = t.stages().tick
    first, second, third = (schedules.fire_id("sync", at(h)) for h in (1, 2, 3))

    t.clock.set(START + HOUR + 1)
    loop.step()
    tick.tick()
    fence = finish_as_runner(t.store, first, JobState.RUNNING)

    t.clock.set(START + 2 * HOUR + 1)
    loop.step()
    report = tick.tick()
    assert report.intake.skipped_fires == 1
    skipped = t.job(second)
    assert skipped is not None and skipped.state == JobState.CANCELLED
    assert skipped.reason == schedules.skip_reason("sync", first, "RUNNING")
    assert skipped.bundle_id is None  # it never took a slot

    # The first run ends; the skipped fire delivered again is still skipped, never run.
    t.store.apply(fence, [JobUpdate(first, JobState.RUNNING, JobState.SUCCEEDED)],
                  bundle_to=BundleState.DONE)
    t.client().submit_many([ops.get("sync").message(at(2))])
    tick.tick()
    again = t.job(second)
    assert again is not None and again.state == JobState.CANCELLED

    t.clock.set(START + 3 * HOUR + 1)
    loop.step()
    tick.tick()
    assert fire_jobs(t, "sync") == {first: JobState.SUCCEEDED, second: JobState.CANCELLED,
                                    third: JobState.PENDING}
    detail = ops.show("sync")
    assert [(f.job_id, f.outcome, state) for f, state in detail.fires] == [
        (third, RAN, "PENDING"), (second, SKIPPED, "CANCELLED"), (first, RAN, "SUCCEEDED")]
    assert detail.fires[1][0].reason == skipped.reason
    assert detail.last_run == third


def test_an_allow_schedule_runs_beside_its_last_run(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    ops.create("report", "cron(0 * * * ? *)", {"kind": "k", "payload": {}})
    tick = t.stages().tick
    for hour in (1, 2):
        t.clock.set(START + hour * HOUR + 1)
        loop.step()
        tick.tick()
    assert set(fire_jobs(t, "report").values()) == {JobState.PENDING}
    assert len(fire_jobs(t, "report")) == 2


def test_two_fires_of_a_skip_schedule_in_one_drain_run_once(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """The first fire is admitted but not yet in the table when the second is judged: the
    drain's own admissions count as live runs."""
    t, ops, loop = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    t.clock.set(START + 2 * HOUR + 1)
    assert len(loop.step()) == 2  # a loop that slept: both fires at once
    t.stages().tick.tick()
    states = fire_jobs(t, "sync")
    assert sorted(states.values()) == [JobState.CANCELLED, JobState.PENDING]


def test_a_run_whose_recording_failed_is_judged_again_when_it_comes_back(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """A fire noted as run whose job the table never got (its recording failed) is not in
    the next fire's way; when it comes back while that next fire's job runs, it is skipped:
    the two never run at once."""
    t, ops, _ = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    lost, second = (schedules.fire_id("sync", at(h)) for h in (1, 2))
    t.store.save_fire_record(t.store.fire_record("sync").noted(
        schedules.Fire(at(1), lost, RAN)))
    tick = t.stages().tick
    t.clock.set(START + 2 * HOUR + 1)
    t.client().submit_many([ops.get("sync").message(at(2))])
    tick.tick()
    assert fire_jobs(t, "sync") == {second: JobState.PENDING}
    t.client().submit_many([ops.get("sync").message(at(1))])  # the lost one, back
    tick.tick()
    assert fire_jobs(t, "sync") == {second: JobState.PENDING, lost: JobState.CANCELLED}
    record = t.store.fire_record("sync")
    assert [(f.job_id, f.outcome) for f in record.fires] == [(second, RAN), (lost, SKIPPED)]
    assert record.last_run == second


def test_a_late_fire_that_runs_is_the_run_the_next_one_waits_for(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """The last run is the fire admitted last, not the latest by its time: a fire of hour 1
    delivered after hour 2's job ended runs, and hour 3's fire, while it runs, is skipped."""
    t, ops, _ = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    first, second, third = (schedules.fire_id("sync", at(h)) for h in (1, 2, 3))
    tick = t.stages().tick
    t.clock.set(START + 2 * HOUR + 1)
    t.client().submit_many([ops.get("sync").message(at(2))])
    tick.tick()
    finish_as_runner(t.store, second, JobState.SUCCEEDED)
    t.client().submit_many([ops.get("sync").message(at(1))])  # late
    tick.tick()
    t.clock.set(START + 3 * HOUR + 1)
    t.client().submit_many([ops.get("sync").message(at(3))])
    tick.tick()
    assert fire_jobs(t, "sync") == {first: JobState.PENDING, second: JobState.SUCCEEDED,
                                    third: JobState.CANCELLED}


def test_the_record_keeps_the_latest_fires(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    ops.create("often", "cron(* * * * ? *)", {"kind": "k", "payload": {}})
    each_minute_run(t, loop, "often", FIRES_KEPT + 5)
    record = t.store.fire_record("often")
    assert len(record.fires) == FIRES_KEPT
    assert record.fires[0].at == schedules.fire_time(START + (FIRES_KEPT + 5) * 60)
    assert len(fire_jobs(t, "often")) == FIRES_KEPT + 5


def test_a_fire_judged_skipped_is_skipped_again_though_its_record_was_not_written(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """A skipped fire whose CANCELLED job was not written (the write failed; its message
    comes back) is judged as before when it comes back, though the run it overlapped has
    ended since: the schedule's record and its job agree."""
    t, ops, _ = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    second = schedules.fire_id("sync", at(2))
    t.store.save_fire_record(t.store.fire_record("sync").noted(
        schedules.Fire(at(2), second, SKIPPED, "skipped: as judged then")))
    t.clock.set(START + 2 * HOUR + 1)
    t.client().submit_many([ops.get("sync").message(at(2))])
    t.stages().tick.tick()
    job = t.job(second)
    assert job is not None and job.state == JobState.CANCELLED
    assert job.reason == "skipped: as judged then"


def test_two_array_fires_of_a_skip_schedule_in_one_drain_run_once(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """An array fire's parent is recorded apart from the drain's bundles: the fires this drain
    let run count as live all the same."""
    t, ops, loop = world
    ops.create("fan", "cron(0 * * * ? *)", {"kind": "k", "payload": {}, "array_size": 2},
               overlap="skip")
    t.clock.set(START + 2 * HOUR + 1)
    assert len(loop.step()) == 2
    t.stages().tick.tick()
    parents = {j: s for j, s in fire_jobs(t, "fan").items() if ":" not in j[-3:]}
    assert sorted(parents.values()) == [JobState.CANCELLED, JobState.PENDING]


def test_a_retried_skipped_fire_is_the_run_the_next_fire_waits_for(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    t, ops, loop = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    first, second, third = (schedules.fire_id("sync", at(h)) for h in (1, 2, 3))
    tick = t.stages().tick
    t.clock.set(START + HOUR + 1)
    loop.step()
    tick.tick()
    t.clock.set(START + 2 * HOUR + 1)
    loop.step()
    tick.tick()
    finish_as_runner(t.store, first, JobState.SUCCEEDED)
    t.client().retry(second)  # an operator runs the skipped fire after all
    record = t.store.fire_record("sync")
    assert record.last_run == second
    assert record.fires[0] == schedules.Fire(at(2), second, RAN, "retried by an operator")
    t.clock.set(START + 3 * HOUR + 1)
    loop.step()
    tick.tick()
    assert fire_jobs(t, "sync") == {first: JobState.SUCCEEDED, second: JobState.PENDING,
                                    third: JobState.CANCELLED}


def test_a_fire_waits_for_the_run_a_retried_fire_was_put_beside(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """The operator runs a skipped fire beside the live one, then cancels it: the next fire
    still waits for the first, which the record keeps beside the retried one."""
    t, ops, loop = world
    ops.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    first, second, third = (schedules.fire_id("sync", at(h)) for h in (1, 2, 3))
    tick = t.stages().tick
    for hour in (1, 2):
        t.clock.set(START + hour * HOUR + 1)
        loop.step()
        tick.tick()
    t.client().retry(second)
    record = t.store.fire_record("sync")
    assert (record.last_run, record.beside) == (second, (first,))
    t.client().cancel(second)
    t.clock.set(START + 3 * HOUR + 1)
    loop.step()
    tick.tick()
    assert fire_jobs(t, "sync") == {first: JobState.PENDING, second: JobState.CANCELLED,
                                    third: JobState.CANCELLED}
    skipped = t.job(third)
    assert skipped is not None
    assert skipped.reason == schedules.skip_reason("sync", first, "PENDING", beside=True)
    assert "a run an operator's retry was put beside is live" in skipped.reason

    # The first run ends: the next fire runs, and the record waits for it alone.
    finish_as_runner(t.store, first, JobState.SUCCEEDED)
    t.clock.set(START + 4 * HOUR + 1)
    loop.step()
    tick.tick()
    record = t.store.fire_record("sync")
    assert (record.last_run, record.beside) == (schedules.fire_id("sync", at(4)), ())


def test_a_delivery_older_than_the_kept_fires_is_a_duplicate(
        world: tuple[Twins, Schedules, ScheduleLoop]) -> None:
    """Scheduler retries a fire for up to a day: one delivered again after it left the
    record's latest fires is its job's duplicate, and changes no note."""
    t, ops, loop = world
    ops.create("often", "cron(* * * * ? *)", {"kind": "k", "payload": {}}, overlap="skip")
    each_minute_run(t, loop, "often", FIRES_KEPT + 2)
    tick = t.stages().tick
    before = t.store.fire_record("often")
    oldest = schedules.fire_time(START + 60)
    assert all(f.at != oldest for f in before.fires)
    t.client().submit_many([ops.get("often").message(oldest)])
    tick.tick()
    after = t.store.fire_record("often")
    assert (after.fires, after.last_run) == (before.fires, before.last_run)
    assert fire_jobs(t, "often")[schedules.fire_id("often", oldest)] == JobState.SUCCEEDED


def test_a_fire_whose_judging_fails_is_given_back_and_holds_up_no_other_job() -> None:
    """The schedule's record cannot be read: the fire goes back to the queue for a later tick,
    and the drain goes on with the queue's other jobs."""
    class NoRecords(MemoryTable):
        def get(self, pk: str) -> Record | None:
            if pk.startswith("SCHEDULE#"):
                raise TableUnavailable("the table failed for a moment")
            return super().get(pk)

    t = Twins(START + 10)
    t.table = NoRecords()
    t.store = Store(t.table, clock=t.clock)
    fire = JobSchedule(name="sync", expression="cron(0 * * * ? *)",
                       job={"kind": "k", "payload": {}}, overlap=Overlap.SKIP).message(at(1))
    t.client().submit_many([fire])
    t.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{n}",
                             "estimated_seconds": 1} for n in range(25)])
    report = t.stages().tick.tick()
    assert sorted(j.job_id for j in t.jobs()) == sorted(f"j{n}" for n in range(25))
    assert report.intake.record_failures == 1
    assert t.queue.backlog().visible == 1  # the fire, given back now


def test_judging_a_fire_costs_a_read_of_its_record_one_batch_read_and_a_write() -> None:
    """A skip schedule's fire, its last run in the table: GetItem of the record, one
    BatchGetItem of the fire's own job and the last run, PutItem of the record."""
    class Counting(MemoryTable):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        def get(self, pk: str) -> Record | None:
            self.calls.append("GetItem")
            return super().get(pk)

        def get_many(self, pks: list[str]) -> list[Record]:
            self.calls.append("BatchGetItem")
            return super().get_many(pks)

        def write(self, op: Any) -> Record | None:
            self.calls.append(type(op).__name__ + "Item")
            return super().write(op)

    table = Counting()
    store = Store(table)
    first = schedules.fire_id("sync", at(1))
    store.save_fire_record(schedules.FireRecord("sync").noted(schedules.Fire(at(1), first, RAN)))
    table.calls.clear()
    job = to_job(message.parse(json.dumps(JobSchedule(
        name="sync", expression="cron(0 * * * ? *)", job={"kind": "k", "payload": {}},
        overlap=Overlap.SKIP).message(at(2)))), Received("m", "r", "{}"), START)
    assert FireGate(store).judge("sync", Overlap.SKIP, job, set(), START) is None
    assert table.calls == ["GetItem", "BatchGetItem", "PutItem"]
