"""An urgent job submitted into a full backlog starts within a minute plus one running job.

Every task slot runs a long bundle of the backlog (the backlog is spread over all of them, so
none frees until the batch ends). A high job sent mid-batch is taken in by the tick that finds
no slot free (watching the high queue with long polls, ``LONGJOBS_URGENT_WATCH_SECONDS``),
handed to a running task, learnt by that task's next heartbeat, and started as soon as one of
its running jobs ends (dispatcher/stages/handoff.py).

The world runs in virtual time, one second a step: the real tick (its threads in one order) a
minute apart, its long polls letting the world go on while they wait; each task claims its
bundle 40 s after its launch (a Fargate start) and runs it through the runner's real parts
(tests/model_runner.py: the claim, heartbeats every 30 s, grouped writes flushed every 10 s,
the schedule), each job taking JOB_SECONDS; a task's stop event is delivered when it exits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.domain.stops import TaskStop
from dispatcher.domain.waiting import TickSummary
from dispatcher.ops.client import JobClient
from dispatcher.ports.queue import BATCH, Received
from dispatcher.store import Store
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from dispatcher.wiring import pipeline
from job_runner import JobContext, next_bundle
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.model_faults import one_thread
from tests.model_runner import SimTask
from tests.twins import ENV, Twins
from tests.twins.test_worker import ARN, launched, small

JOB_SECONDS = 10.0
TASKS = 3
CONCURRENCY = 4
BACKLOG = 600  # 200 jobs a task: 500 s of each task's time at 4 at once
START_SECONDS = 40.0  # RunTask to the runner's claim
HEARTBEAT_SECONDS = 30.0
FLUSH_SECONDS = 10.0
TICK_EVERY = 60.0
WATCH_SECONDS = 50.0
# What the change promises: within a minute plus one running job's length.
PROMPT = 60.0 + JOB_SECONDS


class LongPollQueue(MemoryQueue):
    """SQS's long poll in virtual time: a receive that finds nothing lets the world go on a
    second at a time until a message comes or its wait is over."""

    def __init__(self, clock: Callable[[], float], world: Callable[[], None]) -> None:
        super().__init__(clock=clock)
        self.world = world
        self.polls = 0

    def receive(self, max_messages: int = BATCH, visibility_timeout: int | None = None,
                wait_seconds: int = 0) -> list[Received]:
        self.polls += 1
        end = self._clock() + wait_seconds
        while True:
            got = super().receive(max_messages, visibility_timeout)
            if got or self._clock() >= end:
                return got
            self.world()


class World:
    def __init__(self, urgent_at: list[float], *, watch: float = WATCH_SECONDS,
                 backlog_seconds: float = JOB_SECONDS, **urgent: Any) -> None:
        """``urgent``: what else the urgent jobs are sent with (``cpu``, ``memory``);
        ``backlog_seconds``: how long each job of the backlog runs."""
        self.urgent_fields = urgent
        self.backlog_seconds = backlog_seconds
        self.tw = Twins()
        self.t0 = self.tw.clock()
        self.high = LongPollQueue(self.tw.clock, self.step)
        self.env = {"LONGJOBS_MAX_RUNNING_TASKS": str(TASKS),
                    "LONGJOBS_TASK_CONCURRENCY": str(CONCURRENCY),
                    "LONGJOBS_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
                    "LONGJOBS_URGENT_WATCH_SECONDS": str(watch),
                    "LONGJOBS_TICK_CONCURRENCY": "2"}
        self.stages = pipeline.build(
            self.tw.config(**self.env), queue=self.tw.queue, store=self.tw.store,
            launcher=self.tw.launcher, clock=self.tw.clock, pacer=LaunchPacer.simulated(),
            priority_queues={Priority.HIGH: self.high})
        self.client = JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"],
                                table_name=ENV["LONGJOBS_TABLE"], region="us-east-1",
                                queues={Priority.NORMAL: self.tw.queue,
                                        Priority.HIGH: self.high})
        self.urgent = {f"urgent-{n}": self.t0 + at for n, at in enumerate(urgent_at)}
        self.sent: set[str] = set()
        self.tasks: dict[str, SimTask] = {}
        self.launched_at: dict[str, float] = {}
        self.beat_at: dict[str, float] = {}
        self.flush_at: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.runs: dict[str, int] = {}
        self.ticks = 0

    def now(self) -> float:
        return self.tw.clock()

    def ran(self, job_id: str) -> None:
        self.runs[job_id] = self.runs.get(job_id, 0) + 1
        self.started.setdefault(job_id, self.now())

    # -- one second of the world (not the tick) -------------------------------------------------
    def step(self) -> None:
        now = self.tw.clock.advance(1.0)
        for job_id, at in self.urgent.items():
            if job_id not in self.sent and at <= now:
                self.client.submit("k", {}, job_id=job_id, priority="high",
                                   estimated_seconds=JOB_SECONDS, **self.urgent_fields)
                self.sent.add(job_id)
        for arn in self.tw.launcher.tasks:
            if arn not in self.tasks:
                self.tasks[arn] = SimTask(arn, (arn, 0), self.tw.store, self.tw.launcher,
                                          self.tw.clock, CONCURRENCY, self.ran)
                self.launched_at[arn] = now
        for arn, sim in self.tasks.items():
            self.runner(arn, sim, now)

    def runner(self, arn: str, sim: SimTask, now: float) -> None:
        if sim.phase == "new":
            if now - self.launched_at[arn] >= START_SECONDS:
                sim.claim()
                self.beat_at[arn] = now + HEARTBEAT_SECONDS
                self.flush_at[arn] = now + FLUSH_SECONDS
            return
        if sim.phase != "running":
            return
        for job_id, run in list(sim.runs.items()):
            length = JOB_SECONDS if job_id in self.urgent else self.backlog_seconds
            if now - run.started_at >= length:
                sim.finish(job_id, "succeed")
        if now >= self.beat_at[arn]:
            sim.heartbeat()
            self.beat_at[arn] = now + HEARTBEAT_SECONDS
        while sim.can_start():
            sim.start_next()
        if now >= self.flush_at[arn]:
            sim.flush()
            self.flush_at[arn] = now + FLUSH_SECONDS
        if sim.can_end() and not sim.runs:
            sim.end()
            if sim.phase == "ended":
                task = self.tw.launcher.tasks[arn]
                self.stages.reruns.on_stop(TaskStop(arn, task.stop_code, task.stopped_reason,
                                                    task.exit_code, task.stopped_at))

    # -- the run --------------------------------------------------------------------------------
    def threads(self) -> AbstractContextManager[None]:
        """How the tick's threads run: in one order, its launches at its end."""
        return one_thread()

    def run(self, until: float) -> None:
        next_tick = self.t0
        with self.threads():
            while self.now() < self.t0 + until:
                if self.now() >= next_tick:
                    self.stages.tick.tick()
                    self.ticks += 1
                    next_tick += TICK_EVERY
                else:
                    self.step()

    def states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for job in self.tw.jobs():
            out[str(job.state)] = out.get(str(job.state), 0) + 1
        return out


def backlogged(urgent_at: list[float], **kwargs: Any) -> World:
    world = World(urgent_at, **kwargs)
    world.client.submit_many([{"kind": "k", "payload": {}, "job_id": f"b{n:04d}",
                               "estimated_seconds": JOB_SECONDS} for n in range(BACKLOG)])
    return world


@pytest.mark.parametrize("at", [100.0, 115.0, 170.0, 200.0])
def test_an_urgent_job_starts_within_a_minute_and_a_job_behind_a_full_backlog(at: float) -> None:
    """Sent at ``at`` s into the batch (a watch under way, or in the seconds between two
    watches): it starts in a task that was already running, within PROMPT, and the backlog
    still drains whole, every job once."""
    world = backlogged([at])
    world.run(900.0)
    assert len(world.tw.launcher.tasks) == TASKS  # every slot held a long bundle; no new task
    job = world.tw.job("urgent-0")
    assert job is not None and job.state == JobState.SUCCEEDED
    backlog_bundles = {b.bundle_id for b in world.tw.bundles() if b.attempt >= 1}
    assert job.bundle_id in backlog_bundles
    waited = world.started["urgent-0"] - (world.t0 + at)
    assert waited <= PROMPT, f"the urgent job waited {waited} s"
    assert world.tw.bundle(job.bundle_id or "") is not None
    assert world.states() == {"SUCCEEDED": BACKLOG + 1}
    assert set(world.runs.values()) == {1}  # no job ran twice
    assert {b.state for b in world.tw.bundles()} == {BundleState.DONE}


def test_urgent_jobs_are_spread_over_the_running_tasks() -> None:
    """Six urgent jobs at once: each starts within PROMPT, spread over the three tasks."""
    world = backlogged([130.0] * 6)
    world.run(900.0)
    hosts = {world.tw.job(j).bundle_id for j in world.urgent}  # type: ignore[union-attr]
    assert len(hosts) == TASKS
    for job_id, sent in world.urgent.items():
        assert world.started[job_id] - sent <= PROMPT, job_id
    assert world.states() == {"SUCCEEDED": BACKLOG + 6}
    assert set(world.runs.values()) == {1}


def test_without_the_watch_an_urgent_job_waits_for_the_next_tick_and_still_no_slot() -> None:
    """The watch off (outside AWS, by default): the urgent job is taken in by the next tick
    (at 120 s), not at once, and still handed to a running task: it waits at most a tick, a
    heartbeat interval and a job."""
    world = backlogged([100.0], watch=0.0)
    world.run(900.0)
    started = world.started["urgent-0"] - world.t0
    assert 2 * TICK_EVERY < started <= 100.0 + TICK_EVERY + HEARTBEAT_SECONDS + JOB_SECONDS
    assert len(world.tw.launcher.tasks) == TASKS
    assert world.states() == {"SUCCEEDED": BACKLOG + 1}


def test_behind_long_jobs_alone_in_their_tasks_an_urgent_job_takes_a_free_slot_of_one() -> None:
    """A backlog of hour-long jobs, each alone in its task (not small: never bundled): each task
    runs four at once, so three of its slots are free, and an urgent job handed to it starts at
    its next heartbeat, not after the hour."""
    world = World([100.0], backlog_seconds=3600.0)
    world.client.submit_many([{"kind": "k", "payload": {}, "job_id": f"b{n}"}
                              for n in range(TASKS)])
    world.run(400.0)
    job = world.tw.job("urgent-0")
    assert job is not None and job.state == JobState.SUCCEEDED
    assert job.bundle_id in {world.tw.job(f"b{n}").bundle_id for n in range(TASKS)}  # type: ignore[union-attr]
    assert world.started["urgent-0"] - (world.t0 + 100.0) <= PROMPT
    assert len(world.tw.launcher.tasks) == TASKS


def test_an_urgent_job_no_running_task_can_take_gets_the_slot_a_task_leaves_for_it() -> None:
    """Of another size than every running task: it is not handed, and waits in the table;
    the next of the batch's tasks to end a bundle leaves its slot for it (one task, not
    each), so it runs on a task of its own long before the batch ends, and the batch's
    follow-ons fill that slot again after it."""
    world = backlogged([100.0], cpu=4096, memory=8192)
    world.run(900.0)
    job = world.tw.job("urgent-0")
    assert job is not None and job.state == JobState.SUCCEEDED
    bundle = world.tw.bundle(job.bundle_id or "")
    assert bundle is not None and bundle.handed_jobs == [] and bundle.job_ids == ["urgent-0"]
    launched = world.launched_at[bundle.task_arn or ""] - (world.t0 + 100.0)
    # A round of the batch's jobs and a tick (and a tick's wait for the summary that tells
    # the tasks): well before the batch's 500 s.
    assert launched < JOB_SECONDS + 3 * TICK_EVERY, launched
    assert len(world.tw.launcher.tasks) == TASKS + 2  # it, and a follow-on in its slot after
    assert world.states() == {"SUCCEEDED": BACKLOG + 1}


# -- the real runner, its threads on the table twin ----------------------------------------------
BOUND = 30.0  # seconds: a safety net against a hang, never an expectation


def urgent_waiting(store: Store, job_id: str) -> Bundle:
    """An urgent job recorded to wait (no slot free), as a tick's intake records it."""
    bundle = Bundle("urgent", [job_id], priority=Priority.HIGH)
    store.record([bundle], [small(job_id, bundle_id="urgent", priority=Priority.HIGH)])
    return bundle


def real_worker(store: Store, handlers: dict[str, Callable[..., Any]],
                heartbeat: str) -> tuple[Worker, threading.Thread]:
    cfg = settings.load("runner", {
        "LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
        "LONGJOBS_HEARTBEAT_SECONDS": heartbeat, "LONGJOBS_ASSIGN_WAIT_SECONDS": "1",
        "LONGJOBS_TASK_CONCURRENCY": "2"})
    w = Worker(cfg, store, HandlerRegistry(handlers), ARN)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    return w, thread


def test_the_runner_starts_a_handed_job_before_the_rest_of_its_bundle() -> None:
    store = Store(MemoryTable())
    launched(store, [small(f"j{i}") for i in range(6)])
    source = urgent_waiting(store, "u1")
    started: list[str] = []
    both = threading.Barrier(3, timeout=BOUND)
    go = {"j0": threading.Event(), "j1": threading.Event()}
    third = threading.Event()

    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        started.append(ctx.job_id)
        if len(started) == 3:
            third.set()
        if ctx.job_id in go:
            both.wait()
            assert go[ctx.job_id].wait(BOUND)

    w, thread = real_worker(store, {"ok": handler}, heartbeat="0.02")
    both.wait()  # both slots busy with j0 and j1
    host = store.full_bundles(["b1"])[0]
    assert store.hand(source, ["u1"], host) == ["u1"]
    for _ in range(int(BOUND / 0.01)):  # the next heartbeat brings it
        if "u1" in w._handed:
            break
        threading.Event().wait(0.01)
    go["j0"].set()  # one slot frees: the job that takes it starts third
    assert third.wait(BOUND)
    go["j1"].set()
    thread.join(BOUND)
    assert not thread.is_alive()
    assert started[2] == "u1" and sorted(started) == sorted(["u1", *(f"j{i}" for i in range(6))])
    u1 = store.get_job("u1")
    assert u1 is not None and u1.state == JobState.SUCCEEDED and u1.history[-1]["task_arn"] == ARN
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.DONE


def test_a_job_handed_after_the_last_heartbeat_is_run_before_the_bundle_ends() -> None:
    """No heartbeat comes (an hour apart): the runner's last write finds the job handed and
    runs it first, instead of closing the bundle over it."""
    store = Store(MemoryTable())
    launched(store, [small("j0"), small("j1")])
    source = urgent_waiting(store, "u1")
    ran: list[str] = []

    def handler(payload: dict[str, Any], ctx: JobContext) -> None:
        ran.append(ctx.job_id)
        if ctx.job_id == "j1":  # while the last job of the bundle runs
            assert store.hand(source, ["u1"], store.full_bundles(["b1"])[0]) == ["u1"]

    _, thread = real_worker(store, {"ok": handler}, heartbeat="3600")
    thread.join(BOUND)
    assert not thread.is_alive()
    assert sorted(ran) == ["j0", "j1", "u1"]
    assert {j.job_id: j.state for j in store.get_jobs(["j0", "j1", "u1"])} == \
        dict.fromkeys(["j0", "j1", "u1"], JobState.SUCCEEDED)
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.DONE


def test_the_watch_ends_a_watch_after_the_tick_began_however_long_it_drained(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A tick whose work before the watch took most of a minute (a slow table, a long drain)
    watches only what is left of its watch: it ends before the next tick is due, rather than
    hold the lease over it and have that tick skipped."""
    world = backlogged([])
    world.run(2 * TICK_EVERY)  # every slot busy from here on
    store = world.stages.tick._store
    active = store.active_bundles

    def slow() -> list[Bundle]:
        world.tw.clock.advance(45.0)
        return active()

    monkeypatch.setattr(store, "active_bundles", slow)
    begun = world.now()
    with world.threads():
        report = world.stages.tick.tick()
    assert report.capacity == 0 and not report.skipped
    assert world.now() - begun <= WATCH_SECONDS + 1.0 < TICK_EVERY
    assert report.handoff.watched_seconds <= WATCH_SECONDS - 45.0 + 1.0


def test_a_job_handed_to_a_runner_waiting_for_a_streams_next_tick_runs_before_it_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner whose jobs have all ended waits for the next tick's follow-ons (the last tick
    fed the running tasks), its heartbeat beating: a host the hand-off picks first. A job
    handed to it meanwhile runs; the bundle never ends DONE over it."""
    monkeypatch.setattr(next_bundle, "STREAM_POLL_SECONDS", 0.02)
    store = Store(MemoryTable())
    launched(store, [small("j0"), small("j1")])
    source = urgent_waiting(store, "u1")
    store.save_tick_summary(TickSummary(at=store.clock(), active=1, max_running=1,
                                        fed_seconds=30.0), "longjobs-worker:1", None)
    cfg = settings.load("runner", {
        "LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
        "LONGJOBS_HEARTBEAT_SECONDS": "0.05", "LONGJOBS_ASSIGN_WAIT_SECONDS": "1",
        "LONGJOBS_TASK_CONCURRENCY": "2", "LONGJOBS_STREAM_WAIT_SECONDS": "1"})
    ran: list[str] = []
    worker = Worker(cfg, store, HandlerRegistry({"ok": lambda p, ctx: ran.append(ctx.job_id)}),
                    ARN)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60  # a poll on a condition; the bound is for a hang
    while not all((j := store.get_job(i)) is not None and j.state == JobState.SUCCEEDED
                  for i in ("j0", "j1")):  # written before it waits
        assert time.monotonic() < deadline
        time.sleep(0.01)
    [host] = store.full_bundles(["b1"])
    assert host.state == BundleState.RUNNING  # waiting: its slot held
    assert store.hand(source, ["u1"], host) == ["u1"]
    thread.join(10)
    assert not thread.is_alive()
    assert sorted(ran[:2]) == ["j0", "j1"] and ran[2:] == ["u1"]  # its own two at once, then u1
    job = store.get_job("u1")
    assert job is not None and job.state == JobState.SUCCEEDED
