"""The single table's item, as the table port reads and writes it (no pynamodb here)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass
class Record:
    """One item of the single table. Attributes an item type does not use stay None (and are
    not stored). Names are the table's attribute names."""

    pk: str
    status_key: str | None = None  # status index hash key: <TYPE>#<STATE>[#<shard>]
    status_at: str | None = None  # status index range key: ISO-8601 UTC
    expires_at: float | None = None  # TTL
    state: str | None = None
    created_at: float | None = None
    updated_at: float | None = None
    # job
    kind: str | None = None
    payload: Any = None
    bundle_id: str | None = None
    estimated_seconds: float | None = None
    max_attempts: float | None = None
    timeout_seconds: float | None = None
    attempts: float | None = None
    infra_attempts: float | None = None
    enqueued_at: float | None = None
    message_id: str | None = None
    reason: str | None = None
    result: Any = None
    error: Any = None
    history: Any = None
    checkpoint: Any = None
    settled_by: str | None = None  # job: the task whose stop last settled it (rerun stage)
    live_task: str | None = None  # job: a task whose run of it may still be alive (Job)
    # job: how many state changes it has had, its creation the first; written with each one
    # (dispatcher.store.base.job_state), carried by its state-change events
    sequence: float | None = None
    job_id: str | None = None
    body: str | None = None
    priority: str | None = None  # jobs and bundles
    not_before: float | None = None
    cpu: float | None = None  # jobs and bundles: the resource class
    memory: float | None = None
    ephemeral_storage: float | None = None
    # array jobs (dispatcher.domain.arrays): a parent's size, tolerated failures, children
    # recorded so far and what is known of how they ended; a child's parent and index
    array_size: float | None = None
    array_tolerated: float | None = None
    array_next: float | None = None
    # a parent's children a tick may have recorded lie below it (dispatcher.stages.fanout
    # raises it before it offers them, while the parent is undecided): an array's cancel
    # looks for children up to it, not only up to array_next
    array_offered: float | None = None
    array_tally: Any = None
    array_parent: str | None = None
    array_index: float | None = None
    # an array's retry in progress (dispatcher.store.array_retry): the next child it retries
    # (the writes' fence), and how far it goes and how (through, from_scratch, reason)
    array_retry_next: float | None = None
    array_retry: Any = None
    depends_on: Any = None  # job: what it waits for (dispatcher.domain.dependencies)
    # job: how many jobs were linked to it as waiting for it to end (WAIT#<it>#<dependent>);
    # its end, seen in the table's stream with this set, releases them (stages/dependents.py)
    waiters: float | None = None
    # job: the ids of the bulk actions that acted on it, oldest first, bounded
    # (dispatcher.store.bulk_marks); read with the whole item, never from the index
    bulk_ids: list[str] | None = None
    # bundle
    # its jobs; on a schedule's record (SCHEDULE#<name>), the runs an operator's retry put its
    # last run beside (dispatcher.domain.schedules.FireRecord.beside)
    job_ids: list[str] | None = None
    attempt: float | None = None
    launch_id: str | None = None
    task_arn: str | None = None
    task_definition: str | None = None
    next_attempt_at: float | None = None
    launch_failures: float | None = None
    last_failure: str | None = None
    heartbeat_at: float | None = None
    # a bundle: the token of the claim that made it RUNNING, so that a claim whose answer was
    # lost, sent again and refused by its own first write knows it as its own
    # (dispatcher.store.runner)
    claim_token: str | None = None
    cancel_jobs: list[str] | None = None
    running_jobs: list[str] | None = None  # as of the last heartbeat
    # a bundle: its running jobs' latest progress reports, by job id, as of the last
    # heartbeat; a job: its report as of its last checkpoint (dispatcher.domain.progress)
    progress: Any = None
    reported_stop: str | None = None  # the task whose stop was last handled (once per task)
    pages: float | None = None  # a bundle recorded in pages: how many (PAGE#<id>#<n>)
    slots: float | None = None  # a single-kind bundle of a limited kind: jobs it runs at once
    # Jobs handed to a running bundle (urgent jobs, see dispatcher/stages/handoff.py), and how
    # many: the count is set (to 0) by a runner that takes handed jobs when it claims, and
    # every write that must not miss a handed job checks it.
    handed_jobs: list[str] | None = None
    handed: float | None = None
    # a bundle of a batch whose follow-ons its runner takes (dispatcher.store.follow_ons), and
    # the batch's cursor (BATCH#<batch>): the next follow-on to take, and how many there are
    # (once its drain has recorded them all)
    batch: str | None = None
    batch_next: float | None = None
    batch_last: float | None = None
    # a due bundle a batch's task cannot run (another size): when one of them last left its
    # slot to the tick for it (one task at a time does)
    yielded_at: float | None = None
    # a task's pointer: how the jobs of the bundles it ran before the one it names ended
    # (dispatcher.store.values.JobOutcomes)
    ran_succeeded: float | None = None
    ran_failed: float | None = None
    # ... and how those of the bundle it names ended, written by its runner with the bundle's
    # move to DONE when it abandoned none and the table refused none of its results
    ended_bundle: str | None = None
    ended_succeeded: float | None = None
    ended_failed: float | None = None
    # a task's pointer: the job-seconds its runner counted through the bundles before the one
    # it names, and through that one when it vouches for it (dispatcher.domain.costs.Usage);
    # once the task stopped, its bill (``bill``: size, capacity, span), the dollars it cost and
    # the job-seconds they are split by (the task's rate is cost / job_seconds)
    ran_usage: Any = None
    ended_usage: Any = None
    bill: Any = None
    cost: float | None = None
    job_seconds: float | None = None
    # a job: its labels (key -> value); a usage counter (USAGE#...): its group and hour, and
    # the jobs (and of them failed), job-seconds, vCPU-seconds and dollars added up in them
    labels: Any = None
    # a job: whom its work is for (dispatcher.domain.tenants; a bundle's is in its id)
    tenant: str | None = None
    group: str | None = None
    jobs: float | None = None
    failed: float | None = None
    vcpu_seconds: float | None = None
    # launch
    bundle_ids: list[str] | None = None
    task_arns: list[str] | None = None
    on_demand: str | None = None  # "true": the Spot fallback's launch type FARGATE
    # the share of task slots each priority has had (the tick's credit, by priority)
    credit: Any = None
    # the last tick's view of the slots (TICK#summary): what `waiting_for` is derived from
    summary: Any = None
    # tenants' policies, or their decayed usage (dispatcher.store.tenant_policies)
    tenants: Any = None
    shed: float | None = None  # tasks of a tenant that gave up their slot after a tick
    # rate limits (dispatcher.store.rate_buckets): every limit set (LIMIT#policies); a job's
    # tokens taken at launch (key -> count; a bundle's, its jobs' added up); a bucket's
    # theoretical arrival time (BUCKET#<key>#<shard>)
    limits: Any = None
    uses: Any = None
    bucket_at: float | None = None
    # the look at every held dependent (SWEEP#dependents): when one was last given back
    given_back_at: float | None = None
    # the lease (dispatcher.store.values.Lease): SWEEP#dependents' claim as its last holder
    # left it; how many times it was taken; the last holder to leave no bundle RECORDING;
    # the last holder to give it back at all; the last holder that saw a tenant's work
    swept_at: float | None = None
    lease_count: float | None = None
    clean_at: float | None = None
    released_at: float | None = None
    tenanted_at: float | None = None
    # lease (and the deployment: who wrote it last)
    owner: str | None = None
    lease_until: float | None = None
    one_at_a_time: str | None = None  # "true": held by a tick the platform runs one at a time
    # the deployment (DEPLOY#current): the job code launches run
    image: str | None = None
    container_env: Any = None
    derived_from: str | None = None
    version: float | None = None

    def present(self) -> dict[str, Any]:
        """The attributes that are set (what the table stores), in the fields' order.

        Read from the instance's ``__dict__`` (which a dataclass fills in the fields' order)
        rather than through ``dataclasses.fields``: the twin calls this for every item it
        copies, and ``fields`` rebuilt its tuple each time."""
        return {k: v for k, v in vars(self).items() if v is not None and k in ATTRIBUTES}


ATTRIBUTES: frozenset[str] = frozenset(f.name for f in fields(Record))
JSON_ATTRIBUTES = frozenset({"payload", "result", "error", "history", "checkpoint", "progress",
                             "credit", "ran_usage", "ended_usage", "bill", "labels",
                             "container_env", "summary", "tenants", "array_tally", "array_retry",
                             "depends_on", "limits", "uses"})
LIST_ATTRIBUTES = frozenset({"job_ids", "cancel_jobs", "running_jobs", "bundle_ids",
                             "task_arns", "handed_jobs", "bulk_ids"})
NUMBER_ATTRIBUTES = frozenset(
    f.name for f in fields(Record) if f.type == "float | None")

# What the status index holds of an item besides its keys (pk, status_key, status_at): what its
# readers filter on, show or decode, and not the large or unbounded attributes (a job's payload,
# result, error, history, checkpoint; a REJECTED record's body; the tick's credit and summary;
# a bundle's cancel requests, running jobs and handed jobs, whose count the hand-off reads
# whole; an array's bookkeeping, a job's dependencies and its bulk actions' marks, read with
# the whole item) nor those
# no reader of the index reads (expires_at, reported_stop, a job's sequence) nor the
# deployment record's (image, container_env, derived_from, version: that item has no
# index key) nor the lease's mark (one_at_a_time: no index key either). A write that changes
# none of these nor a key writes nothing to the index (a checkpoint); a reader that needs the
# whole item reads it (``dispatcher.store.index.full``).
INDEX_KEYS = ("pk", "status_key", "status_at")
NOT_PROJECTED = frozenset({"payload", "result", "error", "history", "checkpoint", "progress",
                           "body",
                           "credit", "summary", "tenants", "shed", "limits", "uses", "bucket_at",
                           "cancel_jobs",
                           "running_jobs", "expires_at",
                           "reported_stop", "image", "container_env", "derived_from",
                           "version", "sequence", "handed_jobs", "handed", "array_size",
                           "array_tolerated", "array_next", "array_offered", "array_tally",
                           "array_parent", "array_index", "array_retry_next", "array_retry",
                           "depends_on", "waiters", "bulk_ids", "given_back_at", "batch",
                           "batch_next", "batch_last", "ran_succeeded", "ran_failed",
                           "ended_bundle", "ended_succeeded", "ended_failed",
                           "ran_usage", "ended_usage", "bill", "cost", "job_seconds", "labels",
                           "tenant", "group", "jobs", "failed", "vcpu_seconds",
                           "yielded_at", "one_at_a_time", "swept_at", "lease_count", "clean_at",
                           "released_at", "tenanted_at", "claim_token"})
INDEX_ATTRIBUTES: tuple[str, ...] = tuple(sorted(ATTRIBUTES - NOT_PROJECTED - set(INDEX_KEYS)))
