"""`ctx.progress`: how far a running job got, carried by the heartbeat the runner makes anyway
(no call more), shown by `jobs list`, `jobs show` and `top` with an ETA from this attempt's
rate, and kept with the job's checkpoint so that a rerun resumes it. The runner is the real
Worker, in-process on the table twin; what operators see is read through the operator API."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain import progress as progress_rules
from dispatcher.domain import sizes
from dispatcher.domain.jobs import JobState
from dispatcher.domain.progress import MAX_MESSAGE, InvalidProgress, Progress
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.ports.table import Set, Update
from dispatcher.store import Fence, Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from job_runner import JobContext
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.model_runner import worst_report
from tests.twins.test_job_show_and_logs import relaunch
from tests.twins.test_worker import ARN, launched, small

CFG = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
                               "LONGJOBS_HEARTBEAT_SECONDS": "0.05",
                               "LONGJOBS_ASSIGN_WAIT_SECONDS": "1"})
HANG = 60.0  # a bound for a hang only


def test_percent_and_an_eta_from_this_attempts_rate() -> None:
    # Resumed at 400 of 1000 at t=100; 500 at t=150: 100 in 50 s, 500 left: 250 s more.
    p = Progress(500, 1000, "rows", at=150.0, since=100.0, base=400)
    assert p.percent == 50.0 and p.eta() == 400.0
    assert p.words(150.0) == "50% (500 of 1000), eta 00:06:40 UTC (in 4m10s): rows"
    assert Progress(5, None, None, at=10, since=0).eta() is None  # no total: no ETA
    assert Progress(0, 10, None, at=10, since=0).eta() is None  # nothing done yet: no rate
    assert Progress(12, 10, None, at=10, since=0).percent == 100.0
    # A year or more off is no ETA (and no date past what a clock can print).
    slow = Progress(1, 1e9, None, at=400.0, since=0.0)
    assert slow.eta() is None and slow.words(400.0) == "0% (1 of 1000000000)"
    assert Progress(1, 1e300, None, at=400.0, since=0.0).eta() is None


@pytest.mark.parametrize("done", [-1, math.nan, math.inf, "7", True, None, 10**400])
def test_a_report_a_person_could_not_read_is_refused_naming_the_job(done: Any) -> None:
    with pytest.raises(InvalidProgress, match=r"j1: ctx\.progress: done must be a finite"):
        progress_rules.report(done, 10, None, at=1, since=0, base=0, job_id="j1")


def test_a_message_that_is_not_text_is_refused() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    for message in (Unprintable(), b"bytes", 42):
        with pytest.raises(InvalidProgress, match="message must be text or None"):
            progress_rules.report(1, 2, message, at=1, since=0, base=0, job_id="j1")


def test_a_long_message_is_cut_and_a_heartbeat_carries_the_latest_reports_only() -> None:
    p = progress_rules.report(1, 2, "x" * 10_000, at=1, since=0, base=0, job_id="j")
    assert p.message is not None and len(p.message) == MAX_MESSAGE
    many = {f"j{i}": Progress(i, 1000, "m" * MAX_MESSAGE, at=float(i), since=0)
            for i in range(300)}
    carried = progress_rules.latest(many)
    assert sorted(carried) == sorted(f"j{i}" for i in range(280, 300))
    assert Progress.from_json({"done": "junk"}) is None and Progress.from_json([1]) is None


def test_a_running_jobs_report_reaches_list_show_and_top_and_survives_its_rerun() -> None:
    table = MemoryTable()
    store = Store(table)
    launched(store, [small("long", kind="steps")])
    reported, release = threading.Event(), threading.Event()
    seen: list[Progress | None] = []

    def steps(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(ctx.last_progress)
        ctx.progress(40, 100, "step 40")
        ctx.checkpoint({"step": 40})
        ctx.progress(50, 100, "step 50")
        reported.set()
        release.wait(HANG)

    worker = Worker(CFG, store, HandlerRegistry({"steps": steps}), ARN)
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    assert reported.wait(HANG)
    queries = Queries(store)

    def listed() -> Progress | None:
        (row,) = [r for r in queries.list_jobs() if r.job_id == "long"]
        return row.progress

    deadline = time.monotonic() + HANG  # a hang's bound: it polls for the next heartbeat
    while ((got := listed()) is None or got.done != 50) and time.monotonic() < deadline:
        threading.Event().wait(0.01)  # the next heartbeat carries it (every 0.05 s here)
    assert got is not None and (got.done, got.total, got.message) == (50, 100, "step 50")
    shown = queries.show("long").summary
    assert shown.state == JobState.RUNNING and shown.progress == got
    assert [p.done for _, p in Top(store).snapshot().progress] == [50]
    release.set()
    runner.join(HANG)
    assert queries.show("long").summary.progress is None  # SUCCEEDED: done, whatever it said
    # Its item keeps the report its checkpoint carried: a rerun resumes from both.
    job = store.get_job("long")
    assert job is not None and job.checkpoint == {"step": 40}
    kept = Progress.from_json(job.progress)
    assert kept is not None and (kept.done, kept.message) == (40, "step 40")
    assert seen == [None]


@pytest.mark.parametrize("from_scratch", [False, True])
def test_a_rerun_resumes_the_progress_its_checkpoint_kept_and_counts_its_rate_from_it(
        from_scratch: bool) -> None:
    seen: list[Progress | None] = []

    def steps(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(ctx.last_progress)
        if len(seen) == 1:
            ctx.progress(40, 100, "step 40")
            ctx.checkpoint({"step": 40})
            raise RuntimeError("the first run fails")
        job = store.get_job("long")
        assert job is not None and job.bundle_id
        key = r.bundle_key(job.bundle_id)
        # The new task's heartbeats carry no report until this run makes one: the one it
        # resumed from is the earlier run's (a relaunch's claim removed what its bundle held).
        beats: set[float] = set()
        deadline = time.monotonic() + HANG  # a hang's bound: it polls for the beats
        while len(beats) < 3:  # the claim's heartbeat time and two heartbeats after it
            bundle = table.get(key)
            assert bundle is not None and not bundle.progress
            beats.add(float(bundle.heartbeat_at or 0))
            assert time.monotonic() < deadline, "no heartbeat came"
            threading.Event().wait(0.01)
        ctx.progress(60, 100)
        seen.append(ctx.last_progress)

    table = MemoryTable()
    store = Store(table)
    launched(store, [small("long", kind="steps", max_attempts=1)])
    Worker(CFG, store, HandlerRegistry({"steps": steps}), ARN).run()
    assert store.get_job("long") is not None
    store.retry("long", from_scratch=from_scratch)
    relaunch(store, "long", ARN + "-again")
    Worker(CFG, store, HandlerRegistry({"steps": steps}), ARN + "-again").run()
    first, resumed, second = seen
    assert first is None and second is not None
    if from_scratch:
        assert resumed is None and second.base == 0
    else:
        assert resumed is not None and (resumed.done, resumed.message) == (40, "step 40")
        assert second.base == 40  # this attempt's rate counts what it did itself


def test_the_largest_report_fits_its_budget() -> None:
    """A message of escaped characters and numbers written at their longest: a job's item
    keeps it with its checkpoint (tests/twins/test_sizes.py counts it in the item's)."""
    assert sizes.json_bytes(worst_report("j")) + len("progress") <= sizes.MAX_PROGRESS_BYTES


def test_a_relaunched_bundles_claim_drops_the_lost_tasks_reports() -> None:
    """The same bundle relaunched (its task lost): what its item holds is the lost task's, until
    the new one's heartbeat carries its own."""
    table = MemoryTable()
    store = Store(table)
    bundle = launched(store, [small("j1")])
    table.write(Update(r.bundle_key(bundle.bundle_id), [Set("progress", {"j1": Progress(
        5, 10, "the lost task's", at=1.0, since=0.0).as_json()})]))
    store.claim(Fence(bundle.bundle_id, bundle.attempt, ARN))
    rec = table.get(r.bundle_key(bundle.bundle_id))
    assert rec is not None and rec.progress is None
