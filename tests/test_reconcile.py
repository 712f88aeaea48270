"""Reconciliation: lost events and stuck tasks are found by asking ECS, every tick."""

from __future__ import annotations

from dispatcher import wiring
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.ports.store import Fence, JobUpdate, Store
from tests.conftest import Aws
from tests.helpers import client, launched


def _launched(aws: Aws) -> tuple[Store, str, str]:
    store, bundle_id, arn = launched(aws, "rc-job")
    return store, bundle_id, arn


def _task_status(aws: Aws, arn: str) -> str:
    ecs = client("ecs", aws.proxy.url)
    return str(ecs.describe_tasks(cluster=aws.env["LONGJOBS_CLUSTER"],
                                  tasks=[arn])["tasks"][0]["lastStatus"])


def test_lost_stop_event_is_found_and_the_bundle_rerun(aws: Aws) -> None:
    store, bundle_id, arn = _launched(aws)
    client("ecs", aws.proxy.url).stop_task(cluster=aws.env["LONGJOBS_CLUSTER"], task=arn,
                                           reason="host failure")  # its event never arrives
    decision = wiring.dispatcher(aws.config(LONGJOBS_START_TIMEOUT_SECONDS="0")).tick()
    assert decision.reconcile.stopped_found == 1
    bundle = store.get_bundle(bundle_id)
    assert bundle is not None and bundle.state == BundleState.LAUNCHED
    assert bundle.attempt == 2 and bundle.task_arn != arn
    job = store.get_job("rc-job")
    assert job is not None and job.infra_attempts == 1 and job.attempts == 0


def test_a_task_that_stopped_heartbeating_is_stopped_and_rerun(aws: Aws) -> None:
    store, bundle_id, arn = _launched(aws)
    fence = Fence(bundle_id, 1, arn)
    store.claim(fence)  # as its runner would, then it hangs: no more heartbeats
    store.apply(fence, [JobUpdate("rc-job", JobState.PENDING, JobState.RUNNING,
                                  attempts_delta=1, history=[{"task_arn": arn}])])
    cfg = aws.config(LONGJOBS_HEARTBEAT_SECONDS="0.001")
    decision = wiring.dispatcher(cfg).tick()
    assert decision.reconcile.stuck_stopped == 1
    assert _task_status(aws, arn) == "STOPPED"
    held = store.get_bundle(bundle_id)  # not rerun while the old task might still run
    assert held is not None and held.attempt == 1 and held.state == BundleState.RUNNING
    # Its STOPPED event is lost too: the next tick sees the task stopped and reruns.
    assert wiring.dispatcher(cfg).tick().reconcile.stopped_found == 1
    bundle = store.get_bundle(bundle_id)
    assert bundle is not None and bundle.attempt == 2 and bundle.task_arn != arn
    job = store.get_job("rc-job")
    assert job is not None and job.state == JobState.PENDING
    assert (job.attempts, job.infra_attempts) == (0, 1)  # not the job's fault
    assert job.history[-1]["stop_class"] == "infrastructure"


def test_healthy_tasks_are_left_alone(aws: Aws) -> None:
    _launched(aws)
    decision = wiring.dispatcher(aws.config()).tick()  # start timeout 600 s not reached
    assert decision.reconcile.checked == 0
    assert aws.proxy.counts()["ecs.DescribeTasks"] == 0


def test_a_job_past_its_timeout_is_failed_and_its_lone_task_stopped(aws: Aws) -> None:
    store, bundle_id, _ = launched(aws, "overdue", timeout_seconds=1)
    bundle = store.get_bundle(bundle_id)
    assert bundle is not None and bundle.task_arn
    fence = Fence(bundle.bundle_id, bundle.attempt, bundle.task_arn)
    store.claim(fence)  # its runner started it long ago and is wedged, yet heartbeats
    store.apply(fence, [JobUpdate("overdue", JobState.PENDING, JobState.RUNNING,
                                  attempts_delta=1, history=[{"task_arn": bundle.task_arn,
                                                              "started_at": 0.0}])])
    store.heartbeat(fence)
    decision = wiring.dispatcher(aws.config(LONGJOBS_HEARTBEAT_SECONDS="30")).tick()
    assert decision.reconcile.timed_out == ["overdue"]
    failed = store.get_job("overdue")
    assert failed is not None and failed.state == JobState.FAILED and failed.reason == "timeout"
    assert _task_status(aws, bundle.task_arn) == "STOPPED"
