"""Follow-ons (stages/bundle.py, dispatcher/store/follow_ons.py) through the real tick, runner
and stop handler on the twins: how a large backlog is cut, who runs it, and what a task's stop
reports and reruns once it ran several bundles."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.domain.stops import StopCode, TaskStop
from dispatcher.domain.waiting import TickSummary
from dispatcher.ops.metrics import stop_blob
from dispatcher.ports.queue import Backlog
from dispatcher.stages.bundle import TAIL_SECONDS
from dispatcher.stages.rerun import StopResult
from dispatcher.stages.tick import TickReport
from dispatcher.store import Fence, codec
from dispatcher.store.follow_ons import Take
from dispatcher.store.values import JobOutcomes, JobUpdate
from dispatcher.testing.memory_queue import MemoryQueue
from job_runner import next_bundle
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins
from tests.twins.test_array_jobs import run_bundle

CONCURRENCY = 4
SLOTS = 3
ENV = {"LONGJOBS_MAX_RUNNING_TASKS": str(SLOTS), "LONGJOBS_TASK_CONCURRENCY": str(CONCURRENCY),
       "LONGJOBS_FOLLOW_ON_SECONDS": "10"}  # 10 s of 1 s jobs at 4 at once: 40 jobs
RUNNER_ENV = {"LONGJOBS_TABLE": "t", "LONGJOBS_TASK_CONCURRENCY": str(CONCURRENCY),
              "LONGJOBS_FLUSH_SECONDS": "0"}
RUNNER = settings.load("runner", RUNNER_ENV)


def backlog(tw: Twins, n: int, prefix: str = "j", **extra: object) -> list[str]:
    ids = [f"{prefix}{i:04d}" for i in range(n)]
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": j, "estimated_seconds": 1.0,
                              **extra} for j in ids])
    return ids


def run(tw: Twins, arn: str, fail: frozenset[str] = frozenset(), *,
        cfg: settings.Config = RUNNER, ran: list[str] | None = None) -> list[str]:
    """The task's runner to its end (as ``python -m job_runner``): the jobs it ran (in
    ``ran`` too, as they start)."""
    ran = [] if ran is None else ran

    def handler(payload: dict[str, object], ctx: object) -> None:
        job_id = getattr(ctx, "job_id")  # noqa: B009
        ran.append(job_id)
        if job_id in fail:
            raise ValueError("bad input")

    Worker(cfg, tw.store, HandlerRegistry({"k": handler}), arn).run()
    return ran


def second_backlog_runs_on_the_tasks_up(tw: Twins, stages: Any, first_ids: list[str],
                                        tasks: tuple[str, str, str], own: int,
                                        why: str) -> TickReport:
    """``tasks``: one that has exited, one that runs its ``own`` jobs next, and one after. 400
    more jobs come a minute later, with that one slot free: the tick launches one task into it;
    the next task to end its own jobs goes on with the new ones rather than exit, and they all
    run once on the tasks up and the one launched. The tick's report."""
    _, going, last = tasks
    second_ids = backlog(tw, 400, prefix="k")
    tw.clock.advance(60)
    report = stages.tick.tick()
    assert report.capacity == 1 and report.launch.bundles_launched == 1
    (new,) = [a for a in tw.task_arns() if a not in tasks]
    ran = run(tw, going)
    assert len(ran) > own and set(ran[own:]) <= set(second_ids), why
    ran += run(tw, last) + run(tw, new)
    assert len([j for j in ran if j in first_ids]) == 2 * own
    assert sorted(j for j in ran if j in second_ids) == second_ids  # each once
    assert len(tw.launcher.tasks) == 4
    assert {b.state for b in tw.bundles()} == {BundleState.DONE}
    return report


def test_a_backlog_over_the_slots_is_cut_into_follow_ons_that_the_first_tasks_run() -> None:
    tw = Twins()
    ids = backlog(tw, 600)  # 200 a slot: five follow-ons' worth each
    report = tw.stages(**ENV).tick.tick()
    assert report.launch.bundles_launched == SLOTS and report.intake.admitted == 600
    bundles = tw.bundles()
    follow = sorted((b for b in bundles if b.bundle_id.rsplit("-", 1)[1].isdigit()),
                    key=lambda b: int(b.bundle_id.rsplit("-", 1)[1]))
    first = [b for b in bundles if b not in follow]
    assert len(first) == SLOTS and {len(b.job_ids) for b in first} == {40}
    assert all(b.bundle_id.startswith(f"{b.batch}-w") for b in first)  # they name it too
    assert {b.batch for b in bundles} == {first[0].batch} and first[0].batch is not None
    assert all(b.state == BundleState.PENDING for b in follow)
    sizes = [len(b.job_ids) for b in follow]
    assert sizes[0] == 40 and sizes == sorted(sizes, reverse=True)  # smaller as it runs out
    assert min(sizes[:-1]) >= TAIL_SECONDS * CONCURRENCY  # 1 s jobs; the last: what is left
    ran: list[str] = []
    for arn in tw.task_arns():
        ran += run(tw, arn)
    assert sorted(ran) == ids  # three tasks, every job once
    assert len(tw.launcher.tasks) == SLOTS
    assert {b.state for b in tw.bundles()} == {BundleState.DONE}


def test_a_task_between_two_bundles_holds_its_slot_and_a_free_slot_gets_a_follow_on() -> None:
    """A task whose bundle's jobs all ended holds its slot until its take ends that bundle
    and launches the next in one transaction: no tick in between sees the slot free, so the
    tasks never exceed the limit. A slot that is free (its task took none and ended) gets the
    batch's oldest due follow-on at the next tick, while the batch's other tasks still run."""
    tw = Twins()
    backlog(tw, 600)
    stages = tw.stages(**ENV)
    stages.tick.tick()
    first, second, *_ = tw.task_arns()
    bundle = tw.store.bundle_for_task(first)
    assert bundle is not None
    fence = Fence(bundle.bundle_id, bundle.attempt, first)
    claimed = tw.store.claim(fence).bundle
    done = [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED, via=JobState.RUNNING,
                      attempts_delta=1) for j in claimed.job_ids]
    tw.store.apply(fence, done)  # every result written, the bundle not ended yet
    tw.clock.advance(60)
    between = stages.tick.tick()
    assert between.capacity == 0 and between.launch.bundles_launched == 0
    taken = tw.store.end_and_take(fence, claimed, JobOutcomes(len(done), 0))
    assert taken.bundle is not None and taken.bundle.task_arn == first
    assert tw.store.get_bundle(bundle.bundle_id).state == BundleState.DONE  # type: ignore[union-attr]
    tw.clock.advance(60)
    assert stages.tick.tick().capacity == 0  # the follow-on holds the slot now
    # The second task's runner ends its bundle and exits (as after a deploy): its slot is
    # free, and the next tick fills it with a follow-on while the others still run.
    other = tw.store.bundle_for_task(second)
    assert other is not None
    run_bundle(tw, other, second, lambda job: JobState.SUCCEEDED, None)  # DONE, no take
    tw.clock.advance(60)
    report = stages.tick.tick()
    assert report.capacity == 1 and report.launch.bundles_launched == 1
    launched = [b for b in tw.bundles() if b.state == BundleState.LAUNCHED
                and b.bundle_id != taken.bundle.bundle_id and b.task_arn not in (first, second)]
    assert [b.batch for b in launched if b.task_arn == tw.task_arns()[-1]] == [bundle.batch]


def test_small_backlogs_scheduled_jobs_and_a_setting_of_0_make_no_follow_ons() -> None:
    for env, extra, n in [({**ENV, "LONGJOBS_FOLLOW_ON_SECONDS": "0"}, {}, 600),
                          (ENV, {}, 400),  # 133 a slot: under four follow-ons each
                          (ENV, {"not_before": 1_700_000_000.0 + 3600}, 600)]:
        tw = Twins()
        backlog(tw, n, **extra)
        tw.stages(**env).tick.tick()
        assert all(b.batch is None for b in tw.bundles()), (env, extra, n)


def test_a_job_that_needs_a_slot_of_its_own_ends_a_drain_cutting_follow_ons() -> None:
    """As without follow-ons: once a job no slot can take waits in the table, the drain
    receives no more (it would only record them to wait, one bundle each)."""
    tw = Twins()
    ids = backlog(tw, 600)
    # More than the receives in flight at once can hold (8 of 10 messages): a busy machine
    # may finish them all before the drain sees the first long job.
    longs = 200
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"long{i}",
                              "estimated_seconds": 3600.0} for i in range(longs)])
    report = tw.stages(**ENV).tick.tick()
    # The receives already in flight when the first came are admitted too (to wait), as
    # they were before follow-ons; the rest stay in the queue.
    assert report.intake.follow_ons > 0 and report.intake.admitted >= len(ids) + 1
    waited = report.intake.waiting
    assert 1 <= waited < longs and tw.queue_counts()[0] == longs - waited


def test_a_task_that_ran_follow_ons_reports_all_their_jobs_when_it_stops() -> None:
    tw = Twins()
    backlog(tw, 600, max_attempts=1)  # j0000 fails for good (no retry keeps its bundle)
    stages = tw.stages(**ENV)
    stages.tick.tick()
    # The task launched with j0000's bundle (the tick's launches run side by side: which task
    # of the list it is varies, and another task would never run j0000).
    first = tw.job("j0000")
    assert first is not None and first.bundle_id is not None
    bundle = tw.bundle(first.bundle_id)
    assert bundle is not None and bundle.task_arn is not None
    arn = bundle.task_arn
    ran = run(tw, arn, fail=frozenset({"j0000"}))
    assert "j0000" in ran
    tw.launcher.stop_task(arn, StopCode.ESSENTIAL_CONTAINER_EXITED,
                          "Essential container in task exited", 0)
    outcome = stages.reruns.on_stop(TaskStop(arn, str(StopCode.ESSENTIAL_CONTAINER_EXITED),
                                             "Essential container in task exited", 0))
    assert outcome.result == StopResult.FINISHED, outcome
    assert outcome.finished is not None  # its runner counted its last bundle
    succeeded = outcome.finished.succeeded + outcome.succeeded_before
    failed = outcome.finished.failed + outcome.failed_before
    assert (succeeded, failed) == (len(ran) - 1, 1)
    assert outcome.succeeded_before > 0  # it ran more than its last bundle
    blob = stop_blob(outcome)
    assert (blob["JobsSucceeded"], blob["JobsFailed"]) == ([len(ran) - 1], [1])  # EMF lists


def test_a_task_killed_in_a_follow_on_reruns_that_follow_on_alone() -> None:
    tw = Twins()
    ids = backlog(tw, 600)
    stages = tw.stages(**ENV)
    stages.tick.tick()
    victim, *others = tw.task_arns()
    first = tw.store.bundle_for_task(victim)
    assert first is not None
    # The victim runs its bundle and takes a follow-on; it is killed as it claims it.
    worker = Worker(RUNNER, tw.store, HandlerRegistry({"k": lambda p, ctx: None}), victim)
    taken = worker._run_bundle(first)
    assert taken is not None and taken.state == BundleState.LAUNCHED
    tw.launcher.stop_task(victim, StopCode.SPOT_INTERRUPTION, "Your Spot Task was interrupted.",
                          None)
    outcome = stages.reruns.on_stop(TaskStop(victim, str(StopCode.SPOT_INTERRUPTION),
                                             "Your Spot Task was interrupted.", None))
    assert outcome.result == StopResult.SETTLED and outcome.bundle_id == taken.bundle_id
    assert not outcome.never_started  # its task ran a bundle before it
    assert outcome.succeeded_before == len(first.job_ids)
    assert sorted(outcome.rerun) == sorted(taken.job_ids) and outcome.relaunched
    ran = [j for arn in [*others, *tw.task_arns()[SLOTS:]] for j in run(tw, arn)]
    done_jobs = {j.job_id for j in tw.jobs() if j.state == JobState.SUCCEEDED}
    assert done_jobs == set(ids) and len(ran) + len(first.job_ids) == len(ids)


def test_a_tick_between_a_bundles_end_and_its_take_runs_no_task_past_the_limit() -> None:
    """A tick that comes while a runner goes from its bundle to the batch's next one, with
    other work waiting, launches nothing into that task's slot: the tasks stay within the
    limit at every step."""
    tw = Twins()
    backlog(tw, 600)
    stages = tw.stages(**ENV)
    stages.tick.tick()
    tw.client().submit("k", {}, job_id="other", estimated_seconds=1.0)  # due work, no batch
    most = 0
    take = tw.store.take_follow_on

    def tick_then_take(*args: Any, **kwargs: Any) -> Take:
        nonlocal most
        tw.clock.advance(60)
        stages.tick.tick()
        most = max(most, len(tw.store.active_bundles()))
        took = take(*args, **kwargs)
        most = max(most, len(tw.store.active_bundles()))
        return took

    tw.store.take_follow_on = tick_then_take  # type: ignore[method-assign]
    ran = run(tw, tw.task_arns()[0])
    assert len(ran) > len(tw.jobs()) // SLOTS // 10  # it went on into follow-ons
    assert most == SLOTS


def test_a_task_whose_batch_is_over_goes_on_with_another_batchs_follow_ons() -> None:
    """A second drain, into the slot a first batch's task left as that batch ran out, cuts its
    backlog into follow-ons for the one task it launches; the first batch's other tasks, as
    they end it, take them too, rather than exit and leave them to new tasks' starts."""
    tw = Twins()
    first_ids = backlog(tw, 600)  # three bundles launched, twelve follow-ons
    stages = tw.stages(**ENV)
    stages.tick.tick()
    a1, a2, a3 = tw.task_arns()
    assert len(run(tw, a2)) == 600 - 2 * 40  # it took every follow-on, then exited
    second_backlog_runs_on_the_tasks_up(
        tw, stages, first_ids, (a2, a1, a3), 40,
        "the first batch's task exited with the second's follow-ons waiting")


def test_with_no_slot_free_a_backlog_becomes_follow_ons_that_the_running_tasks_take() -> None:
    """Every slot runs a batch's task; a backlog that comes meanwhile is cut into follow-ons
    for those tasks (none launched: no slot is free) rather than left in the queue until a
    task exits and a new one starts; the tasks take them as they end their own batch."""
    tw = Twins()
    first_ids = backlog(tw, 600)
    stages = tw.stages(**ENV)
    stages.tick.tick()
    tasks = tw.task_arns()
    second_ids = backlog(tw, 800, prefix="k")
    tw.clock.advance(60)
    busy = stages.tick.tick()
    assert busy.capacity == 0 and busy.launch.bundles_launched == 0
    assert busy.intake.admitted == 800 and busy.intake.follow_ons > 0
    ran = [j for arn in tasks for j in run(tw, arn)]
    assert sorted(ran) == sorted(first_ids + second_ids)  # every job once
    assert tw.task_arns() == tasks  # no task started for the second backlog
    assert {b.state for b in tw.bundles()} == {BundleState.DONE}


def test_with_a_few_slots_free_the_running_tasks_take_what_those_slots_would_not() -> None:
    """A stream's tick: two tasks run bundles of no batch (a backlog too small to follow on)
    and one slot is free. The next backlog is more than that slot takes at a follow-on, so
    the tick launches one follow-on's worth into it and cuts the rest into follow-ons that
    every running task takes as it ends its bundle, batch or not, rather than leave it to
    one new task (or to new tasks started as the others exit)."""
    tw = Twins()
    first_ids = backlog(tw, 30)  # 10 a slot: three bundles of no batch
    stages = tw.stages(**ENV)
    stages.tick.tick()
    assert all(b.batch is None for b in tw.bundles())
    a1, a2, a3 = tw.task_arns()
    assert len(run(tw, a1)) == 10  # nothing to take: it exits, and its slot frees
    report = second_backlog_runs_on_the_tasks_up(
        tw, stages, first_ids, (a1, a2, a3), 10,
        "a task of no batch exited with follow-ons waiting")
    assert report.intake.admitted == 400 and report.intake.follow_ons > 0


def test_a_few_free_slots_that_take_the_backlog_at_a_follow_on_each_make_no_follow_ons() -> None:
    """Running tasks take nothing from a backlog the free slots take whole at a follow-on's
    size: it launches, as it did, with no batch."""
    tw = Twins()
    backlog(tw, 30)
    stages = tw.stages(**ENV)
    stages.tick.tick()
    a1, _, _ = tw.task_arns()
    run(tw, a1)
    backlog(tw, 40, prefix="k")  # one follow-on's worth, for the one free slot
    tw.clock.advance(60)
    report = stages.tick.tick()
    assert report.launch.bundles_launched == 1 and report.intake.follow_ons == 0
    assert report.intake.admitted == 40


def test_a_runner_of_a_stream_waits_for_the_next_ticks_follow_ons_rather_than_exit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The last tick fed the running tasks as a stream's do: a runner with nothing left to
    take waits (LONGJOBS_STREAM_WAIT_SECONDS, its results written meanwhile) and takes the
    next tick's follow-ons, rather than exit and leave them to a new task's start. With the
    setting 0 (outside the stack) it exits as it did."""
    monkeypatch.setattr(next_bundle, "STREAM_POLL_SECONDS", 0.01)
    tw = Twins()
    first_ids = backlog(tw, 12)  # 4 a slot: three bundles of no batch
    stages = tw.stages(**ENV)
    stages.tick.tick()
    a1, a2, _ = tw.task_arns()
    word = tw.table.get(codec.TICK_KEY)
    assert word is not None and word.task_definition is not None
    tw.store.save_tick_summary(TickSummary(at=tw.clock(), active=SLOTS, max_running=SLOTS,
                                           fed_seconds=30.0), word.task_definition, None)
    assert len(run(tw, a2)) == 4  # the setting 0: it exits at once
    waiting = settings.load("runner", {**RUNNER_ENV, "LONGJOBS_STREAM_WAIT_SECONDS": "30"})
    ran: list[str] = []
    worker = threading.Thread(target=run, args=(tw, a1), kwargs={"cfg": waiting, "ran": ran})
    worker.start()
    deadline = time.monotonic() + 60  # a poll on a condition; the bound is for a hang
    while sum(j.state == JobState.SUCCEEDED for j in tw.jobs()) < 8:  # a2's four, a1's
        time.sleep(0.01)
        assert time.monotonic() < deadline, "the waiting runner held its results"
    assert worker.is_alive()  # waiting, its bundle RUNNING: its slot held
    assert sorted(ran) == sorted(j for j in first_ids if tw.job(j).bundle_id  # type: ignore[union-attr]
                                 == tw.store.bundle_for_task(a1).bundle_id)  # type: ignore[union-attr]
    second_ids = backlog(tw, 100, prefix="k")
    tw.clock.advance(20)  # within the wait after the last tick
    busy = stages.tick.tick()  # a2's slot is free; a1 and a3 take the rest
    assert busy.capacity == 1 and busy.intake.follow_ons > 0
    worker.join(timeout=20)
    assert not worker.is_alive()
    assert set(second_ids) & set(ran), "the waiting runner took none of the next tick's"


def test_a_free_slot_the_high_queue_fills_still_leaves_the_backlog_to_the_running_tasks() -> None:
    """One slot is free and the high queue's jobs take it; the normal queue's backlog, which
    that leaves no slot, is still cut into follow-ons for the running tasks (as with no slot
    free), rather than left in the queue for a minute more."""
    tw = Twins()
    high = MemoryQueue(clock=tw.clock)
    tw.priority_queues[Priority.HIGH] = high
    backlog(tw, 30)  # 10 a slot: three bundles of no batch
    stages = tw.stages(**ENV)
    stages.tick.tick()
    first = tw.task_arns()
    run(tw, first[0])  # its slot frees
    high.send([(str(n), json.dumps({"schema_version": 1, "kind": "k", "payload": {},
                                    "job_id": f"h{n}", "estimated_seconds": 1.0,
                                    "priority": "high"})) for n in range(4)])
    second_ids = backlog(tw, 100, prefix="k")
    tw.clock.advance(60)
    report = stages.tick.tick()
    assert report.capacity == 1 and report.launch.bundles_launched == 1
    (new,) = [a for a in tw.task_arns() if a not in first]
    assert {j for b in tw.bundles() if b.task_arn == new for j in b.job_ids} \
        == {f"h{n}" for n in range(4)}
    assert report.intake.follow_ons > 0 and report.intake.admitted == 104
    assert tw.queue_counts() == (0, 0)
    ran = [j for arn in (*first[1:], new) for j in run(tw, arn)]
    assert sorted(j for j in ran if j in second_ids) == second_ids  # each once
    assert len(tw.launcher.tasks) == 4  # none launched for them


class LaggingCount(MemoryQueue):
    """SQS's approximate count, read as a stream's messages arrive: it says 5 where more
    are; the tick's first read of it decides no follow-ons, and its drain stops with every
    slot's share taken, leaving the rest."""

    def backlog(self) -> Backlog:
        got = super().backlog()
        return Backlog(min(got.visible, 5), got.in_flight, got.delayed)


@pytest.mark.parametrize("priority", ["normal", "high"])
def test_a_drain_that_left_small_jobs_for_want_of_slots_tells_the_runners_unless_urgent(
        priority: str) -> None:
    """A drain of small jobs that stopped with every slot's share taken and left some in the
    queue tells the running tasks (their runners wait for the next tick's follow-ons). Not
    one of the high queue: no follow-on takes its jobs, so a runner waiting for them would
    only hold the slot a new task would run them in."""
    tw = Twins()
    queue = LaggingCount(clock=tw.clock)
    if priority == "high":
        tw.priority_queues[Priority.HIGH] = queue
    else:
        tw.queue = queue
    for s in range(0, 100, 10):
        queue.send([(str(k), json.dumps({"schema_version": 1, "kind": "k", "payload": {},
                                         "job_id": f"j{s + k}", "estimated_seconds": 1.0,
                                         "priority": priority})) for k in range(10)])
    report = tw.stages(**ENV).tick.tick()
    assert report.launch.bundles_launched == SLOTS and report.intake.follow_ons == 0
    assert queue.backlog().in_flight == 0 and super(LaggingCount, queue).backlog().visible > 0
    word = tw.table.get(codec.TICK_KEY)
    summary = TickSummary.from_json(word.summary if word else None)
    assert summary is not None and summary.small_jobs_left == (priority == "normal")
