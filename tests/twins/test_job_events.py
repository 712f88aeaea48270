"""Job state-change events on the twins: every transition of every job is told once, in
order, numbered 1, 2, 3... per job, whatever path made it (creation, the runner's grouped and
single writes, an operator's cancel and retry, a rerun after a task's early stop), and
nothing else is told (heartbeats, checkpoints, bundle writes)."""

from __future__ import annotations

import json
from typing import Any

from dispatcher import settings
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.errors import PermanentError
from dispatcher.domain.job_events import (
    BILLED_DETAIL_TYPE,
    JobStateChange,
    TableChange,
    TaskBilled,
    billed,
    changes,
    gaps,
)
from dispatcher.domain.job_events import events as events_of_write
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.launches import Launch
from dispatcher.domain.stops import TaskStop
from dispatcher.stages.publish import publish_changes
from dispatcher.store import Fence, JobUpdate, LaunchOutcome
from dispatcher.testing.memory_event_sink import MemoryEventSink, follow
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins

RUNNER = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_TASK_CONCURRENCY": "4",
                                  "LONGJOBS_FLUSH_SECONDS": "3600",
                                  "LONGJOBS_HEARTBEAT_SECONDS": "3600",
                                  "LONGJOBS_ASSIGN_WAIT_SECONDS": "1"})
CRASH = ("EssentialContainerExited", "Essential container in task exited", 137)


def by_job(events: list[JobStateChange]) -> dict[str, list[JobStateChange]]:
    out: dict[str, list[JobStateChange]] = {}
    for e in sorted(events, key=lambda e: (e.job_id, e.sequence)):
        out.setdefault(e.job_id, []).append(e)
    return out


def run_launched(tw: Twins, handlers: dict[str, Any]) -> None:
    """Tick once and run each launched task's runner to its end."""
    tw.stages().tick.tick()
    for b in tw.bundles():
        if b.state.value == "LAUNCHED" and b.task_arn:
            Worker(RUNNER, tw.store, HandlerRegistry(handlers), b.task_arn).run()


def test_every_path_of_a_job_tells_its_transitions_in_sequence_none_missing() -> None:
    tw = Twins()
    sink = MemoryEventSink()
    refused = follow(tw.table, sink)
    runs: dict[str, int] = {}

    def handler(payload: dict[str, Any], ctx: Any) -> str:
        runs[ctx.job_id] = runs.get(ctx.job_id, 0) + 1
        if ctx.job_id == "bad" and runs["bad"] == 1:
            raise PermanentError("no good")
        return "done"

    handlers = {"k": handler}
    client = tw.client()
    for job_id in ("ok", "bad", "cancel"):
        client.submit("k", {}, job_id=job_id, max_attempts=1)
    tw.stages().tick.tick()  # recorded: PENDING
    client.cancel("cancel")  # before it starts
    for b in tw.bundles():
        assert b.task_arn
        Worker(RUNNER, tw.store, HandlerRegistry(handlers), b.task_arn).run()
    client.retry("bad")
    client.retry("cancel")
    run_launched(tw, handlers)

    # A rerun: the task stops early while the job runs (its start written, nothing after).
    bundle_id, arn = tw.launched("crash")
    fence = Fence(bundle_id, 1, arn)
    tw.store.claim(fence)
    tw.store.apply(fence, [JobUpdate("crash", JobState.PENDING, JobState.RUNNING,
                                     attempts_delta=1)])
    tw.stages().reruns.on_stop(TaskStop(arn, *CRASH))
    run_launched(tw, handlers)

    # Two jobs on one task: its first launch buffers each start with its result (a start and
    # an end in one write: two events from one change).
    pair = [Job(job_id=j, kind="k", payload={}, bundle_id="b2") for j in ("g1", "g2")]
    tw.store.record([Bundle("b2", ["g1", "g2"])], pair)
    launch = Launch("L-b2", ["b2"], "longjobs-worker:1")
    tw.store.begin_launch(launch, [Bundle("b2", ["g1", "g2"])])
    tw.store.finish_launch(launch, LaunchOutcome(assigned=[("b2", arn + "-pair")]), {})
    Worker(RUNNER, tw.store, HandlerRegistry(handlers), arn + "-pair").run()

    told = by_job(sink.events)
    states = {job: [e.state for e in events] for job, events in told.items()}
    assert states == {
        "ok": ["PENDING", "RUNNING", "SUCCEEDED"],
        "bad": ["PENDING", "RUNNING", "FAILED", "PENDING", "RUNNING", "SUCCEEDED"],
        "cancel": ["PENDING", "CANCELLED", "PENDING", "RUNNING", "SUCCEEDED"],
        "crash": ["PENDING", "RUNNING", "PENDING", "RUNNING", "SUCCEEDED"],
        "g1": ["PENDING", "RUNNING", "SUCCEEDED"],
        "g2": ["PENDING", "RUNNING", "SUCCEEDED"],
    }
    assert gaps(sink.events) == {} and refused == []
    assert len(sink.events) == sum(len(s) for s in states.values())  # each told once
    for job_id, events in told.items():
        assert [e.sequence for e in events] == list(range(1, len(events) + 1))
        assert [e.previous_state for e in events] == [None, *[e.state for e in events[:-1]]]
        job = tw.job(job_id)
        assert job is not None and events[-1].state == job.state
        assert {e.kind for e in events} == {"k"}
    bad = told["bad"]
    assert bad[2].reason and "no good" in bad[2].reason and bad[2].attempt == 1
    assert bad[3].attempt == 0  # a retry starts the budget again
    assert told["crash"][-1].revision is not None  # the run's task definition


def job_item(seq: int | None, state: str, **extra: Any) -> dict[str, Any]:
    item = {"pk": "JOB#j", "job_id": "j", "kind": "k", "state": state, "attempts": 0,
            "updated_at": 5.0, **extra}
    return item if seq is None else {**item, "sequence": seq}


def test_writes_that_change_no_state_tell_nothing() -> None:
    running = job_item(2, "RUNNING", attempts=1)
    assert changes(running, {**running, "checkpoint": {"at": 1}}) == []
    assert changes(running, None) == []  # TTL's delete
    bundle = {"pk": "BUNDLE#b", "state": "RUNNING", "heartbeat_at": 1.0}
    assert changes(bundle, {**bundle, "heartbeat_at": 2.0}) == []
    assert changes(None, job_item(None, "PENDING")) == []  # written before sequences


def test_a_start_and_an_end_written_together_tell_both_in_order() -> None:
    told = changes(job_item(1, "PENDING"),
                   job_item(3, "SUCCEEDED", attempts=1, history=[
                       {"task_definition": "arn:aws:ecs:us-east-1:1:task-definition/w:7"}]))
    assert [(e.state, e.previous_state, e.sequence, e.attempt) for e in told] == [
        ("RUNNING", "PENDING", 2, 1), ("SUCCEEDED", "RUNNING", 3, 1)]
    assert {e.revision for e in told} == {"w:7"}


def test_a_consumer_sees_what_it_missed_and_drops_what_it_saw() -> None:
    e = [JobStateChange("j", "k", s, None, 0, None, None, n, 0.0)
         for n, s in ((1, "PENDING"), (3, "FAILED"), (3, "FAILED"))]
    assert gaps(e) == {"j": [2]}


def test_the_changes_whose_events_were_refused_are_read_again() -> None:
    sink = MemoryEventSink()
    sink.refuse("b")
    feed = [TableChange(str(n), None, {**job_item(1, "PENDING"), "pk": f"JOB#{j}",
                                       "job_id": j})
            for n, j in enumerate(("a", "b", "c"))]
    assert publish_changes(feed, sink) == ["1"]
    assert [e.job_id for e in sink.events] == ["a", "c"]
    assert sink.requests == 1  # three events, one request


def test_a_tasks_bill_is_told_once_when_it_is_settled_and_prices_its_jobs_seconds() -> None:
    """The pointer write that sets a task's cost tells a "Task Billed" event, once (a later
    write to the settled pointer, or any other item, tells none); a job's end event tells its
    seconds on each task, so its dollars are theirs times each task's rate."""
    bill = {"cpu": 1024, "memory": 2048, "started_at": 10.0, "stopped_at": 130.0,
            "capacity": "FARGATE_SPOT", "architecture": "X86_64"}
    pointer = {"pk": "TASK#arn:t1", "bundle_id": "b1", "updated_at": 131.0}
    settled = {**pointer, "bill": bill, "cost": 0.006, "job_seconds": 100.0}
    (told,) = events_of_write(pointer, settled)
    assert isinstance(told, TaskBilled) and told.detail_type == BILLED_DETAIL_TYPE
    assert (told.task_arn, told.cost, told.rate, told.at) == ("arn:t1", 0.006, 0.00006, 130.0)
    assert told.bill == bill and told.event_id == "arn:t1#billed"
    assert events_of_write(settled, {**settled, "updated_at": 200.0}) == []  # settled before
    assert events_of_write(None, pointer) == [] and billed(None, job_item(1, "PENDING")) is None
    assert billed(None, {**settled, "job_seconds": 0}) is not None  # ran no job: rate 0
    history = [{"task_arn": "arn:t0", "started_at": 0.0, "stopped_at": 30.0},
               {"task_arn": "arn:t1", "started_at": 40.0, "ended_at": 60.0}]
    (end,) = changes(job_item(2, "RUNNING"), job_item(3, "SUCCEEDED", history=history))
    assert end.task_seconds == {"arn:t0": 30.0, "arn:t1": 20.0} and end.run_seconds == 50.0
    assert json.loads(told.line())["detail-type"] == BILLED_DETAIL_TYPE
