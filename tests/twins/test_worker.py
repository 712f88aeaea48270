"""The job runner's worker in-process, on the in-memory table twin: what it writes when a
handler is hostile (ignores its timeout, returns junk, raises what cannot be printed, fails to
import) or the table refuses part of a write."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.launches import Launch
from dispatcher.ports.table import Op, Set, TransactionCancelled, Update
from dispatcher.store import LaunchOutcome, Store
from dispatcher.store import codec as r
from dispatcher.store.base import TableRetry
from dispatcher.store.runner import RUNNER_PATIENCE
from dispatcher.testing.memory_table import MemoryTable
from job_runner import executor
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker

ARN = "arn:aws:ecs:us-east-1:000000000000:task/longjobs/t1"
CFG = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
                               "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                               "LONGJOBS_ASSIGN_WAIT_SECONDS": "1"})


class ConflictOnce(MemoryTable):
    """DynamoDB cancels a transaction that collides with another request on one of its items
    (TransactionConflict), or that it throttles (ThrottlingError: botocore does not retry a
    cancelled transaction); moto does neither. The first transaction here is cancelled so."""

    def __init__(self, reason: str = "TransactionConflict", times: int = 1) -> None:
        """``times``: that many transactions in a row, once armed."""
        super().__init__()
        self.reason = reason
        self.times = times
        self.conflicts = 0
        self.armed = False

    def _transact(self, ops: list[Op]) -> None:
        if self.armed and self.conflicts < self.times:
            self.conflicts += 1
            raise TransactionCancelled([self.reason] + [None] * (len(ops) - 1))
        super()._transact(ops)


def launched(store: Store, jobs: list[Job], bundle_id: str = "b1", arn: str = ARN) -> Bundle:
    """A bundle recorded and launched on ARN, as the tick leaves it for its runner."""
    bundle = Bundle(bundle_id, [j.job_id for j in jobs])
    for j in jobs:
        j.bundle_id = bundle_id
    store.record([bundle], jobs)
    launch = Launch(f"L-{bundle_id}", [bundle_id], "longjobs-worker:1")
    store.begin_launch(launch, [bundle])
    store.finish_launch(launch, LaunchOutcome(assigned=[(bundle_id, arn)]), {})
    return bundle


def small(job_id: str, kind: str = "ok", **extra: Any) -> Job:
    return Job(job_id=job_id, kind=kind, payload={}, estimated_seconds=0.1, **extra)


def worker(store: Store, handlers: dict[str, Callable[..., Any]]) -> Worker:
    return Worker(CFG, store, HandlerRegistry(handlers), ARN)


def state(store: Store, job_id: str) -> JobState:
    job = store.get_job(job_id)
    assert job is not None
    return job.state


def test_a_cancel_requested_before_the_claim_is_honoured() -> None:
    store = Store(MemoryTable())
    launched(store, [small("a"), small("b")])
    store.cancel("b")  # its bundle is LAUNCHED: a request the runner must read at its claim
    ran: list[str] = []
    worker(store, {"ok": lambda p, ctx: ran.append(ctx.job_id)}).run()
    assert ran == ["a"]
    b = store.get_job("b")
    assert b is not None and b.state == JobState.CANCELLED and "before it started" in (b.reason
                                                                                       or "")
    assert state(store, "a") == JobState.SUCCEEDED


def test_a_refused_result_does_not_throw_away_its_bundle_mates() -> None:
    table = MemoryTable()
    store = Store(table)
    launched(store, [small("a"), small("b", "b"), small("c")])

    def b(payload: dict[str, Any], ctx: Any) -> None:
        # Meanwhile, job "a" (finished, its result buffered) is moved on by someone else.
        table.write(Update(r.job_key("a"), [Set("state", "FAILED"),
                                            Set("status_key", r.job_status("FAILED", "a"))]))

    worker(store, {"ok": lambda p, ctx: "done", "b": b}).run()
    assert state(store, "a") == JobState.FAILED  # the other writer's decision stands
    assert state(store, "b") == state(store, "c") == JobState.SUCCEEDED
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.DONE


@pytest.mark.parametrize("reason", ["TransactionConflict", "ThrottlingError"])
def test_a_transaction_cancelled_for_a_moment_is_retried_not_taken_for_a_lost_claim(
        reason: str) -> None:
    table = ConflictOnce(reason)
    store = Store(table, table_retry=TableRetry(sleep=lambda s: None))
    launched(store, [small("a"), small("b")])
    table.armed = True
    assert worker(store, {"ok": lambda p, ctx: "done"}).run() == 0
    assert table.conflicts == 1
    assert state(store, "a") == state(store, "b") == JobState.SUCCEEDED


def test_results_throttled_past_the_ticks_tries_are_still_written() -> None:
    """A runner has no hold to keep: its results write is tried for up to half a minute
    (RUNNER_PATIENCE), past the five tries a tick gives a recording, rather than fail the
    runner and rerun its bundle."""
    table = ConflictOnce("ThrottlingError", times=TableRetry().attempts)  # all a tick's tries
    slept: list[float] = []
    store = Store(table, table_retry=TableRetry(sleep=slept.append))
    launched(store, [small("a"), small("b")])
    table.armed = True
    assert worker(store, {"ok": lambda p, ctx: "done"}).run() == 0
    assert table.conflicts == TableRetry().attempts < RUNNER_PATIENCE.attempts
    assert len(slept) == table.conflicts  # each wait on the store's sleep (virtual in a model)
    assert state(store, "a") == state(store, "b") == JobState.SUCCEEDED


def test_a_checkpoint_throttled_for_a_moment_is_saved() -> None:
    table = ConflictOnce("ThrottlingError")
    store = Store(table, table_retry=TableRetry(sleep=lambda s: None))
    launched(store, [Job(job_id="long", kind="step", payload={}, estimated_seconds=30)])

    def step(payload: dict[str, Any], ctx: Any) -> str:
        table.armed = True
        ctx.checkpoint({"done": 1})
        job = store.get_job("long")
        assert job is not None and job.checkpoint == {"done": 1}
        return "ok"

    assert worker(store, {"step": step}).run() == 0
    assert table.conflicts == 1 and state(store, "long") == JobState.SUCCEEDED


def test_a_lone_job_records_its_start_at_once_and_a_bundled_one_does_not() -> None:
    store = Store(MemoryTable())
    seen: dict[str, JobState] = {}

    def look(payload: dict[str, Any], ctx: Any) -> None:
        seen[ctx.job_id] = state(store, ctx.job_id)

    # A bundle of one job (a long job, or the only small one): a crash must charge it.
    launched(store, [Job(job_id="long", kind="look", payload={}, estimated_seconds=30)])
    worker(store, {"look": look}).run()
    # Bundled small jobs: starts are buffered with their results (one write for the group).
    launched(store, [small("s1", "look"), small("s2", "look")], bundle_id="b2",
             arn=ARN.replace("t1", "t2"))
    Worker(CFG, store, HandlerRegistry({"look": look}), ARN.replace("t1", "t2")).run()
    assert seen["long"] == JobState.RUNNING
    assert seen["s1"] == seen["s2"] == JobState.PENDING


def test_a_handler_that_ignores_its_timeout_ends_the_task(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """It is recorded FAILED (timeout) and nothing else runs in this task: the process ends
    (main exits) and the stop event reruns its bundle-mates, so two runs never overlap."""
    monkeypatch.setattr(executor, "TIMEOUT_GRACE_SECONDS", 0.2)
    store = Store(MemoryTable())
    launched(store, [small("stubborn", "stubborn", timeout_seconds=0.2), small("next")])
    release = threading.Event()

    def stubborn(payload: dict[str, Any], ctx: Any) -> None:
        release.wait(30)  # ignores ctx.cancelled()

    try:
        worker(store, {"stubborn": stubborn, "ok": lambda p, ctx: "done"}).run()
        job = store.get_job("stubborn")
        assert job is not None and job.state == JobState.FAILED
        assert (job.reason or "").startswith("timed out after")
        assert state(store, "next") == JobState.PENDING  # not started beside it
        bundle = store.get_bundle("b1")
        assert bundle is not None and bundle.state == BundleState.RUNNING  # the stop reruns
    finally:
        release.set()



def test_handler_errors_reach_the_logs_redacted_and_the_record_whole(
        caplog: pytest.LogCaptureFixture) -> None:
    """A pydantic ValidationError quotes the payload's values; the log
    line gets the error's type and a redacted message, the job record keeps the detail."""
    from pydantic import BaseModel

    class Params(BaseModel):
        retries: int

    def validate(payload: dict[str, Any], ctx: Any) -> None:
        Params.model_validate(payload)

    store = Store(MemoryTable())
    job = Job(job_id="leaky", kind="validate", payload={"retries": "api_key=sk-SECRET-123"},
              estimated_seconds=5, max_attempts=1)
    launched(store, [job])
    worker(store, {"validate": validate}).run()
    (finished,) = [rec for rec in caplog.records if rec.getMessage() == "job finished"]
    assert finished.__dict__["error_type"] == "ValidationError"
    assert "SECRET" not in str(finished.__dict__) and "SECRET" not in caplog.text
    recorded = store.get_job("leaky")
    assert recorded is not None and recorded.state == JobState.FAILED
    assert "SECRET" in str(recorded.error)  # the record keeps what an operator needs


class FailOnce(MemoryTable):
    """Once armed, the next transaction fails as a throttled or unreachable table would."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def _transact(self, ops: list[Op]) -> None:
        if self.armed:
            self.armed = False
            raise RuntimeError("InjectedFailure: the table did not answer")
        super()._transact(ops)


def test_a_checkpoint_whose_write_fails_stops_the_runner_not_just_the_handler() -> None:
    """The checkpoint flushes what is pending first (a's result, b's start). If that write
    fails and the handler swallows the error, the runner must still stop with the bundle
    RUNNING (so the stop reruns both), never mark it DONE over jobs left PENDING."""
    table = FailOnce()
    store = Store(table)
    launched(store, [small("a"), small("b", "saves")])

    def saves(payload: dict[str, Any], ctx: Any) -> str:
        with contextlib.suppress(RuntimeError):  # a careless handler
            ctx.checkpoint({"step": 1})
        return "done"

    table.armed = True
    with pytest.raises(RuntimeError, match="InjectedFailure"):
        worker(store, {"ok": lambda p, ctx: "done", "saves": saves}).run()
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.RUNNING
    assert state(store, "a") == state(store, "b") == JobState.PENDING  # the rerun runs both


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken too")


def test_junk_results_and_broken_exceptions_fail_their_job_not_the_task() -> None:
    store = Store(MemoryTable())
    deep: list[Any] = []
    for _ in range(100_000):  # json.dumps raises RecursionError, not TypeError or ValueError
        deep = [deep]

    def unprintable(payload: dict[str, Any], ctx: Any) -> None:
        raise Unprintable

    launched(store, [small("deep", "deep"), small("unprintable", "unprintable", max_attempts=1),
                     small("ok")])
    worker(store, {"deep": lambda p, ctx: deep, "unprintable": unprintable,
                   "ok": lambda p, ctx: "done"}).run()
    deep_job, broken, ok = (store.get_job(i) for i in ("deep", "unprintable", "ok"))
    assert deep_job is not None and deep_job.state == JobState.FAILED
    assert "RecursionError" in (deep_job.reason or "")
    assert broken is not None and broken.state == JobState.FAILED
    assert "str() raised RuntimeError" in (broken.reason or "")
    assert ok is not None and ok.state == JobState.SUCCEEDED


def test_a_module_that_raises_on_import_fails_each_of_its_jobs_alike(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_on_import.py").write_text(
        "raise RuntimeError('missing API key at import time')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    store = Store(MemoryTable())
    launched(store, [small("x1", "bad"), small("x2", "bad"), small("fine")])
    registry = HandlerRegistry.load(("bad=explodes_on_import:run",))
    registry._handlers["ok"] = lambda p, ctx: "done"
    Worker(CFG, store, registry, ARN).run()
    for job_id in ("x1", "x2"):
        job = store.get_job(job_id)
        assert job is not None and job.state == JobState.FAILED
        assert job.error is not None and job.error["type"] == "HandlerImportError"
        assert "RuntimeError: missing API key" in (job.reason or "")
    assert state(store, "fine") == JobState.SUCCEEDED


@pytest.mark.parametrize(("stop", "expected", "reason"), [
    ("timeout", JobState.FAILED, "timed out after 0.3 s"),
    ("cancel", JobState.CANCELLED, "cancelled on request"),
])
def test_a_handler_that_returns_after_it_was_stopped_is_not_a_success(
        stop: str, expected: JobState, reason: str) -> None:
    """ctx.cancelled() says "wrap up"; a handler that then returns normally may have done
    part of its work, so the stop's cause decides its state, not the return."""
    store = Store(MemoryTable())
    extra = {"timeout_seconds": 0.3} if stop == "timeout" else {}
    launched(store, [Job(job_id="quits", kind="quits", payload={}, estimated_seconds=30,
                         **extra)])
    w = worker(store, {})

    def quits(payload: dict[str, Any], ctx: Any) -> str:
        if stop == "cancel":
            w.cancel_requested.add(ctx.job_id)  # as a heartbeat would learn of it
        ctx.wait(30)  # returns as soon as the job is stopped
        return "half done"

    w.registry = HandlerRegistry({"quits": quits})
    w.run()
    job = store.get_job("quits")
    assert job is not None and job.state == expected and job.reason == reason
    assert job.result is None and job.error is not None
    assert "returned after it was stopped" in job.error["message"]


def test_an_unreadable_task_metadata_endpoint_is_a_clear_error() -> None:
    from dispatcher.domain.errors import LongjobsError
    from job_runner.process import task_arn

    cfg = settings.load("runner", {"LONGJOBS_TABLE": "t",
                                   "ECS_CONTAINER_METADATA_URI_V4": "http://127.0.0.1:9/v4"})
    with pytest.raises(LongjobsError, match="cannot read this task's ARN"):
        task_arn(cfg)


def test_large_results_are_written_within_the_transaction_byte_limit() -> None:
    """98 results of 60 KB are 5.9 MB: over TransactWriteItems' 4 MB (the twin refuses such a
    transaction as DynamoDB does), so the flush takes two."""
    table = MemoryTable()
    store = Store(table)
    jobs = [small(f"big-{i:02d}") for i in range(98)]
    launched(store, jobs)
    worker(store, {"ok": lambda p, ctx: "x" * 60_000}).run()
    assert {state(store, j.job_id) for j in jobs} == {JobState.SUCCEEDED}
    bundle = store.get_bundle("b1")
    assert bundle is not None and bundle.state == BundleState.DONE


@pytest.mark.parametrize("before", [None, ARN.replace("t1", "t0")],
                         ids=["a first launch", "a relaunch, the task before's ARN still on it"])
def test_a_runner_that_sees_its_pointer_before_its_bundle_is_launched_waits_for_it(
        before: str | None) -> None:
    """An emulator may show a launch's task pointer before the bundle it names is LAUNCHED
    (DynamoDB's transaction shows both at once): the runner looks again rather than exit and
    cost its jobs a rerun; a relaunch's bundle still shows the task before's ARN then."""
    store = Store(MemoryTable())
    jobs = [small("j1")]
    bundle = Bundle("b1", ["j1"])
    jobs[0].bundle_id = "b1"
    store.record([bundle], jobs)
    launch = Launch("L-b1", ["b1"], "longjobs-worker:1")
    store.begin_launch(launch, [bundle])  # LAUNCHING, no task yet
    if before is not None:
        store.table.write(Update(r.bundle_key("b1"), [Set("task_arn", before),
                                                      Set("attempt", 2)]))
    store.table.write(Update(r.task_key(ARN), [Set("bundle_id", "b1")]))  # the pointer first
    looks = 0
    real = store.bundle_for_task

    def bundle_for_task(arn: str) -> Bundle | None:
        nonlocal looks
        looks += 1
        if looks == 2:  # the rest of the launch's write lands
            store.table.write(Update(r.bundle_key("b1"), [
                Set("state", str(BundleState.LAUNCHED)), Set("task_arn", ARN),
                Set("status_key", r.bundle_status(BundleState.LAUNCHED))]))
        return real(arn)

    store.bundle_for_task = bundle_for_task  # type: ignore[method-assign]
    worker(store, {"ok": lambda payload, ctx: "done"}).run()
    assert looks >= 2 and state(store, "j1") == JobState.SUCCEEDED


class CallCounting(MemoryTable):
    """Counts the table's calls by kind: gets, batch gets, writes, transactions."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def get(self, pk: str) -> Any:
        self.calls.append("get " + pk.split("#", 1)[0])
        return super().get(pk)

    def get_many(self, pks: list[str]) -> Any:
        self.calls.append("get_many")
        return super().get_many(pks)

    def write(self, op: Any) -> Any:
        self.calls.append("write " + op.pk.split("#", 1)[0])
        return super().write(op)

    def _transact(self, ops: list[Op]) -> None:
        self.calls.append("transact")
        super()._transact(ops)


def test_a_runner_claims_its_bundle_with_one_read_and_one_write() -> None:
    """Its pointer names the bundle, and the claim's condition (LAUNCHED on this task) is the
    fence: the bundle is not read before it (the claim returns it)."""
    table = CallCounting()
    store = Store(table)
    launched(store, [small("a"), small("b")])
    table.calls.clear()
    worker(store, {"ok": lambda p, ctx: "done"}).run()
    assert table.calls[:3] == ["get TASK", "write BUNDLE", "get_many"]  # the jobs, then
    assert "get BUNDLE" not in table.calls
    assert state(store, "a") == state(store, "b") == JobState.SUCCEEDED
