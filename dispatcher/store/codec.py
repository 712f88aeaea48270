"""Keys and the codec: domain objects <-> table records, in one place so both stay in step.

Key prefixes: ``JOB#<job_id>``, ``REJECT#<job_id or message_id>``, ``BUNDLE#<id>``,
``PAGE#<bundle id>#<n>`` (the job ids of a bundle recorded in pages), ``LAUNCH#<id>``,
``TASK#<task arn>`` (points a task at its bundle), ``LEASE#dispatcher``, ``FAIR#priorities``
(each priority's credit for task slots, carried from tick to tick), ``TICK#summary`` (the last
tick's view of the slots, what a job's ``waiting_for`` is derived from), ``DEPLOY#current`` (the
deployed job code, :class:`~dispatcher.domain.deployment.Deployment`), ``ARRAY#<parent id>``
(an array job whose children are not all recorded or not all ended: index key ``ARRAY#open``,
what the tick reads to materialise and settle them; deleted once the parent is decided),
``WAIT#<job id>#<dependent id>`` (a job that waits for another to end: index key
``WAIT#<job id>``, what that job's end reads to release its dependents; expires a
retention period after it was made or last moved on: dispatcher.store.waiters),
``SWEEP#dependents`` (when the tick last looked at every held dependent),
``BATCH#<batch>`` (the next follow-on of a batch a runner takes, dispatcher.store.follow_ons). Index
keys: ``status_key`` = ``<TYPE>#<STATE>#<shard>`` for jobs (and their REJECTED records),
``<TYPE>#<STATE>`` for bundles and launches; ``status_at`` = ISO-8601 UTC time.

Why jobs, and only jobs, are spread over :data:`JOB_SHARDS` index partitions: every job state
change moves the job's index entry from one ``status_key`` to another (a delete and a put), and
one partition key takes at most 1,000 WCU/s
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html);
a throttled index throttles the table's writes ("Provisioned throughput considerations" in
https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html).
At 1,000 jobs/s one unsharded ``JOB#PENDING`` takes ~2,000 WCU/s (a put and a delete per job).
Eight shards bring the hottest to ~260 WCU/s (``bench/capacity.py``, ``docs/measured.md``): 3.7x
headroom for a tick's bursts and the hash's unevenness, while a reader of a job state makes 9
queries (:func:`job_statuses`, :mod:`dispatcher.store.index`); 16 shards would double the reads
for headroom the rate does not need. Bundles and launches change state at most as fast as
Fargate starts tasks (``dispatcher.domain.pacing``: 20 a second per capacity provider), far
below a partition's limit: one partition each keeps their readers at one query.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any

from dispatcher.domain import tenants
from dispatcher.domain.bundles import Bundle, BundleState, untaken_follow_on
from dispatcher.domain.deployment import Deployment, Earlier
from dispatcher.domain.jobs import Job, JobState, Priority, Rejection, Resources
from dispatcher.domain.launches import Launch, LaunchState
from dispatcher.ports.table import And, Condition, Ge, Lt, Or, Record

LEASE_KEY = "LEASE#dispatcher"
FAIR_KEY = "FAIR#priorities"
TICK_KEY = "TICK#summary"
DEPLOY_KEY = "DEPLOY#current"
# Tenants' policies (weights, caps, reserves), and their decayed usage (the tick's).
TENANT_POLICIES_KEY = "TENANT#policies"
TENANT_USAGE_KEY = "TENANT#usage"
# Every rate limit set (dispatcher.store.rate_buckets).
LIMITS_KEY = "LIMIT#policies"
# How many index partitions each job state is spread over (see the module's docstring).
JOB_SHARDS = 8


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def job_key(job_id: str) -> str:
    return f"JOB#{job_id}"


def rejection_key(key: str, message_id: str | None = None) -> str:
    return f"REJECT#{key}#{message_id}" if message_id else f"REJECT#{key}"


def bundle_key(bundle_id: str) -> str:
    return f"BUNDLE#{bundle_id}"


def tenant_bundles(tenant: str) -> Condition:
    """A filter on index rows for the bundles of ``tenant`` (their ids begin ``<tenant>@``:
    dispatcher.domain.tenants): the keys from ``BUNDLE#<tenant>@`` up to, not including, the
    next character after ``@``, which no tenant's name holds (so ``t0`` is not ``t0x``)."""
    first, past = _tenant_keys(tenant)
    return And(Ge("pk", first), Lt("pk", past))


def other_bundles(tenant: str) -> Condition:
    """A filter on index rows for the bundles of any tenant but ``tenant`` (or of none)."""
    first, past = _tenant_keys(tenant)
    return Or(Lt("pk", first), Ge("pk", past))


def _tenant_keys(tenant: str) -> tuple[str, str]:
    first = bundle_key(f"{tenant}{tenants.MARK}")
    return first, first[:-1] + chr(ord(tenants.MARK) + 1)


def page_key(bundle_id: str, n: int) -> str:
    return f"PAGE#{bundle_id}#{n}"


def launch_key(launch_id: str) -> str:
    return f"LAUNCH#{launch_id}"


def task_key(task_arn: str) -> str:
    return f"TASK#{task_arn}"


def batch_key(batch: str) -> str:
    return f"BATCH#{batch}"


def bucket_key(key: str, shard: int) -> str:
    """One shard of the token bucket of ``key`` (a limit's key as a job resolves it)."""
    return f"BUCKET#{key}#{shard}"


def shed_key(tenant: str, tick_at: float) -> str:
    """The count of ``tenant``'s tasks that gave up their slot as the tick of ``tick_at`` asked."""
    return f"SHED#{tenant}#{tick_at!r}"


def array_key(parent_id: str) -> str:
    return f"ARRAY#{parent_id}"


# The index key of every open array's marker (few at once: one partition).
OPEN_ARRAYS = "ARRAY#open"
SWEEP_KEY = "SWEEP#dependents"


def schedule_key(name: str) -> str:
    """The record of a schedule's fires (dispatcher.domain.schedules.FireRecord)."""
    return f"SCHEDULE#{name}"


def waiter_key(job_id: str, dependent_id: str) -> str:
    """The link of ``dependent_id`` to ``job_id``, a job it waits for."""
    return f"WAIT#{job_id}#{dependent_id}"


def waiters_status(job_id: str) -> str:
    """The index key of every link to ``job_id``: the jobs that wait for it (one partition
    per job waited for; a job has as many waiters as producers give it)."""
    return f"WAIT#{job_id}"


def shard(ident: str, shards: int = JOB_SHARDS) -> int:
    """The index shard of an item: a stable hash of its id (CRC-32: the same in every process
    and Python version, unlike ``hash``), so an item keeps its shard through every state."""
    return zlib.crc32(ident.encode()) % shards


def job_status(state: JobState | str, job_id: str) -> str:
    """The index key of a job (or a REJECTED record) with id ``job_id`` in ``state``."""
    return f"JOB#{state}#{shard(job_id)}"


def job_statuses(state: JobState | str) -> list[str]:
    """Every index key of the jobs in ``state``: each shard, and last the unsharded key the
    table's items had before the index was sharded (such an item gets a sharded key at its
    next state change; a finished one expires by TTL), so none of them is lost to a reader."""
    return [f"JOB#{state}#{n}" for n in range(JOB_SHARDS)] + [f"JOB#{state}"]


def state_of(status_key: str) -> str:
    """The state named by an index key (``JOB#RUNNING#3`` -> ``RUNNING``)."""
    return status_key.split("#")[1]


def bundle_status(state: BundleState | str) -> str:
    """A bundle's index key (one partition per state: see the module's docstring)."""
    return f"BUNDLE#{state}"


# The index key of the follow-ons no task has run yet (PENDING, as their ``state`` says): a
# partition apart from the other PENDING bundles, so that a batch's thousands of them, all due
# at once, never fill the tick's read of due work (dispatcher.stages.due_work, DueWork.due), and a
# runner can tell whether other work waits before it takes one (dispatcher.store.follow_ons).
# A follow-on that goes back to PENDING after a run (a retry, a rerun, a failed launch) is
# written under ``bundle_status(PENDING)`` as any bundle: due work as any other.
FOLLOW_ONS_STATUS = "BUNDLE#PENDING#FOLLOW_ON"


def recorded_status(bundle: Bundle) -> str:
    """The index key a bundle is recorded under (:data:`FOLLOW_ONS_STATUS` for a follow-on)."""
    return FOLLOW_ONS_STATUS if untaken_follow_on(bundle) else bundle_status(bundle.state)


def launch_status(state: LaunchState | str) -> str:
    return f"LAUNCH#{state}"


def ident(pk: str) -> str:
    """The id part of a key (``JOB#abc`` -> ``abc``)."""
    return pk.split("#", 1)[1]


def _num(value: Any, default: float = 0) -> float:
    return float(value) if value is not None else default


def _int(value: Any, default: int = 0) -> int:
    return int(value) if value is not None else default


def _state(rec: Record) -> str:
    if rec.state is None:
        raise ValueError(f"item {rec.pk} has no state")
    return rec.state


def job_record(job: Job) -> Record:
    return Record(
        job_key(job.job_id), status_key=job_status(job.state, job.job_id),
        status_at=iso(job.created_at),
        state=str(job.state), job_id=job.job_id, kind=job.kind, payload=job.payload,
        bundle_id=job.bundle_id, estimated_seconds=job.estimated_seconds,
        max_attempts=job.max_attempts, timeout_seconds=job.timeout_seconds,
        attempts=job.attempts, infra_attempts=job.infra_attempts, created_at=job.created_at,
        updated_at=job.created_at, enqueued_at=job.enqueued_at, message_id=job.message_id,
        reason=job.reason, result=job.result, error=job.error, history=job.history or None,
        checkpoint=job.checkpoint, not_before=job.not_before,
        priority=None if job.priority == Priority.NORMAL else str(job.priority),
        sequence=1,  # its creation is its first state change (base.job_state counts the rest)
        **_resources(job.resources), **_array(job), depends_on=job.depends_on or None,
        bulk_ids=job.bulk_ids or None, labels=job.labels or None, tenant=job.tenant,
        uses=job.uses or None,
    )


def _array(job: Job) -> dict[str, Any]:
    if job.array_size is not None:
        return {"array_size": job.array_size, "array_tolerated": job.array_tolerated,
                "array_next": 0}
    if job.array_parent is not None:
        return {"array_parent": job.array_parent, "array_index": job.array_index}
    return {}


def _resources(res: Resources) -> dict[str, Any]:
    return {"cpu": res.cpu, "memory": res.memory, "ephemeral_storage": res.ephemeral_storage}


def record_resources(rec: Record) -> Resources:
    return Resources(cpu=None if rec.cpu is None else int(rec.cpu),
                     memory=None if rec.memory is None else int(rec.memory),
                     ephemeral_storage=None if rec.ephemeral_storage is None
                     else int(rec.ephemeral_storage))


def record_job(rec: Record) -> Job:
    return Job(
        job_id=rec.job_id or ident(rec.pk), kind=rec.kind or "",
        payload=rec.payload or {}, state=JobState(_state(rec)), bundle_id=rec.bundle_id,
        estimated_seconds=rec.estimated_seconds, max_attempts=_int(rec.max_attempts, 3),
        timeout_seconds=rec.timeout_seconds, attempts=_int(rec.attempts),
        infra_attempts=_int(rec.infra_attempts), created_at=_num(rec.created_at),
        enqueued_at=rec.enqueued_at, message_id=rec.message_id, reason=rec.reason,
        result=rec.result, error=rec.error, history=list(rec.history or []),
        checkpoint=rec.checkpoint, progress=rec.progress if isinstance(rec.progress, dict)
        else None, not_before=rec.not_before, settled_by=rec.settled_by,
        live_task=rec.live_task,
        priority=Priority(rec.priority or Priority.NORMAL), resources=record_resources(rec),
        array_size=None if rec.array_size is None else int(rec.array_size),
        array_tolerated=_int(rec.array_tolerated), array_parent=rec.array_parent,
        array_index=None if rec.array_index is None else int(rec.array_index),
        depends_on=rec.depends_on or None, waiters=_int(rec.waiters),
        bulk_ids=list(rec.bulk_ids or []),
        labels=_labels(rec),
        tenant=rec.tenant or None,
        uses={str(k): int(v) for k, v in rec.uses.items()}
        if isinstance(rec.uses, dict) and rec.uses else None,
    )


def _labels(rec: Record) -> dict[str, str] | None:
    """A job's labels, or those a bundle's (a launch's) jobs share; None: none stored."""
    return {str(k): str(v) for k, v in rec.labels.items()} \
        if isinstance(rec.labels, dict) and rec.labels else None


def bundle_record(bundle: Bundle) -> Record:
    at = bundle.next_attempt_at if bundle.state == BundleState.PENDING else bundle.created_at
    return Record(
        bundle_key(bundle.bundle_id), status_key=recorded_status(bundle),
        status_at=iso(at), state=str(bundle.state),
        job_ids=None if bundle.pages else list(bundle.job_ids), pages=bundle.pages or None,
        estimated_seconds=bundle.estimated_seconds, attempt=bundle.attempt,
        launch_id=bundle.launch_id, task_arn=bundle.task_arn,
        task_definition=bundle.task_definition, next_attempt_at=bundle.next_attempt_at,
        launch_failures=bundle.launch_failures, last_failure=bundle.last_failure,
        created_at=bundle.created_at, updated_at=bundle.created_at,
        priority=None if bundle.priority == Priority.NORMAL else str(bundle.priority),
        kind=bundle.kind, slots=bundle.slots or None, batch=bundle.batch,
        timeout_seconds=bundle.timeout_seconds, **_resources(bundle.resources),
        uses=bundle.uses or None, labels=bundle.labels or None,
    )


def record_bundle(rec: Record) -> Bundle:
    return Bundle(
        bundle_id=ident(rec.pk), job_ids=list(rec.job_ids or []),
        state=BundleState(_state(rec)), estimated_seconds=_num(rec.estimated_seconds),
        attempt=_int(rec.attempt), launch_id=rec.launch_id, task_arn=rec.task_arn,
        task_definition=rec.task_definition, next_attempt_at=_num(rec.next_attempt_at),
        launch_failures=_int(rec.launch_failures), last_failure=rec.last_failure,
        created_at=_num(rec.created_at), updated_at=_num(rec.updated_at),
        heartbeat_at=rec.heartbeat_at, pages=_int(rec.pages),
        running_jobs=list(rec.running_jobs or []),
        priority=Priority(rec.priority or Priority.NORMAL), resources=record_resources(rec),
        kind=rec.kind, slots=_int(rec.slots), handed_jobs=list(rec.handed_jobs or []),
        takes_handed=rec.handed is not None, batch=rec.batch,
        timeout_seconds=None if rec.timeout_seconds is None else float(rec.timeout_seconds),
        uses={str(k): int(v) for k, v in rec.uses.items()}
        if isinstance(rec.uses, dict) and rec.uses else None,
        labels=_labels(rec),
    )


def page_record(bundle_id: str, n: int, job_ids: list[str], estimated_seconds: float,
                created_at: float, expires_at: int | None) -> Record:
    """One page of a bundle's job ids (at most one transaction's worth of jobs)."""
    return Record(page_key(bundle_id, n), bundle_id=bundle_id, job_ids=job_ids or None,
                  estimated_seconds=estimated_seconds, created_at=created_at,
                  expires_at=expires_at)


def launch_record(launch: Launch) -> Record:
    return Record(
        launch_key(launch.launch_id), status_key=launch_status(launch.state),
        status_at=iso(launch.created_at), state=str(launch.state),
        bundle_ids=list(launch.bundle_ids), task_definition=launch.task_definition,
        created_at=launch.created_at, updated_at=launch.created_at,
        on_demand="true" if launch.on_demand else None, **_resources(launch.resources),
        kind=launch.kind, labels=launch.labels or None,
    )


def record_launch(rec: Record) -> Launch:
    return Launch(
        launch_id=ident(rec.pk), bundle_ids=list(rec.bundle_ids or []),
        task_definition=rec.task_definition or "", state=LaunchState(_state(rec)),
        created_at=_num(rec.created_at), task_arns=list(rec.task_arns or []),
        on_demand=rec.on_demand == "true", resources=record_resources(rec), kind=rec.kind,
        labels=_labels(rec) or {},
    )


def rejection_record(rej: Rejection, pk: str, expires_at: int | None = None) -> Record:
    return Record(
        pk, status_key=job_status(JobState.REJECTED, ident(pk)), status_at=iso(rej.created_at),
        state=str(JobState.REJECTED), job_id=rej.job_id, message_id=rej.message_id,
        reason=rej.reason, body=rej.body, created_at=rej.created_at, updated_at=rej.created_at,
        expires_at=expires_at,
    )


def record_rejection(rec: Record) -> Rejection:
    return Rejection(key=ident(rec.pk), message_id=rec.message_id or "",
                     reason=rec.reason or "", body=rec.body or "", job_id=rec.job_id,
                     created_at=_num(rec.created_at))


def deployment_record(d: Deployment) -> Record:
    """The deployment's item; no index keys (operators read it by its key)."""
    return Record(DEPLOY_KEY, image=d.image, container_env=dict(d.env) or None,
                  task_definition=d.task_definition, derived_from=d.derived_from,
                  version=d.version, updated_at=d.updated_at, owner=d.updated_by or None,
                  history=[{"task_definition": e.task_definition, "image": e.image,
                            "updated_at": e.updated_at, "updated_by": e.updated_by}
                           for e in d.earlier] or None)


def record_deployment(rec: Record) -> Deployment:
    env = rec.container_env if isinstance(rec.container_env, dict) else {}
    return Deployment(image=rec.image or "", task_definition=rec.task_definition or "",
                      derived_from=rec.derived_from or "",
                      env={str(k): str(v) for k, v in env.items()}, version=_int(rec.version),
                      updated_at=_num(rec.updated_at), updated_by=rec.owner or "",
                      earlier=[Earlier(str(h.get("task_definition", "")), str(h.get("image", "")),
                                       _num(h.get("updated_at")), str(h.get("updated_by", "")))
                               for h in rec.history or [] if isinstance(h, dict)])
