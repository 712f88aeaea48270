"""A bundle of a limited kind holds its ``slots`` of the kind's limit while it is active; once
fewer of its jobs are left than that, its runner's next write lowers them, so that its last
long job does not keep the kind's other slots from the next bundle (job_runner.writes).

The real worker runs in-process on the twins' table; the tick decides from what it wrote."""

from __future__ import annotations

import threading
from typing import Any

from dispatcher import settings
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from job_runner import JobContext
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.helpers import wait_for
from tests.twins import Twins

BOUND = 30.0  # seconds: a safety net against a hang, never an expectation
LIMITS = {"LONGJOBS_KIND_LIMITS": "report=2", "LONGJOBS_TASK_CONCURRENCY": "4",
          "LONGJOBS_MAX_RUNNING_TASKS": "3"}


def test_the_last_long_job_of_a_bundle_leaves_its_kinds_other_slot_to_the_next_bundle() -> None:
    tw = Twins()
    client = tw.client()
    for n in range(4):  # four reports make one bundle; the last one runs long
        client.submit("report", {"long": n == 3}, job_id=f"r{n}", estimated_seconds=1)
    tw.stages(**LIMITS).tick.tick()
    (first,) = tw.bundles()
    assert first.slots == 2 and first.task_arn is not None
    client.submit("report", {"long": False}, job_id="later", estimated_seconds=1)

    release, long_started = threading.Event(), threading.Event()

    def report(payload: dict[str, Any], ctx: JobContext) -> None:
        if payload["long"]:
            long_started.set()
            assert release.wait(BOUND), "the test never released the long job"

    cfg = settings.load("runner", tw.env(LONGJOBS_FLUSH_SECONDS="0",
                                         LONGJOBS_HEARTBEAT_SECONDS="3600",
                                         LONGJOBS_ASSIGN_WAIT_SECONDS="1", **LIMITS))
    worker = Worker(cfg, tw.store, HandlerRegistry({"report": report}), first.task_arn)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert long_started.wait(BOUND)
        # The three short reports are written (the flusher writes each result at once).
        wait_for(lambda: all((j := tw.job(f"r{n}")) is not None
                             and j.state == JobState.SUCCEEDED for n in range(3)),
                 BOUND, "the three short reports written")
        running = tw.bundle(first.bundle_id)
        assert running is not None and running.state == BundleState.RUNNING
        assert running.slots == 1  # one job left: one slot of the kind's two

        tw.stages(**LIMITS).tick.tick()
        later = tw.job("later")
        assert later is not None and later.bundle_id is not None
        second = tw.bundle(later.bundle_id)
        assert second is not None and second.state == BundleState.LAUNCHED
        assert second.slots == 1  # the room the first bundle left, not more
    finally:
        release.set()
        thread.join(BOUND)
    assert not thread.is_alive()
    ended = tw.bundle(first.bundle_id)
    assert ended is not None and ended.state == BundleState.DONE
