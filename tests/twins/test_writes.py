"""job_runner/writes.py: a flush under way never holds up the other jobs' starts and results,
and a result is written within flush_seconds even when no other job finishes.

The store here is a stand-in that blocks inside ``apply`` until the test lets it go, so the
tests see what happens while a transaction is in flight: counts and orderings, no timings
(a wait on a condition has a deadline that only guards against a hang).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import Job, JobState
from dispatcher.store import Fence, JobUpdate
from dispatcher.store.values import JobOutcomes
from job_runner.outcome import Outcome
from job_runner.writes import Writes


class BlockingStore:
    """Records every apply; the first one blocks until ``release`` is set."""

    def __init__(self) -> None:
        self.applied: list[list[JobUpdate]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.written = threading.Event()  # set by every apply

    def apply(self, fence: Fence, updates: list[JobUpdate],
              bundle_to: BundleState | None = None, retry_at: float | None = None,
              *, handed: int | None = None, slots: int | None = None,
              ended: JobOutcomes | None = None) -> set[str]:
        if not self.applied and not self.release.is_set():
            self.entered.set()
            assert self.release.wait(30), "the test never released the first flush"
        self.applied.append(list(updates))
        self.written.set()
        return set()


def job(i: int) -> Job:
    return Job(job_id=f"j{i}", kind="k", payload={}, bundle_id="b")


def writes(store: Any, flush_seconds: float = 0.0, **kwargs: Any) -> Writes:
    return Writes(store, Fence("b", 1, "arn:task"), "family:1", flush_seconds, **kwargs)


def test_jobs_record_while_another_jobs_flush_is_in_flight() -> None:
    store = BlockingStore()
    with writes(store) as w:
        first = job(0)
        w.start(first)
        # flush_seconds 0: the flusher writes this result at once, and blocks in the table.
        w.finish(first, Outcome(JobState.SUCCEEDED), started=True)
        assert store.entered.wait(30)
        # Meanwhile 19 more jobs start and end: none waits for the flush under way.
        done = threading.Event()

        def others() -> None:
            for i in range(1, 20):
                j = job(i)
                w.start(j)
                w.finish(j, Outcome(JobState.SUCCEEDED), started=True)
            done.set()

        threading.Thread(target=others).start()
        assert done.wait(30), "recording waited for the flush in flight"
        assert len(store.applied) == 0  # still in flight
        store.release.set()
        w.flush(BundleState.DONE)
    ids = [u.job_id for batch in store.applied for u in batch]
    assert sorted(ids) == sorted(f"j{i}" for i in range(20)) and len(ids) == 20


def test_a_result_is_written_within_flush_seconds_while_its_bundle_mate_runs() -> None:
    """No other job finishes, no checkpoint, no bundle end: the flusher writes the result on
    its own, with the start of the job still running."""
    store = BlockingStore()
    store.release.set()  # nothing blocks here
    with writes(store, flush_seconds=0.05) as w:
        fast, slow = job(1), job(2)
        w.start(fast)
        w.start(slow)
        w.finish(fast, Outcome(JobState.SUCCEEDED, result=1), started=True)
        assert store.written.wait(30), "the flusher never wrote the result"
        (flushed,) = store.applied
        by_id = {u.job_id: u for u in flushed}
        assert (by_id["j1"].target, by_id["j1"].result) == (JobState.SUCCEEDED, 1)
        assert (by_id["j2"].source, by_id["j2"].target) == (JobState.PENDING, JobState.RUNNING)
        assert not w.pending


def test_a_failed_grouped_write_is_reported_and_nothing_more_is_written() -> None:
    class Failing(BlockingStore):
        def apply(self, *args: Any, **kwargs: Any) -> set[str]:
            raise RuntimeError("InjectedFailure")

    store = Failing()
    errors: list[Exception] = []
    reported = threading.Event()

    def on_error(exc: Exception) -> None:
        errors.append(exc)
        reported.set()

    with writes(store, on_error=on_error) as w:
        j = job(1)
        w.start(j)
        w.finish(j, Outcome(JobState.SUCCEEDED), started=True)
        assert reported.wait(30), "the flusher's failure never reached the worker"
    assert [str(e) for e in errors] == ["InjectedFailure"]


def test_a_start_in_flight_is_written_before_its_result() -> None:
    """The start goes out in one flush, the result is recorded meanwhile: the result's flush
    waits for the start's, and the result is an update from RUNNING."""
    store = BlockingStore()
    w = writes(store, flush_seconds=3600)
    j = job(1)
    w.start(j)
    flusher = threading.Thread(target=w.flush)
    flusher.start()
    assert store.entered.wait(30)
    w.finish(j, Outcome(JobState.SUCCEEDED), started=True)  # recorded, not flushed
    second = threading.Thread(target=w.flush)
    second.start()
    second.join(0.2)
    assert second.is_alive() and len(store.applied) == 0  # waits behind the first flush
    store.release.set()
    flusher.join(30)
    second.join(30)
    (start,), (result,) = store.applied
    assert (start.job_id, start.source, start.target) == ("j1", JobState.PENDING,
                                                          JobState.RUNNING)
    assert (result.job_id, result.source, result.target) == ("j1", JobState.RUNNING,
                                                             JobState.SUCCEEDED)


def test_a_write_under_way_keeps_the_history_it_was_given() -> None:
    """A start being written carries the job's history as it was at the start: the job's end,
    recorded meanwhile into the same entry by the job's thread, neither changes that write nor
    changes what it reads while it is in flight (the table's adapter iterates the entries)."""
    store = BlockingStore()
    with writes(store, flush_seconds=3600) as w:
        started = job(0)
        w.start(started)
        flusher = threading.Thread(target=w.flush)
        flusher.start()
        assert store.entered.wait(30)  # the start's write is in flight
        w.finish(started, Outcome(JobState.SUCCEEDED), started=True)
        store.release.set()
        flusher.join(30)
        w.flush()
    first, second = store.applied
    assert [(u.target, u.history) for u in first] == [
        (JobState.RUNNING, [{k: v for k, v in started.history[0].items()
                             if k not in ("ended_at", "outcome", "reason")}])]
    assert [u.target for u in second] == [JobState.SUCCEEDED]
    assert second[0].history == started.history and "ended_at" in started.history[0]


class CountingStore:
    """Records what each apply was given to put on the task's pointer; refuses ``refuse``'s
    updates on its first apply."""

    def __init__(self, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.ended: list[JobOutcomes | None] = []

    def apply(self, fence: Fence, updates: list[JobUpdate],
              bundle_to: BundleState | None = None, retry_at: float | None = None,
              *, handed: int | None = None, slots: int | None = None,
              ended: JobOutcomes | None = None) -> set[str]:
        self.ended.append(ended)
        refused = {u.job_id for u in updates if u.job_id == self.refuse}
        self.refuse = None
        return refused


@pytest.mark.parametrize(("refuse", "vouched"), [(None, JobOutcomes(1, 1)), ("j1", None)])
def test_the_move_to_done_carries_the_count_only_when_every_result_was_written(
        refuse: str | None, vouched: JobOutcomes | None) -> None:
    """A result refused in an earlier flush (the job moved on, perhaps naming this task as
    its run's) leaves the move to DONE without the count: the task's stop reads the jobs."""
    store = CountingStore(refuse)
    w = writes(store, flush_seconds=3600)
    one, two = job(1), job(2)
    w.start(one)
    w.finish(one, Outcome(JobState.SUCCEEDED), started=True)
    w.flush()
    w.start(two)
    w.finish(two, Outcome(JobState.FAILED, reason="boom"), started=True)
    w.flush(BundleState.DONE)
    assert store.ended == [None, vouched]
