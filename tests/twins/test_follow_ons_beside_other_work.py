"""A batch's follow-ons beside other due work, through the real tick, runner and store on the
twins: other due work (a scheduled job whose time came, a retry, a follow-on given back to
PENDING) is never hidden behind a batch's untaken follow-ons nor passed by a newer job, and
a follow-on given back runs again in a slot or a take, not once its whole batch has ended."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import BundleState, untaken_follow_on
from dispatcher.domain.jobs import JobState
from dispatcher.store import Fence
from dispatcher.store.values import JobOutcomes, JobUpdate
from job_runner import writes as writes_module
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins
from tests.twins.test_array_jobs import run_bundle

SLOTS = 3
# One job at a time, 1 s each, follow-ons of 10 s: ten jobs a follow-on, so a few thousand
# jobs make hundreds of them (more than the tick's read of due work holds).
ENV = {"LONGJOBS_MAX_RUNNING_TASKS": str(SLOTS), "LONGJOBS_TASK_CONCURRENCY": "1",
       "LONGJOBS_FOLLOW_ON_SECONDS": "10"}
RUNNER = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_TASK_CONCURRENCY": "1",
                                  "LONGJOBS_FLUSH_SECONDS": "0"})


def backlog(tw: Twins, n: int) -> None:
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{i:05d}",
                              "estimated_seconds": 1.0} for i in range(n)])


def succeed(job: object) -> JobState:
    return JobState.SUCCEEDED


def test_a_due_scheduled_job_takes_a_free_slot_before_the_batch_and_a_newer_job() -> None:
    tw = Twins()
    client = tw.client()
    client.submit("report", {}, job_id="report", not_before=tw.clock() + 30)
    backlog(tw, 3000)
    stages = tw.stages(**ENV)
    stages.tick.tick()
    untaken = [b for b in tw.bundles() if untaken_follow_on(b)]
    assert len(untaken) > 201  # more than the tick's read of due bundles at one free slot
    assert tw.job("report") is not None  # recorded, scheduled
    tw.clock.advance(60)
    # One of the batch's tasks ends (as after a deploy), freeing its slot; a job is sent after
    # the report came due.
    first = tw.task_arns()[0]
    bundle = tw.store.bundle_for_task(first)
    assert bundle is not None
    run_bundle(tw, bundle, first, succeed, None)
    client.submit("k", {}, job_id="newer", estimated_seconds=1.0)
    report = stages.tick.tick()
    assert report.capacity == 1 and report.launch.bundles_launched == 1
    launched = tw.store.bundle_for_task(tw.task_arns()[-1])
    assert launched is not None and launched.job_ids == ["report"]
    assert all("newer" not in b.job_ids for b in tw.store.active_bundles())  # it waits


def test_a_follow_on_given_back_to_pending_runs_again_before_the_batch_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A job of a follow-on fails and retries: the follow-on goes back to PENDING and its
    task exits. The next tick gives the freed slot to it, not to the batch's untaken
    follow-ons; with no slot free, a running task of the batch takes it before its next
    follow-on."""
    for lowered in (False, True):
        tw = Twins()
        # The runner's retry backoff on the twins' clock.
        monkeypatch.setattr(writes_module, "time", SimpleNamespace(time=tw.clock,
                                                                   monotonic=time.monotonic))
        backlog(tw, 300)
        stages = tw.stages(**ENV)
        stages.tick.tick()
        first, second, *_ = tw.task_arns()
        # The first task runs its bundle and takes a follow-on, whose first job fails.
        taken = Worker(RUNNER, tw.store, HandlerRegistry({"k": lambda p, ctx: None}),
                       first)._run_bundle(tw.store.bundle_for_task(first))  # type: ignore[arg-type]
        assert taken is not None
        bad = taken.job_ids[0]

        def handler(payload: dict[str, object], ctx: object, bad: str = bad) -> None:
            if getattr(ctx, "job_id") == bad:  # noqa: B009
                raise ValueError("a moment's outage")

        assert Worker(RUNNER, tw.store, HandlerRegistry({"k": handler}),
                      first)._run_bundle(tw.store.get_bundle(taken.bundle_id)) is None  # type: ignore[arg-type]
        back = tw.store.get_bundle(taken.bundle_id)
        assert back is not None and back.state == BundleState.PENDING and back.attempt == 1
        tw.launcher.stop_task(first, "EssentialContainerExited", "exited", 0)
        tw.clock.advance(60)
        if not lowered:
            stages.tick.tick()  # the freed slot: the follow-on given back goes first
            again = tw.store.get_bundle(taken.bundle_id)
            assert again is not None and again.state == BundleState.LAUNCHED
            assert again.task_arn == tw.task_arns()[-1]
            continue
        # The limit lowered to the two tasks still running: no slot is free, and the tick's
        # summary says other work waits; the second task takes it as its bundle ends.
        tw.stages(**{**ENV, "LONGJOBS_MAX_RUNNING_TASKS": "2"}).tick.tick()
        mine = tw.store.bundle_for_task(second)
        assert mine is not None
        fence = Fence(mine.bundle_id, mine.attempt, second)
        claimed = tw.store.claim(fence).bundle
        tw.store.apply(fence, [JobUpdate(j, JobState.PENDING, JobState.SUCCEEDED,
                                         via=JobState.RUNNING, attempts_delta=1)
                               for j in claimed.job_ids])
        took = tw.store.end_and_take(fence, claimed, JobOutcomes(len(claimed.job_ids), 0))
        assert took.bundle is not None and took.bundle.bundle_id == taken.bundle_id
        assert took.bundle.task_arn == second and took.bundle.batch == claimed.batch
        assert tw.store.get_bundle(taken.bundle_id).attempt == 2  # type: ignore[union-attr]
