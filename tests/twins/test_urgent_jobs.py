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

from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.domain.stops import TaskStop
from dispatcher.ops.client import JobClient
from dispatcher.ports.queue import BATCH, Received
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.wiring import pipeline
from tests.model_faults import one_thread
from tests.model_runner import SimTask
from tests.twins import ENV, Twins

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
    def __init__(self, urgent_at: list[float], *, watch: float = WATCH_SECONDS) -> None:
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
                                   estimated_seconds=JOB_SECONDS)
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
            if now - run.started_at >= JOB_SECONDS:
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
    def run(self, until: float) -> None:
        next_tick = self.t0
        with one_thread():
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
