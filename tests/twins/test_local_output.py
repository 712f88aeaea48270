"""What `longjobs local` shows: its tasks' lines as they are appended, each readable, and a
tick's decision record only when the tick changed something."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from dispatcher.local.output import Follower, QuietTicks, ReadableRecords, render, tick_said
from dispatcher.stages.rerun import StopOutcome, StopResult
from dispatcher.stages.tick import TickReport
from dispatcher.store.values import JobOutcomes
from tests.helpers import wait_for


def tick_record(report: TickReport) -> logging.LogRecord:
    record = logging.LogRecord("dispatcher.stages.tick", logging.INFO, "", 0, "tick", None,
                               None)
    record.__dict__.update(report.as_dict())
    return record


def test_an_idle_tick_is_quiet_and_a_tick_that_launched_is_shown() -> None:
    quiet = QuietTicks()
    idle = TickReport(tick_id="a")
    assert not quiet.filter(tick_record(idle))
    busy = TickReport(tick_id="b")
    busy.launch.bundles_launched = 1
    assert quiet.filter(tick_record(busy))
    admitted = TickReport(tick_id="c")
    admitted.intake.admitted = 3
    assert quiet.filter(tick_record(admitted))
    other = logging.LogRecord("dispatcher.stages.tick", logging.WARNING, "", 0, "lease lost",
                              None, None)
    assert quiet.filter(other)


def test_the_follower_echoes_each_complete_line_once_rendered(tmp_path: Path) -> None:
    path = tmp_path / "tasks.log"
    shown: list[str] = []
    follower = Follower(path, shown.append).start()
    try:
        with path.open("a") as f:
            f.write(json.dumps({"level": "WARNING", "message": "careful", "logger": "mypkg",
                                "timestamp": "2026-12-01 10:00:01,000+0000", "job_id": "j1",
                                "job_attempt": 2, "exception": "Traceback ...\nValueError"})
                    + "\nbare text\npartial")
            f.flush()
            wait_for(lambda: len(shown) == 2, 30, "two lines echoed")
            f.write(" line\n")
    finally:
        follower.stop()
    assert shown == ["10:00:01 WARNING [job j1 #2] mypkg: careful\nTraceback ...\nValueError\n",
                     "bare text\n", "partial line\n"]
    assert render('{"level":"INFO","message":"tick","service":"longjobs"}') == \
        " INFO    longjobs: tick"


def test_the_dispatchers_own_records_read_as_what_they_did() -> None:
    """Without --verbose, a tick's decision record and a task's stop are one line each that
    say what happened, as the tasks' lines are shown, not the JSON the Lambda logs."""
    busy = TickReport(tick_id="b")
    busy.intake.admitted, busy.intake.rejected = 5, 1
    busy.launch.bundles_launched = 2
    line = ReadableRecords().format(tick_record(busy))
    assert line.endswith(" INFO    longjobs: tick: admitted 5, rejected 1, launched 2 task(s)")
    assert tick_said(TickReport(tick_id="a").as_dict()) == "nothing to do"
    stop = StopOutcome(StopResult.FINISHED, "arn:aws:ecs:r:1:task/c/abc123", bundle_id="b1",
                       finished=JobOutcomes(1, 1), succeeded_before=1)
    record = logging.LogRecord("dispatcher.handlers", logging.INFO, "", 0, "task stopped",
                               None, None)
    record.__dict__.update(stop.as_dict())
    assert ReadableRecords().format(record).endswith(
        " longjobs: task abc123 stopped: finished (2 succeeded, 1 failed)")
    warning = logging.LogRecord("dispatcher.stages.launch", logging.WARNING, "", 0,
                                "launch failed", None, None)
    warning.__dict__["reason"] = "no subnets"
    assert ReadableRecords().format(warning).endswith(
        " WARNING longjobs: launch failed (reason: no subnets)")


def test_a_finished_jobs_line_says_how_it_ended() -> None:
    line = json.dumps({"level": "WARNING", "message": "job finished", "job_id": "j1",
                       "job_attempt": 1, "logger": "longjobs-runner", "state": "FAILED",
                       "error_type": "UnknownKind", "error": "nosuchkind",
                       "timestamp": "2026-12-01 10:00:01,000+0000"})
    assert render(line) == ("10:00:01 WARNING [job j1 #1] longjobs-runner: job finished "
                            "(FAILED, UnknownKind: nosuchkind)")
