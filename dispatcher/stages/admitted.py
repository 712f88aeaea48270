"""What admission makes of each received message: a job (or an array's parent or child), or
the REJECTED record of one that is no job; and the counts of a tick's admission.

The conversions are pure (a message, its receipt, the time); the drain that calls them is
:mod:`dispatcher.stages.admit`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.domain import arrays, message
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.jobs import Job, Rejection
from dispatcher.ports.queue import Received


@dataclass
class AdmissionStats:
    received: int = 0
    admitted: int = 0
    rejected: int = 0
    duplicates: int = 0
    waiting: int = 0  # received once every slot was taken: recorded to wait for one
    arrays: int = 0  # array jobs' parents received (their children are admitted later)
    delete_failures: int = 0
    record_failures: int = 0  # bundles left for redelivery (their messages kept)
    record_errors: list[str] = field(default_factory=list)  # why (the first few, distinct)
    released: int = 0  # their messages made visible again at once
    bundles_recorded: int = 0
    deferred_bundles: int = 0  # recorded for later: scheduled, or their kind at its limit
    # Of those, the first bundles of tenants with no task running, by priority: due work a
    # running task of another tenant leaves its slot for (stages/bundle.py, "footholds").
    footholds: dict[str, int] = field(default_factory=dict)
    follow_ons: int = 0  # recorded for running tasks to take (dispatcher.store.follow_ons)
    # Follow-ons and footholds recorded, by tenant ("(none)" for the jobs of none): work
    # that tenant has beyond what the tick saw (dispatcher/stages/tenant_slots.py).
    tenants_followed: dict[str, int] = field(default_factory=dict)
    follow_on_seconds: float = 0.0  # their jobs' estimated seconds
    # A drain of small jobs stopped with every slot's share taken, not with the queue empty:
    # more may wait there for the next tick.
    small_jobs_left: bool = False
    # Jobs recorded to wait for others whose dependencies had all decided already: released
    # at once, or cancelled (stages/dependents.py).
    dependents_released: int = 0
    dependents_cancelled: int = 0
    admitted_by_priority: dict[str, int] = field(default_factory=dict)
    target_jobs: int = 0  # the even share of the backlog per bundle
    oldest_sent_at: float | None = None
    rejections: list[dict[str, str]] = field(default_factory=list)
    skipped_fires: int = 0  # schedules' fires recorded as skipped (dispatcher.stages.fires)


def to_job(msg: message.JobMessage, received: Received, at: float) -> Job:
    """The job a message asks for: a job, an array's parent, or (``received.array_index``
    set, the body being its parent's message) an array's child."""
    job = Job(job_id=msg.job_id, kind=msg.kind, payload=msg.payload,
              estimated_seconds=msg.estimated_seconds, max_attempts=msg.max_attempts,
              timeout_seconds=msg.timeout_seconds, created_at=at,
              enqueued_at=received.sent_at, message_id=received.message_id,
              payload_bytes=msg.payload_bytes, priority=msg.priority,
              not_before=msg.not_before, resources=msg.resources,
              depends_on=[d.as_json() for d in msg.dependencies] or None,
              labels=msg.labels or None, tenant=msg.tenant, uses=msg.uses or None)
    if received.array_index is not None:
        job.job_id = arrays.child_id(msg.job_id, received.array_index)
        job.array_parent, job.array_index = msg.job_id, received.array_index
        # Its parent waited for the whole-array dependencies already (its body names none);
        # the fan-out names one only for a child whose n_to_n element ended against it, so
        # that the child is held and CANCELLED by it (dispatcher.stages.n_to_n).
        job.depends_on = [d.as_json() for d in msg.dependencies if not d.n_to_n] or None
    elif msg.array_size is not None:
        job.array_size, job.array_tolerated = msg.array_size, msg.tolerated
    return job


def to_rejection(exc: InvalidMessage, received: Received, at: float) -> Rejection:
    body = received.body.encode()[:message.REJECTED_BODY_BYTES].decode(errors="replace")
    return Rejection(key=exc.job_id or received.message_id, message_id=received.message_id,
                     reason=exc.reason, body=body, job_id=exc.job_id, created_at=at)
