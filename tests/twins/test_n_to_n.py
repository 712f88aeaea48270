"""n_to_n dependencies between arrays on the twins: child i of B starts only after child i of A
ended as B asks; one that ended otherwise cancels only its counterpart; an A that is no array
of B's size is refused at submit, and cancels B's parent when only the dispatcher sees it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from dispatcher.cli.app import app
from dispatcher.domain import arrays, dependencies
from dispatcher.domain.arrays import Tally
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.dependencies import Dependency, Requires
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.message import JobMessage
from dispatcher.ops.queries import Queries
from dispatcher.ports.table import Put, Record
from dispatcher.stages.n_to_n import frontiers
from dispatcher.store import Fence, JobUpdate, Store, codec
from dispatcher.store.array_jobs import OpenArray
from dispatcher.store.array_retry import CHILD_PAGE
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins

SIZE = 30


class Runs:
    """Launched tasks run as runners would, each job for ``seconds(job)`` of the fake clock
    (heartbeating meanwhile) and ending as ``outcome(job)``; when each started and ended."""

    def __init__(self, t: Twins, seconds: Callable[[Job], float],
                 outcome: Callable[[Job], JobState] = lambda job: JobState.SUCCEEDED) -> None:
        self.t, self.seconds, self.outcome = t, seconds, outcome
        self.started: dict[str, float] = {}
        self.ended: dict[str, float] = {}

    def step(self) -> None:
        store, now = self.t.store, self.t.clock()
        for b in self.t.bundles():
            if b.state not in (BundleState.LAUNCHED, BundleState.RUNNING) or not b.task_arn:
                continue
            fence = Fence(b.bundle_id, b.attempt, b.task_arn)
            if b.state == BundleState.LAUNCHED:
                store.claim(fence)
                for job in store.get_jobs(b.job_ids):
                    if job.state == JobState.PENDING:
                        store.apply(fence, [JobUpdate(job.job_id, JobState.PENDING,
                                                      JobState.RUNNING, attempts_delta=1)])
                        self.started[job.job_id] = now
                continue
            store.heartbeat(fence)
            running = [j for j in store.get_jobs(b.job_ids) if j.state == JobState.RUNNING]
            if running and all(self.started[j.job_id] + self.seconds(j) <= now
                               for j in running):
                store.apply(fence, [JobUpdate(j.job_id, JobState.RUNNING, self.outcome(j))
                                    for j in running], bundle_to=BundleState.DONE)
                self.ended.update(dict.fromkeys((j.job_id for j in running), now))

    def drive(self, ticks: int) -> None:
        stages = self.t.stages(LONGJOBS_MAX_RUNNING_TASKS="40")
        for _ in range(ticks):
            stages.tick.tick()
            self.step()
            self.t.clock.advance(60)


def _minutes(job: Job) -> float:
    """A's children take 1 to 7 minutes, in no order of their index; B's one."""
    return 60.0 * (1 + (job.array_index or 0) * 5 % 7) if job.array_parent == "a" else 60.0


def _state(t: Twins, job_id: str) -> Job:
    job = t.job(job_id)
    assert job is not None
    return job


def _b(i: int) -> str:
    return arrays.child_id("b", i)


def _a(i: int) -> str:
    return arrays.child_id("a", i)


def test_each_child_starts_only_after_its_element_ended(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=SIZE)
    client.submit("k", {}, job_id="b", array_size=SIZE,
                  depends_on=[{"job_id": "a", "n_to_n": True}])
    runs = Runs(twins, _minutes)
    runs.drive(40)
    for i in range(SIZE):
        assert _state(twins, _b(i)).state == JobState.SUCCEEDED
        assert runs.started[_b(i)] >= runs.ended[_a(i)], i
    # Element-wise, not the whole array: B's first children ran while A's last still ran.
    assert min(runs.started[_b(i)] for i in range(SIZE)) < \
        max(runs.ended[_a(i)] for i in range(SIZE))
    assert len(runs.started) == 2 * SIZE
    for parent in ("a", "b"):
        assert _state(twins, parent).state == JobState.SUCCEEDED
    # The parent keeps its n_to_n dependency: its children are offered by it.
    assert _state(twins, "b").depends_on == [
        {"job_id": "a", "condition": "succeeded", "n_to_n": True}]


def test_a_failed_element_cancels_only_its_counterpart(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=SIZE, max_attempts=1, tolerated_failures=1)
    client.submit("k", {}, job_id="b", array_size=SIZE, tolerated_failures=1,
                  depends_on=[{"job_id": "a", "n_to_n": True}])
    runs = Runs(twins, _minutes,
                lambda job: JobState.FAILED if job.job_id == _a(7) else JobState.SUCCEEDED)
    runs.drive(40)
    cancelled = _state(twins, _b(7))
    assert cancelled.state == JobState.CANCELLED and _b(7) not in runs.started
    assert cancelled.reason == f"its dependency {_a(7)} ended FAILED; it needed succeeded"
    others = [_state(twins, _b(i)) for i in range(SIZE) if i != 7]
    assert [j.state for j in others] == [JobState.SUCCEEDED] * (SIZE - 1)
    assert all(runs.started[j.job_id] >= runs.ended[_a(j.array_index or 0)] for j in others)
    assert _state(twins, "b").state == JobState.SUCCEEDED  # one failure tolerated


def test_a_condition_failed_runs_only_the_counterparts_of_failures(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=10, max_attempts=1, tolerated_failures=2)
    client.submit("k", {}, job_id="b", array_size=10, tolerated_failures="100%",
                  depends_on=[{"job_id": "a", "condition": "failed", "n_to_n": True}])
    runs = Runs(twins, _minutes,
                lambda job: JobState.FAILED if job.job_id in (_a(2), _a(5)) else
                JobState.SUCCEEDED)
    runs.drive(25)
    ran = sorted(j for j in runs.started if j.startswith("b:"))
    assert ran == [_b(2), _b(5)]
    states = [_state(twins, _b(i)).state for i in range(10)]
    assert states.count(JobState.CANCELLED) == 8 and states.count(JobState.SUCCEEDED) == 2


@pytest.mark.parametrize(("batch", "says"), [
    ([{"job_id": "a"}, {"job_id": "b", "array_size": 3}], "'a' is not an array job"),
    ([{"job_id": "a", "array_size": 4}, {"job_id": "b", "array_size": 3}],
     "'a' has 4 children, this one 3"),
    ([{"job_id": "a", "array_size": 3}, {"job_id": "b"}], "n_to_n dependency .* is for array"),
])
def test_an_element_wise_dependency_on_no_array_of_its_size_is_refused_at_submit(
        twins: Twins, batch: list[dict[str, object]], says: str) -> None:
    batch[-1]["depends_on"] = [{"job_id": "a", "n_to_n": True}]
    with pytest.raises(InvalidMessage, match=says):
        twins.client().submit_many([{"kind": "k", "payload": {}, **spec} for spec in batch])
    assert twins.queue_counts() == (0, 0)


def test_a_recorded_array_of_another_size_is_refused_at_submit(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="a", array_size=4)
    twins.stages().tick.tick()  # recorded; a new client has not sent it
    fresh = twins.client()
    with pytest.raises(InvalidMessage, match="'a' has 4 children, this one 5"):
        fresh.submit("k", {}, job_id="b", array_size=5,
                     depends_on=[{"job_id": "a", "n_to_n": True}])
    fresh.submit("k", {}, job_id="b", array_size=4, depends_on=[{"job_id": "a", "n_to_n": True}])
    assert twins.queue_counts() == (1, 0)


def test_admission_refuses_an_element_wise_dependency_of_a_job_that_is_no_array() -> None:
    with pytest.raises(ValidationError, match="n_to_n dependency \\(on 'a'\\) is for array"):
        JobMessage.model_validate({"schema_version": 1, "job_id": "b", "kind": "k",
                                   "payload": {}, "depends_on": [{"job_id": "a",
                                                                  "n_to_n": True}]})


def test_a_plain_dependency_reads_and_writes_as_before() -> None:
    plain = Dependency.from_json({"job_id": "a", "condition": "failed"})
    assert plain == Dependency("a", Requires.FAILED) and not plain.n_to_n
    assert plain.as_json() == {"job_id": "a", "condition": "failed"}
    element = Dependency.from_json({"job_id": "a", "n_to_n": True})
    assert element.as_json() == {"job_id": "a", "condition": "succeeded", "n_to_n": True}
    assert element.element(3) == Dependency("a:3")
    # A body leaves an absent n_to_n out: a dispatcher without the field reads it as before.
    msg = JobMessage.model_validate({"schema_version": 1, "job_id": "b", "kind": "k",
                                     "payload": {}, "depends_on": [{"job_id": "a"}]})
    assert "n_to_n" not in msg.model_dump_json(exclude_none=True)
    assert msg.dependencies == [Dependency("a")]


def _send(t: Twins, **fields: object) -> None:
    """A message as a producer without the client's checks sends it."""
    body = {"schema_version": 1, "kind": "k", "payload": {}, **fields}
    t.queue.send([(f"e{fields['job_id']}", json.dumps(body))])


@pytest.mark.parametrize(("a", "says"), [
    ({"array_size": 4}, "its n_to_n dependency a has 4 children, this array 3"),
    ({}, "its n_to_n dependency a is not an array job"),
])
def test_an_element_wise_dependency_on_no_array_of_its_size_cancels_the_parent(
        twins: Twins, a: dict[str, object], says: str) -> None:
    _send(twins, job_id="a", **a)
    _send(twins, job_id="b", array_size=3, depends_on=[{"job_id": "a", "n_to_n": True}])
    stages = twins.stages()
    for _ in range(3):
        stages.tick.tick()
    parent = _state(twins, "b")
    assert parent.state == JobState.CANCELLED
    assert parent.reason is not None and parent.reason.startswith(says)
    assert not [j for j in twins.jobs() if j.array_parent == "b"]


def test_an_unknown_array_cancels_the_parent_after_the_grace(twins: Twins) -> None:
    _send(twins, job_id="b", array_size=3, depends_on=[{"job_id": "ghost", "n_to_n": True}])
    stages = twins.stages()
    stages.tick.tick()
    stages.tick.tick()
    assert _state(twins, "b").state == JobState.PENDING
    shown = Queries(twins.store, clock=twins.clock).show("b").summary.waiting_for
    assert shown is not None and shown.detail == "ghost (succeeded, n_to_n)"
    twins.clock.advance(dependencies.UNKNOWN_GRACE_SECONDS + 1)
    stages.tick.tick()
    parent = _state(twins, "b")
    assert parent.state == JobState.CANCELLED
    assert parent.reason is not None and "ghost is unknown" in parent.reason
    assert not [j for j in twins.jobs() if j.array_parent == "b"]


def test_the_cli_makes_each_depends_on_element_wise(twins: Twins,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=5)
    monkeypatch.setattr("dispatcher.ops.client.JobClient", lambda *a, **kw: client)
    result = CliRunner().invoke(app, ["submit", "k", "--job-id", "b", "--array", "5",
                                      "--depends-on", "a", "--condition", "finished",
                                      "--n-to-n"])
    assert result.exit_code == 0, result.output
    bodies = [json.loads(m.body) for m in twins.queue.receive(10)]
    assert [b["job_id"] for b in bodies] == ["a", "b"]
    assert bodies[1]["depends_on"] == [{"job_id": "a", "condition": "finished", "n_to_n": True}]
    result = CliRunner().invoke(app, ["submit", "k", "--job-id", "c", "--depends-on", "a",
                                      "--n-to-n"])
    assert result.exit_code == 2, result.output
    assert result.output == ("error: --n-to-n makes each --depends-on element-wise for an "
                             "array: give it with --array N and --depends-on ARRAY_ID\n")


class _CountingTable(MemoryTable):
    """The twin table, counting the BatchGetItems it answers."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_gets = 0

    def get_many(self, pks: list[str]) -> list[Record]:
        self.batch_gets += 1
        assert len(pks) <= CHILD_PAGE
        return super().get_many(pks)


def _recorded(table: MemoryTable, job_id: str, state: JobState, **fields: Any) -> Job:
    job = Job(job_id=job_id, kind="k", payload={}, state=state, **fields)
    table.write(Put(codec.job_record(job)))
    return job


@pytest.mark.parametrize(("running", "failed", "limit", "batch_gets"), [
    (None, None, 1000, 1 + 10),  # a bounded window a tick: 10 pages of 100
    (450, 3, 450, 1 + 5),  # up to the first element not ended; held where it went against
])
def test_a_frontier_reads_a_bounded_window_and_stops_at_the_first_element_not_ended(
        running: int | None, failed: int | None, limit: int, batch_gets: int) -> None:
    table = _CountingTable()
    store = Store(table, clock=lambda: 0.0)
    _recorded(table, "a", JobState.RUNNING, array_size=2500)
    for i in range(1200):
        state = JobState.RUNNING if i == running else \
            JobState.FAILED if i == failed else JobState.SUCCEEDED
        _recorded(table, _a(i), state, array_parent="a", array_index=i)
    parent = _recorded(table, "b", JobState.PENDING, array_size=2500, depends_on=[
        {"job_id": "a", "condition": "succeeded", "n_to_n": True}])
    table.batch_gets = 0
    said = frontiers(store, [OpenArray(parent, 2500, 0, 0, Tally())], 0.0)
    assert said["b"].limit == limit and said["b"].cancel is None
    assert said["b"].held == ({} if failed is None else
                              {failed: [{"job_id": _a(failed), "condition": "succeeded"}]})
    assert table.batch_gets == batch_gets


def test_elements_never_made_cancel_their_counterparts_at_once(twins: Twins) -> None:
    """A cancelled before it made a child: B's children are held on children that will never
    be recorded, and cancelled in the same tick (their array ended first: no grace to wait),
    each reason naming its counterpart."""
    client = twins.client()
    client.submit("k", {}, job_id="a", array_size=3)
    client.submit("k", {}, job_id="b", array_size=3, depends_on=[{"job_id": "a",
                                                                  "n_to_n": True}])
    stages = twins.stages()
    stages.tick.tick()  # both parents recorded, no child yet
    client.cancel("a")
    stages.tick.tick()
    assert not [j for j in twins.jobs() if j.array_parent == "a"]
    for i in range(3):
        child = _state(twins, _b(i))
        assert child.state == JobState.CANCELLED
        assert child.reason == f"its dependency {_a(i)} was never made: its array a ended " \
            "before it"
    stages.tick.tick()  # its settle
    assert _state(twins, "b").state == JobState.FAILED
