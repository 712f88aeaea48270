"""Labels: a producer's key=value tags on a job, in the schema, kept on the job and its
events, listed and acted on through the label index (never a scan), counted by
``stats --by label`` once the jobs' tasks stop."""

from __future__ import annotations

import time

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.costs import TaskBill
from dispatcher.domain.errors import InvalidMessage, LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.ops.bulk import BulkAction, BulkFilter, BulkVerb
from dispatcher.ops.queries import Queries
from dispatcher.store import Fence, Store
from dispatcher.store.label_index import label_statuses
from dispatcher.testing.memory_event_sink import MemoryEventSink, follow
from job_runner import writes as writes_module
from job_runner.outcome import succeeded
from job_runner.writes import Writes
from tests.twins import Twins


class TwinTime:
    """The runner's clock for its history entries: the twins'."""

    def __init__(self, twins: Twins) -> None:
        self.time = twins.clock
        self.monotonic = time.monotonic


def run_every_bundle(twins: Twins, seconds: float) -> None:
    """Each launched bundle claimed and run by the runner's own writes, every job taking
    ``seconds`` of the twins' clock, the bundle ended DONE (the runner vouching for its runs)."""
    for b in twins.bundles():
        if b.state != BundleState.LAUNCHED or not b.task_arn:
            continue
        fence = Fence(b.bundle_id, b.attempt, b.task_arn)
        claim = twins.store.claim(fence)
        with Writes.for_bundle(twins.store, fence, claim.bundle, 3600.0) as writes:
            for job in twins.store.get_jobs(twins.store.job_ids_of(claim.bundle)):
                writes.start(job)
                twins.clock.advance(seconds)
                writes.finish(job, succeeded(job, None), started=True)
            writes.flush(BundleState.DONE)


def submitted(twins: Twins) -> None:
    client = twins.client()
    for n in range(3):
        client.submit("k", {}, job_id=f"a{n}", labels={"customer": "acme", "tier": "gold"})
    client.submit("k", {}, job_id="b0", labels={"customer": "bolt"})
    client.submit("k", {}, job_id="plain")


def test_labels_are_kept_on_the_job_and_listed_by_label(twins: Twins) -> None:
    submitted(twins)
    twins.stages().tick.tick()
    job = twins.job("a0")
    assert job is not None and job.labels == {"customer": "acme", "tier": "gold"}
    q = Queries(twins.store, clock=twins.clock)
    acme = [s.job_id for s in q.list_jobs(label="customer=acme")]
    assert sorted(acme) == ["a0", "a1", "a2"]
    assert [s.job_id for s in q.list_jobs(label="customer=bolt")] == ["b0"]
    assert q.list_jobs(label="customer=acme", status="SUCCEEDED") == []
    assert q.list_jobs(label="customer=none") == []
    # One item a label of a job, in the label's partitions: nothing for the job without any.
    rows = [rec for key in label_statuses("customer", "acme")
            for rec in twins.table.query(key)]
    assert len(rows) == 3 and len(twins.items("LABEL#")) == 7
    with pytest.raises(LongjobsError, match="is not key=value"):
        q.list_jobs(label="customer")


def test_a_duplicate_with_other_labels_is_not_listed_by_them(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="dup", labels={"team": "one"})
    twins.stages().tick.tick()
    client.submit("k", {}, job_id="dup", labels={"team": "two"})  # the same job, again
    twins.stages().tick.tick()
    q = Queries(twins.store, clock=twins.clock)
    assert [s.job_id for s in q.list_jobs(label="team=one")] == ["dup"]
    assert q.list_jobs(label="team=two") == []  # its label item is there; the job is not


def test_a_bulk_cancel_by_label_acts_on_those_jobs_only(twins: Twins) -> None:
    submitted(twins)
    twins.stages().tick.tick()
    action = BulkAction(twins.store, clock=twins.clock, page=2)
    f = BulkFilter(BulkVerb.CANCEL, "PENDING", label="customer=acme")
    pending_acme = [j.job_id for j in twins.jobs()
                    if j.state == JobState.PENDING and (j.labels or {}).get("customer") == "acme"]
    assert action.count(f) == len(pending_acme) > 0
    report = action.run(f)
    # At once where its bundle waits; asked of its task where one was launched for it.
    assert report.acted + report.requested == len(pending_acme) == 3
    cancelled = {j.job_id for j in twins.jobs() if j.state == JobState.CANCELLED}
    asked = {j for rec in twins.items("BUNDLE#") for j in rec.cancel_jobs or ()}
    assert cancelled | asked == set(pending_acme) and not cancelled & asked
    with pytest.raises(LongjobsError, match="--label 'acme'"):
        BulkFilter(BulkVerb.CANCEL, "PENDING", label="acme")


def test_a_bad_label_is_refused_with_its_bounds(twins: Twins) -> None:
    client = twins.client()
    with pytest.raises(InvalidMessage, match="labels"):
        client.submit("k", {}, labels={"a=b": "x"})
    with pytest.raises(InvalidMessage, match="at most 10"):
        client.submit("k", {}, labels={f"k{n}": "v" for n in range(11)})
    with pytest.raises(InvalidMessage, match="128"):
        client.submit("k", {}, labels={"k": "v" * 129})


def test_events_carry_labels_and_stats_count_by_label(
        twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = MemoryEventSink()
    follow(twins.table, sink)
    submitted(twins)
    twins.stages().tick.tick()
    assert {e.job_id: e.labels for e in sink.events if e.state == "PENDING"}["a1"] == {
        "customer": "acme", "tier": "gold"}
    # Every job runs for 10 s on its task, which then stops with its bill.
    monkeypatch.setattr(writes_module, "time", TwinTime(twins))
    store = Store(twins.table, clock=twins.clock)
    run_every_bundle(twins, seconds=10.0)
    ended = [e for e in sink.events if e.state == "SUCCEEDED"]
    assert len(ended) == 5 and all(e.run_seconds == pytest.approx(10.0) for e in ended)
    for arn in twins.task_arns():
        task = twins.launcher.tasks[arn]
        twins.stages().reruns.on_stop(TaskStop(arn, "EssentialContainerExited", "done", 0,
                                               twins.clock(), TaskBill(
                                                   256, 512, task.started_at, twins.clock())))
    usage = {g.group: g for g in store.group_usage("label", twins.clock() - 3600,
                                                    twins.clock())}
    assert usage["label:customer=acme"].jobs == 3 and usage["label:customer=bolt"].jobs == 1
    assert usage["label:tier=gold"].dollars == pytest.approx(
        usage["label:customer=acme"].dollars)
    kinds = {g.group: g for g in store.group_usage("kind", twins.clock() - 3600, twins.clock())}
    assert kinds["kind:k"].jobs == 5


def test_a_labelled_job_sent_twice_in_one_drain_is_recorded_once(twins: Twins) -> None:
    client = twins.client()
    for _ in range(2):  # the same array parent, twice before a tick: one label entry
        client.submit("k", {}, job_id="arr", array_size=3, labels={"team": "a"})
    client.submit("k", {}, job_id="one", labels={"team": "a"})
    client.submit("k", {}, job_id="one", labels={"team": "a"})
    for _ in range(3):
        twins.stages().tick.tick()
    q = Queries(twins.store, clock=twins.clock)
    listed = sorted(s.job_id for s in q.list_jobs(label="team=a", limit=100))
    # An array's children carry its labels: they are the jobs that run (and cost).
    assert listed == ["arr", "arr:0", "arr:1", "arr:2", "one"]
    child = twins.job("arr:1")
    assert child is not None and child.labels == {"team": "a"}
