"""An urgent job sent while a tick still drains a deep backlog is handed to a running task and
starts before that drain ends (dispatcher/stages/lookout.py).

The world of tests/twins/test_urgent_jobs.py (virtual time, a second a step, the runner's real
parts), with a drain that takes the world's time: each receive of the backlog's queue lets
RECEIVE_SECONDS of the world go by (ten jobs a receive: the backlog drains for ~240 s), and
the tick's launches run at the world's next second, so the first bundles' tasks start and
claim while the same tick still admits the rest. Without a look at the high queue between the
drain's rounds, the urgent job would wait for the drain to end and a tick after it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from dispatcher.domain.jobs import JobState, Priority
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.ops.client import JobClient
from dispatcher.ports.queue import BATCH, Received
from dispatcher.stages import launch_queue as launch_queue_module
from dispatcher.stages.lookout import LOOK_SECONDS
from dispatcher.stages.queue_drain import EMPTY_RECEIVES
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.wiring import pipeline
from tests.model_faults import one_thread
from tests.twins import ENV
from tests.twins.test_urgent_jobs import (
    HEARTBEAT_SECONDS,
    JOB_SECONDS,
    PROMPT,
    START_SECONDS,
    TASKS,
    World,
)

BACKLOG = 600  # 200 jobs a task: 500 s of each task's time at 4 at once
RECEIVE_SECONDS = 4  # the drain's pace: 2.5 jobs a second


class SlowQueue(MemoryQueue):
    """The backlog's queue: each receive takes RECEIVE_SECONDS of the world."""

    def __init__(self, clock: Callable[[], float], world: Callable[[], None]) -> None:
        super().__init__(clock=clock)
        self.world = world

    def receive(self, max_messages: int = BATCH, visibility_timeout: int | None = None,
                wait_seconds: int = 0) -> list[Received]:
        for _ in range(RECEIVE_SECONDS):
            self.world()
        return super().receive(max_messages, visibility_timeout)


class LaunchLane:
    """The tick's launch thread in one order: what it is given runs at the world's next
    second, while the drain goes on; what is left, when the tick closes it."""

    def __init__(self) -> None:
        self.work: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        self.work.append((f, lambda: fn(*args, **kwargs)))
        return f

    def run(self) -> None:
        while self.work:
            f, call = self.work.pop(0)
            try:
                f.set_result(call())
            except BaseException as exc:  # as a pool thread keeps it for result()
                f.set_exception(exc)

    def shutdown(self, wait: bool = True, **kwargs: Any) -> None:
        self.run()


class DrainingWorld(World):
    def __init__(self, urgent_at: list[float], **env: str) -> None:
        super().__init__(urgent_at)
        self.env.update(env)
        self.backlog = SlowQueue(self.tw.clock, self.step)
        self.stages = pipeline.build(
            self.tw.config(**self.env), queue=self.backlog, store=self.tw.store,
            launcher=self.tw.launcher, clock=self.tw.clock, pacer=LaunchPacer.simulated(),
            priority_queues={Priority.HIGH: self.high})
        self.client = JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"],
                                table_name=ENV["LONGJOBS_TABLE"], region="us-east-1",
                                queues={Priority.NORMAL: self.backlog, Priority.HIGH: self.high})
        self.lane = LaunchLane()
        self.first_drain = 0.0  # seconds the first tick drained (its backlog still visible)
        self.first_tick_polls = 0  # receives of the high queue in the first tick
        self.handed_in_drain: dict[str, bool] = {}  # urgent job -> handed while it drained
        self.started_in_drain: dict[str, bool] = {}
        self.looks = 0

    def draining(self) -> bool:
        return self.ticks == 0 and self.backlog.backlog().visible > 0

    def step(self) -> None:
        self.lane.run()  # the launches the tick handed over since the last second
        super().step()
        if self.ticks == 0:
            self.first_tick_polls = self.high.polls
            self.first_drain += self.draining()
        for job_id in self.sent - self.started_in_drain.keys():
            job = self.tw.store.get_job(job_id)
            host = self.tw.store.get_bundle(job.bundle_id or "") if job is not None else None
            if host is not None and job_id in host.handed_jobs:
                self.handed_in_drain.setdefault(job_id, self.draining())
            if job_id in self.started:
                self.started_in_drain[job_id] = self.draining()

    def threads(self) -> AbstractContextManager[None]:
        return self._threads()

    @contextmanager
    def _threads(self) -> Iterator[None]:
        with one_thread():  # the drain's pool in one order; its launches on our lane
            saved = launch_queue_module.ThreadPoolExecutor
            setattr(launch_queue_module, "ThreadPoolExecutor", lambda *a, **k: self.lane)  # noqa: B010
            try:
                yield
            finally:
                setattr(launch_queue_module, "ThreadPoolExecutor", saved)  # noqa: B010


def drained(at: float, **env: str) -> DrainingWorld:
    # A hold longer than the drain (about 240 s at this pace): its bundles close as they fill,
    # not at half the hold, as the stack's faster drains' do.
    world = DrainingWorld([at], **{"LONGJOBS_HOLD_SECONDS": "600", **env})
    world.client.submit_many([{"kind": "k", "payload": {}, "job_id": f"b{n:04d}",
                               "estimated_seconds": JOB_SECONDS} for n in range(BACKLOG)])
    world.run(800.0)
    assert world.first_drain >= 200  # the drain was long: the premise
    # The high queue's receives in the first tick: its drain's (SQS's short polls sample),
    # then a look per LOOK_SECONDS once a task could host (the tick ends after its drain).
    assert world.first_tick_polls <= EMPTY_RECEIVES + world.first_drain / LOOK_SECONDS + 1
    job = world.tw.job("urgent-0")
    assert job is not None and job.state == JobState.SUCCEEDED
    assert len(world.tw.launcher.tasks) == TASKS  # no task of its own
    assert world.states() == {"SUCCEEDED": BACKLOG + 1}
    assert set(world.runs.values()) == {1}
    return world


@pytest.mark.parametrize("at", [150.0, 180.0])
def test_an_urgent_job_sent_during_a_long_drain_starts_before_the_drain_ends(at: float) -> None:
    """Sent while a task of the backlog runs and the tick still admits the rest: handed to a
    task and started before that drain ends, within PROMPT, every job run once; the drain's
    looks at the high queue are one per LOOK_SECONDS of it."""
    world = drained(at)
    assert world.handed_in_drain == {"urgent-0": True}
    assert world.started_in_drain == {"urgent-0": True}
    waited = world.started["urgent-0"] - (world.t0 + at)
    assert waited <= PROMPT, f"the urgent job waited {waited} s"


def test_an_urgent_job_sent_before_any_task_runs_goes_to_the_first_that_does() -> None:
    """Sent once the first bundle is launched but before its task starts: taken in at a look,
    it waits in the table and a later look of the same drain hands it to that task, which
    starts it at its first heartbeat (and a look), before the drain ends."""
    # Bundles of the even share (no follow-ons: their first launches within seconds of the
    # drain, and the first task would run long before 100 s).
    world = drained(100.0, LONGJOBS_FOLLOW_ON_SECONDS="0")
    first_claim = min(world.launched_at.values()) + START_SECONDS
    assert first_claim > world.t0 + 100.0  # the premise: no task ran when it came
    assert world.handed_in_drain == {"urgent-0": True}
    assert world.started_in_drain == {"urgent-0": True}
    assert world.started["urgent-0"] <= first_claim + LOOK_SECONDS + HEARTBEAT_SECONDS
