"""``longjobs top``, the live operator view: the snapshot on the twins, its ``--once`` rendering
through typer's runner and its one-line errors (its run against moto through the real adapters is in
``tests/integration/test_top_aws.py``).

The twins' world is built through the production paths (producer, ticks on the real stages, the
runner's fenced writes) with one fake clock, so every figure of the snapshot is known exactly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dispatcher.cli import top_commands as top_cli
from dispatcher.cli.app import app
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import KindRow, QueueRow, Top
from dispatcher.ports.queue import Backlog
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.wiring import pipeline
from tests.twins import Twins, finish_as_runner

runner = CliRunner()
T0 = 1_700_000_000.0


def _job(job_id: str, kind: str = "resize") -> str:
    """A message as a producer sends it (no estimate: the job runs alone)."""
    return json.dumps({"schema_version": 1, "job_id": job_id, "kind": kind, "payload": {}})


class World:
    """The twins with a queue per priority and a dead-letter queue, a kind limit (report=1),
    and a launch backoff long enough that a refused bundle stays PENDING."""

    def __init__(self, twins: Twins) -> None:
        self.twins = twins
        self.high = MemoryQueue(clock=twins.clock)
        self.low = MemoryQueue(clock=twins.clock)
        self.dlq = MemoryQueue(clock=twins.clock)
        cfg = twins.config(LONGJOBS_KIND_LIMITS="report=1",
                           LONGJOBS_LAUNCH_BACKOFF_SECONDS="3600")
        self.stages = pipeline.build(cfg, queue=twins.queue, store=twins.store,
                                   launcher=twins.launcher, clock=twins.clock,
                                   pacer=LaunchPacer.simulated(),
                                   priority_queues={Priority.HIGH: self.high,
                                                    Priority.LOW: self.low})
        self.kind_limits = dict(cfg.kind_limits)

    def top(self, window_seconds: float = 300.0) -> Top:
        return Top(self.twins.store, queue=self.twins.queue, dead_letters=self.dlq,
                   clock=self.twins.clock, queues=self.stages.queues,
                   kind_limits=self.kind_limits, window_seconds=window_seconds)

    def populate(self) -> None:
        """Two ticks 10 s apart, a deploy between them, then messages left in the high and low
        queues and one dead letter; the clock ends 40 s after the first tick."""
        tw, store = self.twins, self.twins.store
        tw.queue.send([(f"e{n}", _job(j, kind)) for n, (j, kind) in enumerate(
            [("ok-1", "resize"), ("bad-1", "resize"), ("run-1", "resize"),
             ("rep-1", "report"), ("rep-2", "report")])] + [("bad", "{not json")])
        self.stages.tick.tick()  # 4 launched on revision 1; rep-2 waits (report=1)
        finish_as_runner(store, "ok-1", JobState.SUCCEEDED)
        finish_as_runner(store, "bad-1", JobState.FAILED)
        finish_as_runner(store, "run-1", JobState.RUNNING)
        tw.clock.advance(10)
        tw.launcher.register_task_definition()  # a deploy: revision 2
        tw.launcher.inject_failures(["RESOURCE:MEMORY"])
        tw.queue.send([("n1", _job("new-1")), ("n2", _job("new-2"))])
        self.stages.tick.tick()  # one on revision 2, one refused: PENDING, backing off
        self.high.send([("h1", _job("high-1")), ("h2", _job("high-2"))])
        self.low.send([("l1", _job("low-1"))])
        self.dlq.send([("d1", _job("dead-1"))])
        tw.clock.advance(30)


@pytest.fixture
def world(twins: Twins) -> World:
    w = World(twins)
    w.populate()
    return w


def test_snapshot_on_the_twins(world: World) -> None:
    snap = world.top().snapshot()
    assert snap.at == T0 + 40
    assert snap.queues == [QueueRow("high", Backlog(2, 0, 0)), QueueRow("normal",
                                                                        Backlog(0, 0, 0)),
                           QueueRow("low", Backlog(1, 0, 0))]
    assert snap.dead_letters == 1
    assert snap.bundles == {"RECORDING": 0, "PENDING": 2, "LAUNCHING": 0, "LAUNCHED": 2,
                            "RUNNING": 1}
    assert snap.tasks_by_revision == {"longjobs-worker:1": {"LAUNCHED": 1, "RUNNING": 1},
                                      "longjobs-worker:2": {"LAUNCHED": 1}}
    assert snap.running_tasks == 3
    # Seven jobs admitted in the window, by the state they are in now; one malformed message.
    assert snap.admitted == {"PENDING": 4, "RUNNING": 1, "SUCCEEDED": 1, "FAILED": 1,
                             "CANCELLED": 0}
    assert snap.admitted_total == 7 and snap.rejected == 1
    assert snap.launch_failures == {"RESOURCE:MEMORY": 1}
    assert snap.kinds == [KindRow("report", 1, 1)] and snap.kinds[0].at_limit
    # rep-2 has waited since the first tick (its kind at its limit); the refused bundle since
    # the second.
    assert snap.waiting_bundles == 2 and snap.dispatch_lag_seconds == 40
    assert json.loads(json.dumps(snap.to_json()))["admitted"] == {
        "jobs": 7, "by_state": snap.admitted, "rejected": 1}


def test_kinds_against_the_limits_the_tick_used_not_the_shells(world: World) -> None:
    """A client whose shell names no kind limit (local mode exports none) sees the kinds
    against the limits the last tick decided by."""
    world.kind_limits = {}
    assert world.top().snapshot().kinds == [KindRow("report", 1, 1)]
    world.kind_limits = {"report": 5, "other": 2}  # the shell's, stale: the tick's win
    assert world.top().snapshot().kinds == [KindRow("report", 1, 1)]


def test_the_window_bounds_recent_activity(world: World) -> None:
    world.twins.clock.advance(400)
    snap = world.top(window_seconds=300).snapshot()
    assert snap.admitted_total == 0 and snap.rejected == 0
    assert snap.launch_failures == {}
    # Load is not history: what runs and waits is shown whatever the window.
    assert snap.running_tasks == 3 and snap.bundles["PENDING"] == 2
    assert snap.dispatch_lag_seconds == 440
    assert world.top(window_seconds=3600).snapshot().admitted_total == 7
    # A span reaching before 1970 means "everything", not a date error.
    assert world.top(window_seconds=1e12).snapshot().admitted_total == 7
    assert len(Queries(world.twins.store, clock=world.twins.clock).list_jobs(
        since_seconds=1e12, limit=100)) == 8


def test_a_scheduled_bundle_waits_from_its_time_not_its_recording(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="tomorrow", not_before=twins.clock() + 86_400)
    stages = twins.stages()
    stages.tick.tick()  # recorded in a bundle due tomorrow
    top = Top(twins.store, queue=twins.queue, clock=twins.clock, queues=stages.queues)
    assert top.snapshot().waiting_bundles == 0  # not due yet: not waiting
    twins.clock.advance(86_405)  # due 5 s ago, no tick since
    snap = top.snapshot()
    assert snap.waiting_bundles == 1 and snap.dispatch_lag_seconds == pytest.approx(5)


def test_levels_without_a_queue_of_their_own(twins: Twins) -> None:
    """Without LONGJOBS_HIGH/LOW_QUEUE_URL every level is served by the normal queue: only its
    backlog is shown (once), and an empty table gives an empty frame, not an error."""
    stages = twins.stages()
    twins.queue.send([("a", _job("a"))])
    snap = Top(twins.store, queue=twins.queue, clock=twins.clock,
               queues=stages.queues).snapshot()
    assert snap.queues == [QueueRow("high", None), QueueRow("normal", Backlog(1, 0, 0)),
                           QueueRow("low", None)]
    assert snap.dead_letters is None and snap.kinds == [] and snap.running_tasks == 0
    assert snap.dispatch_lag_seconds is None and snap.waiting_bundles == 0
    assert top_cli.render(snap) is not None


def _cli(*args: str, code: int = 0) -> Any:
    result = runner.invoke(app, ["top", *args])
    assert result.exit_code == code, (result.output, result.exception)
    return result


def test_once_renders_one_frame_through_the_cli(world: World,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    def source(window_seconds: float) -> Top:
        seen.append(window_seconds)
        return world.top(window_seconds)

    monkeypatch.setattr(top_cli, "source", source)
    out = _cli("--once", "--window", "10m").stdout
    assert seen == [600.0]
    for text in ("longjobs top  2023-11-14 22:14:00 UTC", "high", "low", "dead letters 1",
                 "tasks: 3 running",
                 "longjobs-worker:2", "PENDING 2", "jobs admitted in the last 10m: 7",
                 "1 rejected", "SUCCEEDED", "RESOURCE:MEMORY=1", "report",
                 "2 bundle(s) waiting for a launch, the longest for 40s"):
        assert text in out, (text, out)
    assert "Ctrl-C" not in out  # one frame: no refresh hint
    as_json = json.loads(_cli("--json", "--window", "5m").stdout)
    assert as_json["queues"]["high"] == {"visible": 2, "in_flight": 0, "delayed": 0}
    assert as_json["running_tasks"] == 3 and as_json["dispatch_lag_seconds"] == 40
    assert as_json["kinds"] == [{"kind": "report", "running": 1, "limit": 1}]


def test_live_view_refreshes_until_interrupted(world: World,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --once: a frame, then one per interval (the wait is replaced: the second one is
    Ctrl-C), and a clean exit."""
    view = world.top()
    snapshots = 0
    real = view.snapshot

    def counted() -> Any:
        nonlocal snapshots
        snapshots += 1
        return real()

    waits: list[float] = []

    def wait(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(view, "snapshot", counted)
    monkeypatch.setattr(top_cli, "source", lambda window_seconds: view)
    monkeypatch.setattr(top_cli, "sleep", wait)
    # On a terminal (the test's stdout is not one).
    monkeypatch.setattr(top_cli, "Console", lambda: Console(force_terminal=True, width=120))
    result = _cli("--interval", "0.5")
    assert waits == [0.5, 0.5] and snapshots == 2
    assert "every 0.5s, Ctrl-C quits" in result.stdout


def test_off_a_terminal_top_prints_one_frame_at_once_and_says_so(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """``longjobs top -n 1 > file``: a frame in the file at once, not a live view that a file
    cannot show, and a line on stderr saying why it did not refresh."""
    monkeypatch.setattr(top_cli, "source", lambda window_seconds: world.top())
    monkeypatch.setattr(top_cli, "sleep", lambda seconds: pytest.fail("it waited"))
    result = _cli("-n", "1")
    assert "longjobs top  2023-11-14 22:14:00 UTC" in result.stdout
    assert "Ctrl-C" not in result.stdout
    assert "stdout is not a terminal, so one frame was printed" in result.stderr


def test_errors_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    result = _cli("--once", "--window", "soon", code=2)
    assert result.stderr == ("error: --window 'soon' is not a duration like 1m, 5m or 1h "
                             "(at most 100 years)\n")
    monkeypatch.setenv("LONGJOBS_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/1/q")
    monkeypatch.delenv("LONGJOBS_TABLE", raising=False)
    result = _cli("--once", code=2)
    assert result.stderr.startswith("error: invalid configuration: LONGJOBS_TABLE is not set")
    assert result.stderr.count("\n") == 1 and result.stdout == ""
