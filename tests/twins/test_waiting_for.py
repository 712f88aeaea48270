"""Why a job is not running: each reason of ``waiting_for``, created on the twins and read back
through the operator query and ``jobs show --json`` / ``jobs list``; and what keeping it costs
the tick: one write a tick, however many jobs wait."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dispatcher.cli import jobs_commands
from dispatcher.cli.app import app
from dispatcher.cli.top_commands import render
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import StopCode, TaskStop
from dispatcher.ops.job_views import JobSummary
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.ports.table import Put, Record, Set, Update
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins

NO_SPOT = ("Capacity is unavailable at this time. Please try again later or in a different "
           "availability zone")


def waiting(tw: Twins, job_id: str) -> dict[str, Any]:
    """``waiting_for`` as the operator query gives it (``jobs show --json``'s shape)."""
    w = Queries(tw.store, clock=tw.clock).show(job_id).to_json()["waiting_for"]
    assert w is not None, f"{job_id} says nothing about what it waits for"
    return dict(w)


class Cli:
    """What ``jobs show`` and ``jobs list`` call, on the twins and their clock."""

    def __init__(self, tw: Twins) -> None:
        self.q = Queries(tw.store, clock=tw.clock)

    def show(self, job_id: str) -> Any:
        return self.q.show(job_id)

    def list(self, **kwargs: Any) -> list[JobSummary]:
        return self.q.list_jobs(**kwargs)

    def costs(self, job_ids: list[str]) -> dict[str, Any]:
        return self.q.costs(job_ids)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Any:
    def use(tw: Twins) -> None:
        monkeypatch.setattr(jobs_commands, "client", lambda: Cli(tw))
    return use


def test_scheduled_until_its_not_before(cli: Any) -> None:
    tw = Twins()
    tw.client().submit("k", {}, job_id="later", not_before=tw.clock() + 3600)
    tw.stages().tick.tick()
    cli(tw)
    out = CliRunner().invoke(app, ["jobs", "show", "later", "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)["waiting_for"]
    assert shown == {"reason": "scheduled", "until": "2023-11-14T23:13:20.000000Z"}
    text = CliRunner().invoke(app, ["jobs", "show", "later"]).output
    assert "scheduled until 2023-11-14 23:13:20" in text
    # The list says when too: at 80 columns in short, --wide whole.
    listed = CliRunner().invoke(app, ["jobs", "list"], env={"COLUMNS": "80"}).output
    assert "scheduled 11-14 23:13" in listed, listed
    wide = CliRunner().invoke(app, ["jobs", "list", "--wide"]).output
    assert "scheduled until 2023-11-14 23:13:20" in wide, wide


def test_kind_limit_with_its_kinds_running_jobs_and_the_list_filters_by_it(cli: Any) -> None:
    tw = Twins()
    for job_id in ("r1", "r2"):
        tw.client().submit("render", {}, job_id=job_id, estimated_seconds=3000)
    tw.client().submit("other", {}, job_id="o1", not_before=tw.clock() + 60)
    tw.stages(LONGJOBS_KIND_LIMITS="render=1", LONGJOBS_TASK_CONCURRENCY="1").tick.tick()
    assert waiting(tw, "r1")["reason"] == "starting"
    assert waiting(tw, "r2") == {"reason": "kind_limit", "kind": "render", "running": 1,
                                 "limit": 1}
    cli(tw)
    out = CliRunner().invoke(app, ["jobs", "list", "--waiting-for", "kind_limit", "--json"])
    assert out.exit_code == 0, out.output
    assert [j["job_id"] for j in json.loads(out.output)["jobs"]] == ["r2"]
    table = CliRunner().invoke(app, ["jobs", "list", "--wide"]).output
    assert "WAITING" in table and "kind_limit" in table and "scheduled" in table
    bad = CliRunner().invoke(app, ["jobs", "list", "--waiting-for", "nothing"])
    assert bad.exit_code == 2 and "unknown waiting reason" in bad.output
    # top counts the bundles by the same rule.
    snap = Top(tw.store, clock=tw.clock).snapshot()
    assert snap.waiting_for == {"kind_limit": 1, "scheduled": 1, "starting": 1}
    assert "waiting for  kind_limit 1  scheduled 1  starting 1" in _text(render(snap))


def test_a_job_held_for_its_dependencies_says_so_in_the_list_as_in_show(cli: Any) -> None:
    """The list reads index rows, which do not hold a job's dependencies: its bundle's hold
    says it waits for them, as ``jobs show`` says from the whole item."""
    tw = Twins()
    tw.client().submit("k", {}, job_id="first", estimated_seconds=3000)
    tw.client().submit("k", {}, job_id="then", depends_on=["first"])
    tw.stages().tick.tick()
    assert waiting(tw, "then")["reason"] == "dependencies"
    cli(tw)
    out = CliRunner().invoke(app, ["jobs", "list", "--waiting-for", "dependencies", "--json"])
    assert out.exit_code == 0, out.output
    assert [j["job_id"] for j in json.loads(out.output)["jobs"]] == ["then"]
    table = CliRunner().invoke(app, ["jobs", "list", "--wide"]).output
    assert "dependencies" in table and "rerun_pending" not in table
    snap = Top(tw.store, clock=tw.clock).snapshot()
    assert snap.waiting_for.get("dependencies") == 1 and "rerun_pending" not in snap.waiting_for


def _text(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=120).print(renderable)
    return out.getvalue()


def _failed_launches(tw: Twins, reasons: list[str], jobs: list[tuple[str, str]]) -> None:
    for job_id, priority in jobs:
        tw.client().submit("k", {}, job_id=job_id, priority=priority)
    tw.launcher.inject_failures(reasons)
    tw.stages(LONGJOBS_LAUNCH_BACKOFF_SECONDS="600", LONGJOBS_SPOT_FALLBACK="false").tick.tick()


def test_spot_and_launch_backoff_until_the_relaunch_with_the_last_error() -> None:
    tw = Twins()
    tw.client().submit("k", {}, job_id="spot")
    tw.launcher.inject_failures([NO_SPOT])
    tw.stages(LONGJOBS_LAUNCH_BACKOFF_SECONDS="600", LONGJOBS_SPOT_FALLBACK="false").tick.tick()
    tw.client().submit("k", {}, job_id="mem")
    tw.launcher.inject_failures(["RESOURCE:MEMORY"])
    tw.stages(LONGJOBS_LAUNCH_BACKOFF_SECONDS="600", LONGJOBS_SPOT_FALLBACK="false").tick.tick()
    spot, mem = waiting(tw, "spot"), waiting(tw, "mem")
    assert spot["reason"] == "spot_backoff" and spot["last_error"] == NO_SPOT
    assert mem["reason"] == "launch_backoff" and mem["last_error"] == "RESOURCE:MEMORY"
    for job_id, w in (("spot", spot), ("mem", mem)):
        job = tw.job(job_id)
        assert job is not None and job.bundle_id
        bundle = tw.bundle(job.bundle_id)
        assert bundle is not None
        assert w["until"] == r.iso(bundle.next_attempt_at)
        assert bundle.next_attempt_at > tw.clock()


def test_capacity_and_priority_with_the_numbers_behind_them() -> None:
    tw = Twins()
    _failed_launches(tw, ["RESOURCE:MEMORY"] * 3, [("h1", "high"), ("h2", "high"),
                                                   ("n1", "normal")])
    tw.clock.advance(700)  # past every backoff: all three due
    tw.stages(LONGJOBS_MAX_RUNNING_TASKS="1").tick.tick()
    launched = [j for j in ("h1", "h2") if waiting(tw, j)["reason"] == "starting"]
    assert len(launched) == 1  # the one slot went to a high bundle
    other = "h2" if launched == ["h1"] else "h1"
    assert waiting(tw, other) == {"reason": "capacity", "running": 1, "limit": 1}
    # A normal bundle waits behind the high one left due: that one takes the next slot.
    assert waiting(tw, "n1") == {"reason": "priority", "ahead": 1, "running": 1, "limit": 1}


def test_launching_while_its_bundles_launch_is_in_flight() -> None:
    tw = Twins()
    tw.client().submit("k", {}, job_id="j")
    # RunTask's outcome unknown: the launch stays STARTING, its bundle LAUNCHING.
    tw.launcher.inject_throttle(1)
    tw.stages(LONGJOBS_LAUNCH_RECOVERY_SECONDS="3600").tick.tick()
    w = waiting(tw, "j")
    assert w["reason"] == "launching" and w["launch_id"] and w["since"] == r.iso(tw.clock())


def test_starting_names_the_task_and_when_it_was_launched(cli: Any) -> None:
    tw = Twins()
    _, arn = tw.launched("j")
    launched_at = tw.clock()
    tw.clock.advance(30)
    assert waiting(tw, "j") == {"reason": "starting", "task_arn": arn,
                                "since": r.iso(launched_at)}
    cli(tw)
    text = CliRunner().invoke(app, ["jobs", "show", "j"]).output
    assert "starting since" in text and arn.rsplit("/", 1)[1][:12] in text.replace("\n", "")


def test_rerun_pending_after_its_task_stopped_and_while_a_retry_is_held() -> None:
    tw = Twins()
    stages = tw.stages(LONGJOBS_LAUNCH_BACKOFF_SECONDS="600")
    _, arn = tw.launched("j")
    tw.launcher.stop_task(arn, StopCode.SPOT_INTERRUPTION, "Your Spot Task was interrupted.", 0)
    tw.launcher.inject_failures(["RESOURCE:MEMORY"])  # its immediate relaunch is refused
    out = stages.reruns.on_stop(TaskStop(arn, StopCode.SPOT_INTERRUPTION,
                                         "Your Spot Task was interrupted.", 0))
    assert out.rerun == ["j"] and not out.relaunched
    job = tw.job("j")
    assert job is not None and job.state == JobState.PENDING
    assert waiting(tw, "j")["reason"] == "launch_backoff"
    tw.clock.advance(700)  # due again, a slot free: the next tick relaunches it
    w = waiting(tw, "j")
    assert w["reason"] == "rerun_pending" and w["attempt"] == 2 and w["detail"]

    # A retry held until the task that may still run its earlier run has stopped.
    tw.client().submit("k", {}, job_id="held")
    tw.stages().tick.tick()
    rec = tw.table.snapshot()[r.job_key("held")]
    rec.state, rec.status_key = "FAILED", "JOB#FAILED#0"
    rec.live_task = "arn:aws:ecs:us-east-1:000000000000:task/longjobs/old"
    tw.table.write(Put(rec))
    tw.client().retry("held")
    w = waiting(tw, "held")
    assert w["reason"] == "rerun_pending" and "longjobs/old" in w["detail"]


def test_a_job_running_or_ended_waits_for_nothing() -> None:
    tw = Twins()
    tw.launched("j")
    tw.table.write(Update(r.job_key("j"), [*_state(JobState.SUCCEEDED)]))
    assert Queries(tw.store, clock=tw.clock).show("j").to_json()["waiting_for"] is None


def _state(state: JobState) -> list[Any]:
    return [Set("state", str(state)), Set("status_key", r.job_status(state, "j"))]


# -- what keeping it costs the tick -----------------------------------------------------------

class CountingTable(MemoryTable):
    """Records the key of every item written (alone or in a transaction)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[str] = []

    def _set(self, pk: str, rec: Record | None) -> None:
        self.written.append(pk)
        super()._set(pk, rec)


def test_the_tick_writes_one_item_more_however_many_jobs_wait() -> None:
    """1,000 jobs waiting in the table at a full kind limit: one tick writes the lease (taken,
    given back) and the summary; none of the jobs nor their bundles is written to say why it
    waits, yet each one says so."""
    from dispatcher.store import Store

    tw = Twins()
    table = CountingTable()
    tw.table, tw.store = table, Store(table, clock=tw.clock)
    tw.client().submit_many([{"kind": "render", "payload": {}, "job_id": f"r{n}",
                              "estimated_seconds": 3000} for n in range(1000)])
    env = {"LONGJOBS_KIND_LIMITS": "render=1", "LONGJOBS_TASK_CONCURRENCY": "1",
           "LONGJOBS_BUNDLE_MAX_JOBS": "1"}
    for _ in range(120):  # until every job is recorded: one launched, the rest wait
        tw.stages(**env).tick.tick()
        if tw.queue_counts() == (0, 0):
            break
    assert tw.queue_counts() == (0, 0)
    assert len([j for j in tw.jobs() if j.state == JobState.PENDING]) == 1000
    tw.clock.advance(60)
    table.written.clear()
    tw.stages(**env).tick.tick()
    assert sorted(table.written) == sorted([r.LEASE_KEY, r.LEASE_KEY, r.TICK_KEY])
    q = Queries(tw.store, clock=tw.clock)
    assert len(q.list_jobs(waiting_for="kind_limit", limit=1000)) == 999
