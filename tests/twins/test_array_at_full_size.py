"""An array of the largest size, 100,000 children, end to end on the twins: each child runs
once, the parent SUCCEEDED, and a job that waits for the array is launched right after."""

from __future__ import annotations

from collections import Counter

from dispatcher.domain import arrays
from dispatcher.domain.jobs import JobState
from tests.twins import Twins
from tests.twins.test_array_jobs import run_launched


def test_an_array_of_the_largest_size_runs_each_child_once_then_its_dependent() -> None:
    t = Twins()
    size = arrays.MAX_ARRAY_SIZE
    client = t.client()
    client.submit("k", {}, job_id="nightly", array_size=size, estimated_seconds=2)
    client.submit("merge", {}, job_id="merge", depends_on=["nightly"], estimated_seconds=2)
    stages = t.stages(LONGJOBS_MAX_RUNNING_TASKS="60", LONGJOBS_TASK_CONCURRENCY="20")
    ran: Counter[str] = Counter()
    ticks = last_end = 0
    while ticks < 100:
        stages.tick.tick()
        ticks += 1
        t.flow()  # the parent's end, once a tick decides it, releases the merge
        if ran["merge"]:
            break
        if run_launched(t, ran=ran) and not ran["merge"]:
            last_end = ticks
        t.clock.advance(60)
    assert ran.pop("merge") == 1
    assert len(ran) == size and set(ran.values()) == {1}
    parent = t.job("nightly")
    assert parent is not None and parent.state == JobState.SUCCEEDED
    # The tick after the last child's end decides the parent; its end releases the merge,
    # which the next tick launches.
    assert ticks - last_end <= 3, (ticks, last_end)
