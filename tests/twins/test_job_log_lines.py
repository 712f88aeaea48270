"""A job's own log lines: the real runner in-process on the table twin, its output captured as
CloudWatch would hold it (one stream per task), read back through the log twin by job id."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

from dispatcher import settings
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.job_logs import parse_line
from dispatcher.store import Store
from dispatcher.testing.memory_logs import MemoryJobLogs
from dispatcher.testing.memory_table import MemoryTable
from job_runner import worker as worker_module
from job_runner.joblog import HandlerOutput, running
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins.test_worker import ARN, launched

JOBS = 1000
CONCURRENCY = 20
CFG = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "3600",
                               "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                               "LONGJOBS_ASSIGN_WAIT_SECONDS": "1",
                               "LONGJOBS_TASK_CONCURRENCY": str(CONCURRENCY)})
mine = logging.getLogger("mypkg.jobs")


def threaded(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    n = payload["n"]
    mine.info("one of %s", n)
    time.sleep(0.001)  # let the other 19 slots write in between
    print(f"two of {n}")
    logging.getLogger("mypkg.other").warning("three of %s", n)
    return {}


async def awaited(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    n = payload["n"]
    print("one of", n)
    await asyncio.sleep(0.001)
    mine.info("two of %s", n)
    await asyncio.sleep(0)
    sys.stderr.write(f"three of {n}\n")
    return {}


def failing(payload: dict[str, Any], ctx: Any) -> None:
    try:
        raise ValueError("inner")
    except ValueError:
        mine.exception("caught it")
    mine.debug("below the level")
    print("no newline at the end", end="")
    raise RuntimeError("boom")


@contextlib.contextmanager
def runner_output() -> Iterator[io.StringIO]:
    """The runner's stdout and stderr as one text: its JSON handler and the handlers' lines.
    (Installed inside the test: pytest puts its own sys.stdout back between phases.)"""
    buf = io.StringIO()
    handler = worker_module.log.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    before = handler.setStream(buf)
    try:
        with HandlerOutput(handler, CFG.job_log_level):
            yield buf
    finally:
        handler.setStream(before)


def run_bundle(jobs: list[Job], handlers: dict[str, Any]) -> MemoryJobLogs:
    store = Store(MemoryTable())
    launched(store, jobs)
    with runner_output() as buf:
        assert Worker(CFG, store, HandlerRegistry(handlers), ARN).run() == 0
    assert all(store.get_job(j.job_id).state != JobState.RUNNING for j in jobs)  # type: ignore
    logs = MemoryJobLogs()
    logs.put(ARN, buf.getvalue().splitlines())
    return logs


def test_each_of_1000_jobs_at_20_at_once_reads_exactly_its_own_three_lines() -> None:
    jobs = [Job(job_id=f"j{n:04d}", kind="a" if n % 2 else "t", payload={"n": n},
                estimated_seconds=0.01) for n in range(JOBS)]
    logs = run_bundle(jobs, {"t": threaded, "a": awaited})
    stream = logs.locate(ARN, None)
    assert stream is not None and stream.name == f"worker/worker/{ARN.rsplit('/', 1)[-1]}"
    tagged = [parse_line(t, "") for t in logs.streams[stream.name]]
    assert sum(1 for t in tagged if t is not None) == JOBS * 4  # 3 lines + "job finished"
    for n in range(JOBS):
        lines = logs.read(stream, f"j{n:04d}")
        mine_only = [(ln.logger, ln.level, ln.message) for ln in lines
                     if ln.logger != "longjobs-runner"]
        if n % 2:
            assert mine_only == [("stdout", "INFO", f"one of {n}"),
                                 ("mypkg.jobs", "INFO", f"two of {n}"),
                                 ("stderr", "WARNING", f"three of {n}")]
        else:
            assert mine_only == [("mypkg.jobs", "INFO", f"one of {n}"),
                                 ("stdout", "INFO", f"two of {n}"),
                                 ("mypkg.other", "WARNING", f"three of {n}")]
        assert [ln.message for ln in lines if ln.logger == "longjobs-runner"] == [
            "job finished (SUCCEEDED)"]
        assert {ln.attempt for ln in lines} == {1}
        assert {ln.task_arn for ln in lines} == {ARN}
    assert logs.reads == JOBS


def test_exceptions_levels_and_an_unterminated_print() -> None:
    logs = run_bundle([Job(job_id="x", kind="f", payload={}, estimated_seconds=0.01)],
                      {"f": failing})
    stream = logs.locate(ARN, None)
    assert stream is not None
    lines = [ln for ln in logs.read(stream, "x") if ln.logger != "longjobs-runner"]
    assert [(ln.level, ln.message) for ln in lines] == [
        ("ERROR", "caught it"), ("INFO", "no newline at the end")]
    assert lines[0].exception is not None and "ValueError: inner" in lines[0].exception


def test_writes_outside_a_job_go_to_the_stream_untouched() -> None:
    real, output = io.StringIO(), io.StringIO()
    before = sys.stdout
    sys.stdout = real
    try:
        sink = logging.StreamHandler(output)
        sink.setFormatter(worker_module.log.registered_formatter)
        with HandlerOutput(sink):
            print("not a job's")
            with running("k", 2):
                print("a job's")
    finally:
        sys.stdout = before
    assert real.getvalue() == "not a job's\n"
    (line,) = output.getvalue().splitlines()
    assert json.loads(line)["job_id"] == "k" and json.loads(line)["job_attempt"] == 2


def test_a_timed_out_jobs_last_line_says_so_first() -> None:
    """``jobs logs`` of a job past its limit ends with the reason before the error's words,
    so a line cut at the terminal's width still says it timed out."""
    def slow(payload: dict[str, Any], ctx: Any) -> None:
        ctx.wait()  # until its timeout cancels it
        ctx.raise_if_cancelled()

    logs = run_bundle([Job(job_id="to-1", kind="s", payload={}, estimated_seconds=0.01,
                           timeout_seconds=0.2)], {"s": slow})
    stream = logs.locate(ARN, None)
    assert stream is not None
    (last,) = [ln.message for ln in logs.read(stream, "to-1") if ln.logger == "longjobs-runner"]
    assert last.startswith("job finished (FAILED: timed out after 0.2 s, Interrupted"), last
