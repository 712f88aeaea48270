"""What ``jobs show`` and ``jobs logs`` give an operator: a traceback as text, payloads and
results as JSON values, a cancellation without an error, each retry a visible boundary in the
attempt history; and, in local mode, one job's lines from the shared task output file."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dispatcher.cli import job_detail_view, jobs_commands
from dispatcher.cli.app import app
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.errors import Interrupted
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.launches import Launch
from dispatcher.files.task_output import TaskOutputLogs
from dispatcher.ops.queries import Queries
from dispatcher.ports.table import Set, Update
from dispatcher.store import LaunchOutcome, Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from job_runner.outcome import raised
from tests.twins import Twins
from tests.twins.test_worker import ARN, launched, worker

T2 = ARN.replace("/t1", "/t2")


def fail(payload: dict[str, Any], ctx: Any) -> None:
    raise ValueError(f"bad row {payload['row']}")


def rendered(queries: Queries, job_id: str) -> str:
    out = io.StringIO()
    job_detail_view.render_detail(queries.show(job_id), Console(file=out, width=100))
    return out.getvalue()


def relaunch(store: Store, job_id: str, arn: str) -> None:
    """Launch the bundle a `jobs retry` made, on ``arn``."""
    job = store.get_job(job_id)
    assert job is not None and job.bundle_id
    bundle = store.get_bundle(job.bundle_id)
    assert bundle is not None
    launch = Launch(f"L-{arn[-2:]}", [bundle.bundle_id], "longjobs-worker:2")
    store.begin_launch(launch, [bundle])
    store.finish_launch(launch, LaunchOutcome(assigned=[(bundle.bundle_id, arn)]), {})


def test_show_renders_the_traceback_as_text_and_values_as_json() -> None:
    store = Store(MemoryTable())
    launched(store, [Job("bad", "f", {"row": 7}, max_attempts=1, estimated_seconds=1),
                     Job("ok", "ok", {"row": 8}, estimated_seconds=1)])
    worker(store, {"f": fail, "ok": lambda p, ctx: {"rows": p["row"]}}).run()
    queries = Queries(store)
    text = rendered(queries, "bad")
    assert "\nTraceback (most recent call last):\n" in text
    assert 'raise ValueError(f"bad row {payload[\'row\']}")' in text
    assert "ValueError: bad row 7" in text and "\\n" not in text and '"traceback"' not in text
    shown = queries.show("ok").to_json()
    assert shown["payload"] == {"row": 8} and shown["result"] == {"rows": 8}
    assert json.loads(json.dumps(shown))["result"]["rows"] == 8
    assert queries.show("bad").to_json()["payload"] == {"row": 7}


def test_a_cancelled_job_shows_its_reason_and_no_traceback() -> None:
    # The runner records how the stop reached the handler (Interrupted, with its traceback);
    # show leaves it out: the reason says the job was cancelled.
    job = Job("c", "k", {})
    outcome = raised(job, Interrupted("cancelled", job_id="c"), attempts=1, retry_any=True,
                     cancel_reason="cancelled")
    assert outcome.target == JobState.CANCELLED and outcome.error is not None
    store = Store(MemoryTable())
    store.record([Bundle("b", ["c"])], [Job("c", "k", {}, bundle_id="b")])
    assert store.cancel("c").state == JobState.CANCELLED
    store.table.write(Update(r.job_key("c"), [Set("error", {
        "type": "Interrupted", "message": "cancelled", "traceback": "Traceback ...\n"})]))
    queries = Queries(store)
    assert queries.show("c").error is None
    text = rendered(queries, "c")
    assert "Traceback" not in text and "Interrupted" not in text and "CANCELLED" in text


def test_each_retry_is_a_boundary_in_the_attempt_history() -> None:
    store = Store(MemoryTable())
    launched(store, [Job("j", "f", {"row": 1}, max_attempts=1, estimated_seconds=1)])
    worker(store, {"f": fail}).run()
    store.retry("j")
    relaunch(store, "j", T2)
    w = worker(store, {"f": fail})
    w.arn = T2
    w.run()
    history = Queries(store).show("j").history
    assert [(a.attempt, a.task_arn, a.retry) for a in history] == [
        (1, ARN, None), (None, None, "retried on request after FAILED"), (1, T2, None)]
    text = rendered(Queries(store), "j")
    assert text.index("attempt 1: task t1") < text.index(
        "── retried on request after FAILED") < text.index("attempt 1: task t2")


def test_local_mode_reads_one_jobs_lines_from_the_shared_output_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(MemoryTable())
    launched(store, [Job("x", "k", {}, estimated_seconds=1), Job("y", "k", {},
                                                                  estimated_seconds=1)])
    history = [{"attempt": 1, "task_arn": ARN, "task_definition": "longjobs-worker:1"},
               {"attempt": 2, "task_arn": T2, "task_definition": "longjobs-worker:1"}]
    store.table.write(Update(r.job_key("x"), [Set("history", history)]))

    def line(job: str, message: str, attempt: int, task: str) -> str:
        return json.dumps({"level": "INFO", "message": message, "logger": "mypkg",
                           "timestamp": "2026-12-01 10:00:00,000+0000", "task_arn": task,
                           "job_id": job, "job_attempt": attempt}) + "\n"

    output = tmp_path / "tasks.log"
    output.write_text("".join([
        "a bare line of some task\n", line("x", "x one", 1, ARN), line("y", "y one", 1, ARN),
        line("x", "x two", 1, ARN), line("x", "x three", 2, T2), line("y", "y two", 1, T2),
        line("x", "x four", 2, T2), line("x", "still being writ", 2, T2).rstrip("\n")]))
    queries = Queries(store, logs=TaskOutputLogs(output))
    read = queries.job_log("x")
    assert [(run.attempt, ln.message) for run, ln in read.lines] == [
        (1, "x one"), (1, "x two"), (2, "x three"), (2, "x four")]
    assert [ln.message for _, ln in queries.job_log("x", attempt=2).lines] == [
        "x three", "x four"]
    again = queries.job_log("x", cursor=read.cursor)  # --follow: nothing seen twice
    assert again.lines == [] and not again.finished

    class Client:
        def queries(self, **_: bool) -> Queries:
            return queries

    monkeypatch.setattr(jobs_commands, "client", Client)
    out = CliRunner().invoke(app, ["jobs", "logs", "x"])
    assert out.exit_code == 0, out.output
    shown = out.output.splitlines()
    assert shown[0] == "── attempt 1 on task t1 ──" and shown[3] == "── attempt 2 on task t2 ──"
    assert [s.split(" mypkg: ")[1] for s in shown if " mypkg: " in s] == [
        "x one", "x two", "x three", "x four"]
    as_json = CliRunner().invoke(app, ["jobs", "logs", "x", "--attempt", "1", "--json"])
    assert [ln["message"] for ln in json.loads(as_json.output)["lines"]] == ["x one", "x two"]


def test_follow_polls_until_the_job_has_ended_and_returns_each_line_once(
        twins: Twins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "tasks.log"
    monkeypatch.setenv("LONGJOBS_LOCAL_LOG", str(output))
    _, task = twins.launched("f")
    twins.store.table.write(Update(r.job_key("f"), [Set("history", [
        {"attempt": 1, "task_arn": task, "task_definition": "longjobs-worker:1"}])]))

    def write(message: str) -> None:
        with output.open("a") as f:
            f.write(json.dumps({"level": "INFO", "message": message, "logger": "mypkg",
                                "timestamp": "2026-12-01 10:00:00,000+0000",
                                "task_arn": task, "job_id": "f", "job_attempt": 1}) + "\n")

    write("first")
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        write(f"poll {len(polls)}")
        if len(polls) == 3:
            twins.store.table.write(Update(r.job_key("f"), [
                Set("state", str(JobState.SUCCEEDED))]))

    reads = list(twins.client().follow_logs("f", poll_seconds=5, sleep=sleep))
    assert polls == [5, 5, 5]
    assert [[ln.message for _, ln in read.lines] for read in reads] == [
        ["first"], ["poll 1"], ["poll 2"], ["poll 3"]]


def test_show_names_the_bulk_actions_that_acted_on_a_job() -> None:
    store = Store(MemoryTable())
    launched(store, [Job("j", "f", {"row": 1}, max_attempts=1, estimated_seconds=1)])
    worker(store, {"f": fail}).run()
    store.retry("j", by="bulk-0123456789ab")
    detail = Queries(store).show("j")
    assert detail.bulk_ids == ["bulk-0123456789ab"]
    assert detail.to_json()["bulk_ids"] == ["bulk-0123456789ab"]
    assert re.search(r"bulk actions +bulk-0123456789ab", rendered(Queries(store), "j"))


def test_every_stop_shown_names_its_cause_or_says_none_was_given() -> None:
    said = job_detail_view.stop_said
    assert said("SpotInterruption", 143, "infrastructure", None) == \
        "stop code SpotInterruption  exit 143  class infrastructure"
    assert said(None, None, "infrastructure", None) == (
        "no stop code given by ECS (nor who stopped it)  no exit code  class infrastructure")
    assert said(None, None, None, "SUCCEEDED") == \
        "its runner ended it; the task went on (no stop of its own)"
    assert said(None, None, None, None) == "no stop of its task seen yet"
    assert "-" not in said(None, None, None, None) + said(None, None, "application", None)


def test_the_log_stream_line_stays_whole_at_80_columns() -> None:
    """The group and stream a job's lines are in are copied, not read: one line, however
    narrow the terminal."""
    from dispatcher.testing.memory_logs import MemoryJobLogs

    store = Store(MemoryTable())
    launched(store, [Job("j", "ok", {}, estimated_seconds=1)])
    worker(store, {"ok": lambda p, ctx: 1}).run()
    logs = MemoryJobLogs(group="/ecs/longjobs-production-eu-west-1-a-stack-with-a-long-name/worker")
    queries = Queries(store, logs=logs)
    out = io.StringIO()
    job_detail_view.render_detail(queries.show("j"), Console(file=out, width=80))
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("log: ")]
    assert len(line) > 80 and line.endswith(ARN.rsplit("/", 1)[-1]), line
