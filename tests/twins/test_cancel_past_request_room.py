"""A cancel of more jobs of one running (or launched) bundle than its item keeps cancel
requests for (``MAX_CANCEL_REQUESTS``) keeps its word: an array of 2,500 children in one
bundle, cancelled, starts none of them again, and its task stops those it runs; the runner
here is the real runner's parts stepped one at a time (tests/model_runner.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from dispatcher.domain import arrays, sizes
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.cancels import CancelIncomplete
from dispatcher.domain.jobs import JobState
from dispatcher.ports.table import Put
from dispatcher.store import codec as r
from tests.model_runner import SimTask
from tests.twins import Twins

CHILDREN = 2500
CONCURRENCY = 20


def one_launched_bundle(t: Twins) -> Bundle:
    """An array of CHILDREN small children, every one recorded in one launched bundle."""
    t.client().submit("k", {}, job_id="a", array_size=CHILDREN, estimated_seconds=0.1)
    stages = t.stages(LONGJOBS_MAX_RUNNING_TASKS="1", LONGJOBS_FOLLOW_ON_SECONDS="0",
                      LONGJOBS_TASK_CONCURRENCY=str(CONCURRENCY))
    stages.tick.tick()  # the parent
    stages.tick.tick()  # its children, launched
    [bundle] = t.bundles()
    assert bundle.state == BundleState.LAUNCHED and len(bundle.job_ids) == CHILDREN
    assert CHILDREN > sizes.MAX_CANCEL_REQUESTS
    return bundle


def runner(t: Twins, bundle: Bundle, started: list[str]) -> SimTask:
    assert bundle.task_arn is not None
    return SimTask(bundle.task_arn, (bundle.bundle_id, bundle.attempt), t.store, t.launcher,
                   t.clock, CONCURRENCY, started.append)


def run_out(task: SimTask) -> None:
    """Every step the runner can take, each handler succeeding unless told to stop."""
    for _ in range(CHILDREN):
        if task.phase == "ended":
            return
        task.heartbeat()
        task.pass_(lambda job_id: "succeed")
    raise AssertionError("the runner did not end")


def children(t: Twins) -> dict[JobState, int]:
    jobs = t.store.get_jobs([arrays.child_id("a", i) for i in range(CHILDREN)])
    assert len(jobs) == CHILDREN
    return dict(Counter(j.state for j in jobs))


def test_a_launched_arrays_cancel_starts_none_of_its_children(twins: Twins) -> None:
    bundle = one_launched_bundle(twins)
    assert twins.client().cancel("a").state == JobState.CANCELLED
    started: list[str] = []
    run_out(runner(twins, bundle, started))
    assert started == []
    assert children(twins) == {JobState.CANCELLED: CHILDREN}


def at_work(twins: Twins, bundle: Bundle, started: list[str]) -> SimTask:
    """The bundle's runner, claimed, running as many children as it runs at once, and beating
    once: the running children are on the bundle's item."""
    task = runner(twins, bundle, started)
    task.claim()
    while task.can_start():
        task.start_next()
    task.heartbeat()
    return task


def test_a_running_arrays_cancel_stops_what_runs_and_starts_nothing_more(
        twins: Twins) -> None:
    bundle = one_launched_bundle(twins)
    started: list[str] = []
    task = at_work(twins, bundle, started)
    running = list(started)
    assert len(running) == CONCURRENCY
    assert twins.client().cancel("a").state == JobState.CANCELLED
    task.heartbeat()  # the runner learns the requests (the stop window starts)
    run_out(task)
    assert started == running  # nothing started after the cancel
    assert children(twins) == {JobState.CANCELLED: CHILDREN}  # those running were stopped


def test_a_bulk_cancel_selecting_the_array_starts_none_of_its_children(
        twins: Twins) -> None:
    bundle = one_launched_bundle(twins)
    report = twins.client().bulk_cancel(status="RUNNING", kind="k")
    assert (report.matched, report.acted, report.errors) == (1, 1, 0), report
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.CANCELLED
    started: list[str] = []
    run_out(runner(twins, bundle, started))
    assert started == []
    assert children(twins) == {JobState.CANCELLED: CHILDREN}


def test_children_it_cannot_stop_are_named_with_the_next_step(twins: Twins) -> None:
    """The bundle's item holds the most requests already: the running children cannot be
    asked to stop. The cancel says so, naming them; the rest are cancelled all the same."""
    bundle = one_launched_bundle(twins)
    started: list[str] = []
    task = at_work(twins, bundle, started)
    rec = twins.table.get(r.bundle_key(bundle.bundle_id))
    assert rec is not None
    rec.cancel_jobs = [f"other{n}" for n in range(sizes.MAX_CANCEL_REQUESTS)]
    twins.table.write(Put(rec))
    with pytest.raises(CancelIncomplete, match="stop the task") as raised:
        twins.client().cancel("a")
    named = raised.value.jobs
    assert set(started) <= set(named)  # the running ones
    assert started[0] in str(raised.value) and "cancel requests" in str(raised.value)
    parent = twins.job("a")
    assert parent is not None and parent.state == JobState.CANCELLED
    run_out(task)
    # Those its runner held read ran (it could not be told); every one was named, and the
    # few hundred named are all the cancel could not answer for.
    assert len(started) > CONCURRENCY and set(started) <= set(named)
    assert len(named) < 2 * sizes.MAX_CANCEL_REQUESTS // 3
    assert children(twins) == {JobState.CANCELLED: CHILDREN - CONCURRENCY,
                               JobState.SUCCEEDED: CONCURRENCY}  # the held ones' results refused
