"""Conversions between domain objects and table items, in one place so both stay in step."""

from __future__ import annotations

from typing import Any

from dispatcher.aws.dynamodb.models import Item, iso
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, JobState, Rejection
from dispatcher.domain.launches import Launch, LaunchState


def _num(value: Any, default: float = 0) -> float:
    return float(value) if value is not None else default


def _int(value: Any, default: int = 0) -> int:
    return int(value) if value is not None else default


def job_item(job: Job) -> Item:
    return Item(
        f"JOB#{job.job_id}", status_key=f"JOB#{job.state}", status_at=iso(job.created_at),
        state=str(job.state), job_id=job.job_id, kind=job.kind, payload=job.payload,
        bundle_id=job.bundle_id, estimated_seconds=job.estimated_seconds,
        max_attempts=job.max_attempts, timeout_seconds=job.timeout_seconds,
        attempts=job.attempts, infra_attempts=job.infra_attempts, created_at=job.created_at,
        updated_at=job.created_at, enqueued_at=job.enqueued_at, message_id=job.message_id,
        reason=job.reason, result=job.result, error=job.error, history=job.history or None,
        checkpoint=job.checkpoint,
    )


def item_job(item: Item) -> Job:
    return Job(
        job_id=item.job_id or item.pk.split("#", 1)[1], kind=item.kind or "",
        payload=item.payload or {}, state=JobState(item.state), bundle_id=item.bundle_id,
        estimated_seconds=item.estimated_seconds, max_attempts=_int(item.max_attempts, 3),
        timeout_seconds=item.timeout_seconds, attempts=_int(item.attempts),
        infra_attempts=_int(item.infra_attempts), created_at=_num(item.created_at),
        enqueued_at=item.enqueued_at, message_id=item.message_id, reason=item.reason,
        result=item.result, error=item.error, history=list(item.history or []),
        checkpoint=item.checkpoint,
    )


def bundle_item(bundle: Bundle) -> Item:
    at = bundle.next_attempt_at if bundle.state == BundleState.PENDING else bundle.created_at
    return Item(
        f"BUNDLE#{bundle.bundle_id}", status_key=f"BUNDLE#{bundle.state}", status_at=iso(at),
        state=str(bundle.state), job_ids=list(bundle.job_ids),
        estimated_seconds=bundle.estimated_seconds, attempt=bundle.attempt,
        launch_id=bundle.launch_id, task_arn=bundle.task_arn,
        task_definition=bundle.task_definition, next_attempt_at=bundle.next_attempt_at,
        launch_failures=bundle.launch_failures, last_failure=bundle.last_failure,
        created_at=bundle.created_at, updated_at=bundle.created_at,
    )


def item_bundle(item: Item) -> Bundle:
    return Bundle(
        bundle_id=item.pk.split("#", 1)[1], job_ids=list(item.job_ids or []),
        state=BundleState(item.state), estimated_seconds=_num(item.estimated_seconds),
        attempt=_int(item.attempt), launch_id=item.launch_id, task_arn=item.task_arn,
        task_definition=item.task_definition, next_attempt_at=_num(item.next_attempt_at),
        launch_failures=_int(item.launch_failures), last_failure=item.last_failure,
        created_at=_num(item.created_at), updated_at=_num(item.updated_at),
        heartbeat_at=item.heartbeat_at,
    )


def launch_item(launch: Launch) -> Item:
    return Item(
        f"LAUNCH#{launch.launch_id}", status_key=f"LAUNCH#{launch.state}",
        status_at=iso(launch.created_at), state=str(launch.state),
        bundle_ids=list(launch.bundle_ids), task_definition=launch.task_definition,
        created_at=launch.created_at, updated_at=launch.created_at,
    )


def item_launch(item: Item) -> Launch:
    return Launch(
        launch_id=item.pk.split("#", 1)[1], bundle_ids=list(item.bundle_ids or []),
        task_definition=item.task_definition or "", state=LaunchState(item.state),
        created_at=_num(item.created_at), task_arns=list(item.task_arns or []),
    )


def rejection_item(rej: Rejection, pk: str) -> Item:
    return Item(
        pk, status_key=f"JOB#{JobState.REJECTED}", status_at=iso(rej.created_at),
        state=str(JobState.REJECTED), job_id=rej.job_id, message_id=rej.message_id,
        reason=rej.reason, body=rej.body, created_at=rej.created_at, updated_at=rej.created_at,
    )


def item_rejection(item: Item) -> Rejection:
    return Rejection(key=item.pk.split("#", 1)[1], message_id=item.message_id or "",
                     reason=item.reason or "", body=item.body or "", job_id=item.job_id,
                     created_at=_num(item.created_at))
