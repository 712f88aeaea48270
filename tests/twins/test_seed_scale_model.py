"""The seed-scale model (``bench/seed_scale.py``) at a tiny scale: it runs every job once through
the production stages and the runner store, its calls per job stay bounded, and its tasks end
together. Counts only: virtual time is the model's, never this machine's."""

from __future__ import annotations

import dataclasses
import time

import pytest

from dispatcher.domain.jobs import JobState
from dispatcher.ports.table import TableUnavailable
from dispatcher.simulation.batch_figures import start_latencies
from dispatcher.simulation.batch_model import BatchModel
from dispatcher.simulation.batch_shape import Shape, job_states
from dispatcher.simulation.deep_queue import DeepQueue
from dispatcher.simulation.faults import Faults
from dispatcher.simulation.run_ledger import RunLedger
from dispatcher.simulation.virtual_time import VirtualClock, VirtualPool, virtual_wait
from dispatcher.store import codec as r
from dispatcher.store.tenant_policies import TenantPolicies

# 1,500 jobs of 2 s on 4 tasks x 10: 75 s of work a task; a fixed start so the end times'
# spread is the dispatcher's alone. Follow-ons of 15 s (dispatcher/store/follow_ons.py): each
# share is worth more than four of them (at the default 45 s a batch this small has none).
SHAPE = Shape(jobs=1_500, seconds=2.0, tasks=4, concurrency=10, start=(30.0, 30.0),
              settings={"LONGJOBS_FOLLOW_ON_SECONDS": "15"})


@pytest.fixture(scope="module")
def model() -> BatchModel:
    model = BatchModel(SHAPE)
    model.run()
    return model


def test_every_job_runs_once_and_succeeds(model: BatchModel) -> None:
    out = model.outcome
    assert out.jobs_run == SHAPE.jobs
    assert job_states(model.table) == {str(JobState.SUCCEEDED): SHAPE.jobs}
    assert len(out.tasks) == SHAPE.tasks  # one task a slot (follow-ons are taken), no rerun
    assert sum(t.jobs_run for t in out.tasks) == SHAPE.jobs


def test_the_runs_ledger_finds_each_job_run_once_and_nothing_lost(model: BatchModel) -> None:
    verdict = model.verdict()
    assert verdict.holds, verdict.line()
    assert (verdict.jobs, verdict.runs, verdict.succeeded) == (SHAPE.jobs,) * 3
    assert all(len(runs) == 1 and runs[0].end is not None
               for runs in model.ledger.runs.values())


def test_the_runs_ledger_finds_each_rule_broken() -> None:
    """Each of its three rules, broken on purpose, is found (and only that one)."""
    ledger = RunLedger()
    ledger.started("twice", "task/a", 10.0)
    ledger.started("twice", "task/b", 15.0)  # while the first still runs
    ledger.ended("twice", "task/a", 20.0)
    ledger.ended("twice", "task/b", 25.0)
    for n in range(4):  # four runs one after another, where the budget allows three
        ledger.started("often", "task/c", 100.0 + n)
        ledger.ended("often", "task/c", 100.5 + n)
    ledger.started("lost", "task/d", 1.0)
    ledger.ended("lost", "task/d", 2.0)
    states = {"twice": JobState.SUCCEEDED, "often": JobState.SUCCEEDED,
              "lost": JobState.PENDING}
    verdict = ledger.verdict(["twice", "often", "lost", "never"], states, lambda _: 3)
    assert (verdict.overlapping, verdict.over_budget, verdict.lost) == (
        ["twice"], ["often"], ["lost", "never"])
    assert not verdict.holds
    assert "2 lost (lost, never), 1 with two runs alive at once (twice)" in verdict.line()
    with pytest.raises(ValueError, match="no run alive"):
        ledger.ended("lost", "task/d", 3.0)


def test_under_faults_nothing_is_lost_doubled_or_run_past_its_budget() -> None:
    """Half the tasks killed while they run (their unwritten results lost with them), stop
    events delivered twice, late or not at all: every job ends SUCCEEDED, some of them run
    twice, never at once. (Reruns of bundles of several pages, whose first pages had ended
    before the kill: the model once ended such a bundle at its first page with nothing left
    to run, and lost the jobs of the rest.)"""
    shape = Shape(jobs=2_000, seconds=2.0, tasks=4, concurrency=10, start=(30.0, 30.0),
                  seed=3, faults=Faults(killed=0.5, kill_within=(20.0, 80.0), event_twice=0.3,
                                        event_late=0.3, event_lost=0.2))
    model = BatchModel(shape)
    out = model.run()
    verdict = model.verdict()
    assert verdict.holds, verdict.line()
    assert verdict.succeeded == shape.jobs and verdict.runs > shape.jobs  # some ran twice
    killed = [t for t in out.tasks if t.killed_at is not None]
    assert killed and len(out.tasks) > shape.tasks  # their bundles were relaunched
    bundles = [r.record_bundle(rec) for pk, rec in model.table.snapshot().items()
               if pk.startswith("BUNDLE#")]
    assert max(b.pages for b in bundles) > 1


def test_calls_per_job_stay_bounded(model: BatchModel) -> None:
    calls = model.outcome.calls
    # SQS's batches of 10: a send, a receive and a delete per 10 jobs.
    assert sum(calls["producer"].values()) == SHAPE.jobs // 10
    # ... and, per tick that found every slot busy, its watch of the high queue: a look and a
    # long poll of up to 20 s at a time for LONGJOBS_URGENT_WATCH_SECONDS (50).
    watches = 4 * len(model.outcome.ticks)
    assert calls["dispatcher"]["ReceiveMessage"] <= SHAPE.jobs // 10 + 10 + watches
    assert calls["dispatcher"]["DeleteMessageBatch"] <= SHAPE.jobs // 10 + SHAPE.tasks
    total = sum(sum(c.values()) for c in calls.values())
    # Half a call a job; and each follow-on a task took (dispatcher/store/follow_ons.py)
    # costs its take and its claim (five calls), and ends in a grouped write of its own.
    follow_ons = sum(t.follow_ons for t in model.outcome.tasks)
    assert follow_ons > 0
    assert total <= 0.5 * SHAPE.jobs + 8 * follow_ons


def test_the_tasks_end_within_a_tenth_of_the_drain(model: BatchModel) -> None:
    out = model.outcome
    ends = [t.ended_at for t in out.tasks if t.ended_at is not None]
    assert len(ends) == SHAPE.tasks
    assert max(ends) - min(ends) <= 0.1 * out.drain
    assert out.drain >= SHAPE.floor  # never faster than the work allows


def test_an_urgent_job_submitted_into_a_full_batch_starts_within_a_minute() -> None:
    """Every slot busy until ~150 s: the urgent job sent at 60 s is handed to a running task
    and starts within 60 s plus one running job (2 s, jitter 10 %), not after the batch."""
    shape = Shape(jobs=1200, seconds=2.0, tasks=2, concurrency=10, start=(30.0, 30.0),
                  urgent_at=60.0)
    model = BatchModel(shape)
    out = model.run()
    assert out.drain > 120.0  # the batch still held every slot a minute after the job came
    assert out.urgent_started is not None and 60.0 <= out.urgent_started <= 60.0 + 60.0 + 2.2
    assert out.jobs_run == shape.jobs + 1
    verdict = model.verdict()  # the urgent job among them, handed to a running task
    assert verdict.holds and verdict.jobs == verdict.succeeded == shape.jobs + 1, verdict.line()


def test_another_tenants_job_behind_a_full_batch_starts_before_the_batch_ends() -> None:
    """Every slot runs the batch's tasks (no tenant) for minutes, their backlog cut into
    follow-ons of 15 s; a job of tenant ``late`` sent at 60 s may run on none of them. The
    next tick takes it in as a foothold; the first task to end a follow-on after that leaves
    its slot; the tick after launches it; it starts a start later: within two ticks, a
    follow-on and a start of its sending, long before the batch ends. Every job runs once."""
    shape = dataclasses.replace(SHAPE, jobs=6_000, tenant_at=60.0)
    model = BatchModel(shape)
    out = model.run()
    started = out.tenant_started
    assert started is not None and out.drain > started + 120.0  # the batch ran on long after
    assert 60.0 < started <= 60.0 + 2 * 60.0 + 15.0 * 1.1 + 30.0, started
    # One task ran it, in a slot a batch's task left, and no job of the batch.
    late = [t for t in out.tasks if (t.bundle_id or "").startswith("late@")]
    assert len(late) == 1 and late[0].jobs_run == 1
    verdict = model.verdict()
    assert verdict.holds and verdict.jobs == verdict.succeeded == shape.jobs + 1, verdict.line()


def test_a_pool_task_starts_when_a_lane_is_free_and_its_result_moves_the_waiter() -> None:
    clock = VirtualClock(100.0)
    clock.set(100.0)
    wait = virtual_wait(clock)

    def call(seconds: float) -> float:
        clock.charge(seconds)
        return clock()

    with VirtualPool(2, clock=clock) as pool:
        futures = [pool.submit(call, s) for s in (5.0, 1.0, 1.0)]
        done, _ = wait(futures, return_when="FIRST_COMPLETED")
        assert done == {futures[1]}  # the first to end in virtual time, whatever ran first
        assert clock() == 101.0
        ends = sorted(f.result() for f in futures)
    assert ends == [101.0, 102.0, 105.0]  # two lanes: the third waits for the second
    assert clock() == 105.0


def test_a_wait_with_a_timeout_moves_the_waiter_that_far_in_virtual_time() -> None:
    """The drain wakes now and then however long a call takes (to keep its messages held):
    in virtual time its waits end after the timeout's virtual seconds, whatever this machine
    took to run the task. (A real-time timeout once left a task unfinished, its end unknown:
    the waiter's clock jumped to infinity.)"""
    clock = VirtualClock(100.0)
    clock.set(100.0)
    wait = virtual_wait(clock)

    def slow() -> None:
        # Outlasts in real time the timeout below (0.05), as a task this machine is slow to
        # run does; load only makes it longer. Nothing waits on this sleep's length.
        time.sleep(0.2)
        clock.charge(60.0)

    with VirtualPool(1, clock=clock) as pool:
        future = pool.submit(slow)
        done, not_done = wait([future], timeout=0.05, return_when="FIRST_COMPLETED")
        assert (done, not_done) == (set(), {future}) and clock() == 100.05
        done, _ = wait([future], timeout=90.0, return_when="FIRST_COMPLETED")
        assert done == {future} and clock() == 160.0


def test_a_deep_queue_with_an_arrival_rate_holds_each_message_until_it_is_sent() -> None:
    clock = VirtualClock(1_000.0)
    clock.set(1_000.0)
    queue = DeepQueue(clock=clock, synthetic=30, body_of=str, arrival_rate=10.0)
    first = queue.receive(10)
    assert [m.body for m in first] == ["0"]  # only message 0 is sent at the start
    clock.set(1_001.05)  # ten more sent since
    more = queue.receive(10)
    assert [m.body for m in more] == [str(i) for i in range(1, 11)]
    assert queue.backlog().visible == 0 and queue.sent_at(11) == 1_001.1
    queue.delete(first + more)
    clock.set(1_100.0)
    assert queue.backlog().visible == 19  # the rest, and no more than were sent


@pytest.mark.parametrize("forget", [None, 10.0], ids=["every job kept", "ended ones forgotten"])
def test_a_stream_runs_every_job_once_each_after_it_was_sent(forget: float | None) -> None:
    """And the same when the table forgets each job 10 s after it ended (an hour's stream
    is run so): the ledger still judges every job by how it ended."""
    shape = Shape(jobs=600, seconds=2.0, tasks=4, concurrency=10, start=(30.0, 30.0),
                  rate=20.0)
    model = BatchModel(shape, forget_ended=forget)
    model.run()
    verdict = model.verdict()
    assert verdict.holds and verdict.succeeded == verdict.runs == shape.jobs, verdict.line()
    held = sum(pk.startswith("JOB#") for pk in model.table.snapshot())
    assert held == shape.jobs if forget is None else held < shape.jobs / 2
    waits = start_latencies(shape, model.sqs, model.ledger)
    assert len(waits) == shape.jobs and min(waits) >= 30.0  # none before its send and a start


def test_the_models_runner_lives_through_heartbeats_the_table_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the worker: a heartbeat throttled past its retries is a missed beat, tried at the
    next interval, not the end of the task (the model once played it as a runner that failed
    itself, rerunning its bundle)."""
    model = BatchModel(dataclasses.replace(SHAPE, settings={
        **SHAPE.settings, "LONGJOBS_HEARTBEAT_SECONDS": "5"}))  # beats within each bundle

    def refused(*args: object, **kwargs: object) -> None:
        raise TableUnavailable("UpdateItem", "ProvisionedThroughputExceededException",
                               "throttled", status=400, retryable=True)

    monkeypatch.setattr(model.runner_store, "heartbeat", refused)
    out = model.run()
    verdict = model.verdict()
    assert verdict.holds and verdict.runs == SHAPE.jobs, verdict.line()
    assert out.failed_runners == 0, out.runner_errors


def share_errors(weights: dict[str, float]) -> tuple[dict[str, float], BatchModel]:
    """4,000 jobs of three saturating tenants of ``weights`` on 6 tasks x 10: each tenant's
    part of the run seconds while all had work waiting, against its weight's part."""
    shape = dataclasses.replace(SHAPE, jobs=4_000, tasks=6, tenants=tuple(weights.items()))
    model = BatchModel(shape)
    out = model.run()
    end = min(out.tenant_last_start.values())
    got = {t: sum(s for second, s in out.tenant_work[t].items() if second <= end)
           for t in weights}
    total, weight = sum(got.values()), sum(weights.values())
    return {t: abs(got[t] / total - w / weight) / (w / weight)
            for t, w in weights.items()}, model


def test_saturating_tenants_get_their_weights_share_of_the_slots() -> None:
    """Weights 3:2:1 (``longjobs tenants set``): each tenant's run seconds, while all three
    had work waiting, within 5 % of its weight's part; every job runs once."""
    errors, model = share_errors({"a": 3.0, "b": 2.0, "c": 1.0})
    assert max(errors.values()) <= 0.05, errors
    verdict = model.verdict()
    assert verdict.holds and verdict.succeeded == 4_000, verdict.line()


def test_the_share_check_sees_the_weights_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TenantPolicies, "set_tenant_policy", lambda self, tenant, **kw: None)
    errors, _ = share_errors({"a": 3.0, "b": 2.0, "c": 1.0})
    assert max(errors.values()) > 0.5, errors  # even shares: c gets twice its weight's part
