"""The dispatch path end to end: queue -> job table -> launcher, in-process on the twins.

What only the ECS adapter does (the RunTask request's shape, throttling retries, revision
resolution on ECS) is in ``tests/contract/test_ecs_launcher.py``, on moto.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.ports.queue import Received
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.workload import mixed_jobs, run_until_drained, submit_in_waves
from tests.twins import FAMILY, Twins


def _check_converged(twins: Twins, job_ids: list[str], *, max_jobs: int = 50) -> None:
    """Every job recorded once, queue empty, every bundle launched once on its own task."""
    assert sorted(j.job_id for j in twins.jobs()) == sorted(job_ids)
    assert twins.queue_counts() == (0, 0)
    bundles = twins.bundles()
    in_bundles = [j for b in bundles for j in b.job_ids]
    assert sorted(in_bundles) == sorted(job_ids)  # each job in exactly one bundle
    assert all(len(b.job_ids) <= max_jobs for b in bundles)
    assert {b.state for b in bundles} == {BundleState.LAUNCHED}
    arns = [b.task_arn for b in bundles]
    assert len(set(arns)) == len(bundles)
    assert sorted(twins.task_arns()) == sorted(arns)  # type: ignore[type-var]


def test_mixed_jobs_recorded_once_bundled_and_launched(twins: Twins) -> None:
    d = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="500", LONGJOBS_BUNDLE_MAX_JOBS="20",
                     LONGJOBS_BUNDLE_MAX_SECONDS="120").tick
    jobs = mixed_jobs(240)
    submit_in_waves(twins.client(), d, jobs, wave=80)
    _check_converged(twins, [j["job_id"] for j in jobs], max_jobs=20)

    bundles = twins.bundles()
    small = {j["job_id"] for j in jobs if (j["estimated_seconds"] or 1e9) <= 60}
    for b in bundles:
        if len(b.job_ids) > 1:  # only small jobs share a bundle, within the seconds limit
            assert set(b.job_ids) <= small
            assert b.estimated_seconds <= 120
    assert sum(1 for b in bundles if set(b.job_ids) - small) == len(jobs) - len(small)

    # The launch stage's requests (their ECS form is checked in test_ecs_launcher.py).
    requests = twins.launcher.requests
    assert requests and all(1 <= r.count <= 10 for r in requests)
    assert {r.task_definition for r in requests} == {f"{FAMILY}:1"}
    for r in requests:
        assert list(r.env) == ["LONGJOBS_LAUNCH_ID"]
        assert r.client_token.startswith("lj-")
    assert len({r.client_token for r in requests}) == len(requests)
    assert sum(r.count for r in requests) == len(bundles)
    assert {b.task_definition for b in bundles} == {f"{FAMILY}:1"}


def test_admission_keeps_backlog_in_sqs(twins: Twins) -> None:
    d = twins.stages(LONGJOBS_MAX_RUNNING_TASKS="3").tick
    twins.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"long-{i}",
                                 "estimated_seconds": 3600} for i in range(8)])
    decision = d.tick()
    assert decision.capacity == 3 and decision.launch.bundles_launched == 3
    assert len(twins.jobs()) == 3
    assert len(twins.launcher.tasks) == 3
    visible, in_flight = twins.queue_counts()
    assert visible + in_flight == 5  # released, not deleted: SQS is the backlog
    again = d.tick()
    assert again.capacity == 0 and again.intake.received == 0
    assert len(twins.jobs()) == 3


def test_new_revision_is_pinned_on_later_launches(twins: Twins) -> None:
    d = twins.stages().tick
    c = twins.client()
    c.submit("k", {}, job_id="before-deploy")
    d.tick()
    assert twins.launcher.register_task_definition() == f"{FAMILY}:2"  # a deploy
    c.submit("k", {}, job_id="after-deploy")
    d.tick()
    revisions = {}
    for job_id in ("before-deploy", "after-deploy"):
        job = twins.job(job_id)
        assert job is not None and job.bundle_id
        bundle = twins.bundle(job.bundle_id)
        assert bundle is not None
        revisions[job_id] = bundle.task_definition
    assert revisions == {"before-deploy": f"{FAMILY}:1", "after-deploy": f"{FAMILY}:2"}
    assert [r.task_definition for r in twins.launcher.requests] == [f"{FAMILY}:1",
                                                                     f"{FAMILY}:2"]


def test_every_ticks_record_says_which_build_ran_it(
        twins: Twins, caplog: pytest.LogCaptureFixture) -> None:
    """longjobs's version and the AWS libraries', as installed, in the record and its log."""
    from importlib.metadata import version

    stages = twins.stages()
    tick_log = logging.getLogger("dispatcher.stages.tick")  # its tree does not propagate
    tick_log.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="dispatcher.stages.tick"):
            decision = stages.tick.tick()
    finally:
        tick_log.removeHandler(caplog.handler)
    installed = {name: version(name) for name in ("longjobs", "boto3", "botocore", "pynamodb")}
    assert decision.versions == installed
    logged = next(r for r in caplog.records if r.getMessage() == "tick")
    assert logged.versions == installed


def test_duplicate_deliveries_and_producer_retries_make_one_job(twins: Twins) -> None:
    d = twins.stages().tick
    c = twins.client()
    for _ in range(3):  # a producer retrying
        c.submit("k", {"n": 1}, job_id="same-job", estimated_seconds=5)
    d.tick()
    c.submit("k", {"n": 1}, job_id="same-job", estimated_seconds=5)  # a late redelivery
    decision = d.tick()
    assert decision.intake.duplicates == 1 and decision.intake.admitted == 0
    _check_converged(twins, ["same-job"])


MALFORMED = {
    "not-json": ("{this is not json", "not JSON"),
    "not-object": ("[1, 2]", "not a JSON object"),
    "missing-kind": (json.dumps({"schema_version": 1, "job_id": "bad-1", "payload": {}}),
                     "kind: Field required"),
    "wrong-version": (json.dumps({"schema_version": 2, "job_id": "bad-2", "kind": "k",
                                  "payload": {}}), "schema_version"),
    "payload-not-object": (json.dumps({"schema_version": 1, "job_id": "bad-3", "kind": "k",
                                       "payload": [1]}), "payload"),
    "unknown-kind": (json.dumps({"schema_version": 1, "job_id": "bad-4", "kind": "nope",
                                 "payload": {}}), "unknown kind 'nope'"),
    "too-large": (json.dumps({"schema_version": 1, "job_id": "bad-5", "kind": "k",
                              "payload": {"blob": "x" * 300_000}}), "payload too large"),
}


def test_malformed_messages_are_rejected_with_reasons(twins: Twins) -> None:
    d = twins.stages(LONGJOBS_ALLOWED_KINDS="k").tick
    c = twins.client()
    c.submit("k", {}, job_id="good-before")
    # Straight onto the queue, as a producer not using JobClient would.
    twins.queue.send([(f"raw{n}", body) for n, (body, _) in enumerate(MALFORMED.values())])
    c.submit("k", {}, job_id="good-after")
    run_until_drained(d)
    _check_converged(twins, ["good-before", "good-after"])
    rejected = twins.rejections()
    assert len(rejected) == len(MALFORMED)
    reasons = [rec.reason or "" for rec in rejected]
    for name, (_, expected) in MALFORMED.items():
        assert any(expected in r for r in reasons), (name, reasons)
    for rec in rejected:
        assert rec.state == "REJECTED" and rec.body
        assert len(rec.body.encode()) <= 4096
    keys = {rec.pk for rec in rejected}
    assert {"REJECT#bad-1", "REJECT#bad-5"} <= keys  # keyed by job id when readable


def test_runtask_failures_go_back_to_pending_and_launch_later(twins: Twins) -> None:
    d = twins.stages().tick
    twins.launcher.inject_failures(["RESOURCE:MEMORY", "Capacity is unavailable"])
    twins.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{i}"}
                                for i in range(5)])
    first = d.tick()
    assert first.launch.bundles_launched == 3
    assert dict(first.launch.failures) == {"RESOURCE:MEMORY": 1, "Capacity": 1}
    assert len(twins.launcher.tasks) == 3
    pending = [b for b in twins.bundles() if b.state == BundleState.PENDING]
    assert sorted(b.last_failure or "" for b in pending) == [
        "Capacity is unavailable", "RESOURCE:MEMORY"]
    assert all(b.launch_failures == 1 for b in pending)
    second = d.tick()
    assert second.due_bundles == 2 and second.launch.bundles_launched == 2
    _check_converged(twins, [f"j{i}" for i in range(5)])


def test_backoff_holds_failed_bundles_until_due(twins: Twins) -> None:
    d = twins.stages(LONGJOBS_LAUNCH_BACKOFF_SECONDS="3600").tick
    twins.launcher.inject_failures(["RESOURCE:CPU"])
    twins.client().submit("k", {}, job_id="held")
    d.tick()
    assert d.tick().due_bundles == 0  # not due for an hour
    assert twins.launcher.tasks == {}
    twins.clock.advance(3600)  # the backoff (jittered to 0.5..1x) has passed
    later = d.tick()
    assert later.due_bundles == 1 and later.launch.bundles_launched == 1
    _check_converged(twins, ["held"])


@pytest.mark.parametrize("lease_holder_seconds", [600])
def test_a_held_lease_skips_the_tick(twins: Twins, lease_holder_seconds: int) -> None:
    assert twins.store.acquire_lease("someone-else", lease_holder_seconds)
    twins.client().submit("k", {}, job_id="waits")
    decision = twins.stages().tick.tick()
    assert decision.skipped and decision.intake.received == 0
    assert twins.jobs() == [] and twins.queue_counts() == (1, 0)
    twins.store.release_lease("someone-else")
    assert twins.stages().tick.tick().launch.bundles_launched == 1


def test_an_expired_lease_does_not_block_the_tick(twins: Twins) -> None:
    assert twins.store.acquire_lease("crashed-tick", 600)
    twins.client().submit("k", {}, job_id="after-crash")
    twins.clock.advance(601)  # its holder crashed and never released it
    assert twins.stages().tick.tick().launch.bundles_launched == 1


class _RedeliveringQueue(MemoryQueue):
    """SQS standard is at-least-once: once drained, it delivers the last message again
    (same message id, a new receipt handle)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last: Received | None = None
        self.redelivered = threading.Event()

    def receive(self, max_messages: int = 10,
                visibility_timeout: int | None = None) -> list[Received]:
        out = super().receive(max_messages, visibility_timeout)
        if out:
            self.last = out[-1]
        elif self.last is not None and not self.redelivered.is_set():
            m = self.last
            out = [Received(m.message_id, m.receipt_handle + "-again", m.body, m.sent_at, 2)]
            self.redelivered.set()
        return out


def test_a_redelivery_in_the_same_drain_is_not_deleted_before_its_first_copy_is_recorded(
        twins: Twins) -> None:
    """If the duplicate were deleted at once and the first copy's recording then failed,
    the message would be gone with no job, no rejection and no dead letter."""
    queue = twins.queue = _RedeliveringQueue(clock=twins.clock)
    twins.client().submit("k", {}, job_id="j1", estimated_seconds=1)
    record = twins.store.record

    def failing_record(*args: Any) -> Any:
        assert queue.redelivered.wait(30)  # received again while this recording is under way
        raise RuntimeError("InjectedFailure: DynamoDB throttled after retries")

    twins.store.record = failing_record  # type: ignore[method-assign]
    stages = twins.stages()
    decision = stages.tick.tick()
    assert decision.intake.record_failures == 1 and decision.intake.duplicates == 1
    assert twins.queue_counts() == (1, 0)  # still there, and given back at once
    twins.store.record = record  # type: ignore[method-assign]
    stages.tick.tick()
    assert twins.job("j1") is not None and twins.queue_counts() == (0, 0)
