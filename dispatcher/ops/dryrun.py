"""Dry run: the tick decides everything and writes nothing.

Stand-ins for what the tick writes through, each wrapping the real one: the queues, the
dispatch store and the launcher. Reads go through; every write is recorded as what it *would*
have been and never made. They replace the adapters the tick is given (``pipeline.build``); they
are not middleware in dramatiq's sense, hooks that a broker calls around each message. The
queues (normal, and high and low if configured) are read with a 60 s visibility timeout, so
messages are hidden only while the dry tick reads them, and are made visible again right
after (``DryRunPlan.finish``); each read still counts as a receive toward the DLQ's
maxReceiveCount, so run it by hand, not on a schedule.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from dispatcher.domain import rate_limits
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.costs import TaskCost
from dispatcher.domain.deployment import Deployment
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, Priority, Rejection
from dispatcher.domain.launches import Launch
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.domain.schedules import FireRecord
from dispatcher.domain.tenant_shares import TenantPolicy
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.launcher import Launcher, LaunchRequest, LaunchResult, TaskStatus
from dispatcher.ports.queue import BATCH, Backlog, Queue, Received
from dispatcher.ports.table import Op, Record
from dispatcher.settings import Config
from dispatcher.stages.tick import Tick
from dispatcher.store import JobUpdate, LaunchOutcome, SavedSummary, StageStore
from dispatcher.store.array_jobs import OpenArray
from dispatcher.store.values import Lease, TaskPointer
from dispatcher.wiring import adapters, pipeline

READ_SECONDS = 60


class DryRunPlan:
    """What the tick would have done, in order."""

    def __init__(self) -> None:
        self.actions: list[dict[str, Any]] = []
        self.received: list[tuple[Queue, list[Received]]] = []  # each read, with its queue

    def finish(self) -> None:
        """Put every message the dry tick read back in its queue, visible at once."""
        for queue, batch in self.received:
            for start in range(0, len(batch), BATCH):
                queue.release(batch[start:start + BATCH])
        self.received.clear()

    def would(self, action: str, **details: Any) -> None:
        self.actions.append({"would": action, **details})


class DryRunQueue(Queue):
    def __init__(self, inner: Queue, plan: DryRunPlan) -> None:
        self._inner, self._plan = inner, plan

    def send(self, entries: list[tuple[str, str]]) -> dict[str, str]:
        self._plan.would("send", messages=len(entries))
        return {}

    def receive(self, max_messages: int = BATCH,
                visibility_timeout: int | None = None, wait_seconds: int = 0) -> list[Received]:
        # Hidden while the dry tick reads on (so it sees past the first 10), restored after.
        batch = self._inner.receive(max_messages, visibility_timeout=READ_SECONDS)
        self._plan.received.append((self._inner, batch))
        return batch

    def delete(self, messages: list[Received]) -> dict[str, str]:
        self._plan.would("delete_messages", message_ids=[m.message_id for m in messages])
        return {}

    def release(self, messages: list[Received], after: int = 0) -> None:
        if not after:  # a longer hold: nothing a plan needs (the dry run gives all back)
            self._plan.would("leave_in_queue", message_ids=[m.message_id for m in messages])

    def backlog(self) -> Backlog:
        return self._inner.backlog()


class DryRunStore(StageStore):
    def __init__(self, inner: StageStore, plan: DryRunPlan) -> None:
        self._inner, self._plan = inner, plan
        self._noted: dict[str, FireRecord] = {}  # schedules' records as this run noted them

    def acquire_lease(self, owner: str, seconds: float, *,
                      one_at_a_time: bool = False) -> Lease | None:
        return Lease(owner)  # a dry run does not take the lease (it writes nothing to protect)

    def release_lease(self, owner: str, *, swept_at: float | None = None,
                      held: Lease | None = None, clean: bool = False,
                      summary: SavedSummary | None = None, tenanted: bool = False) -> None:
        if summary is not None:  # the tick's summary rides on the release
            self.save_tick_summary(*summary)

    def active_bundles(self) -> list[Bundle]:
        return self._inner.active_bundles()

    def active_count(self) -> int:
        return self._inner.active_count()

    def due_bundles(self, limit: int, at: float, full_kinds: Collection[str] = (),
                    priorities: Collection[Priority] | None = None, *,
                    follow_ons: bool = False, apart: Collection[str] = ()) -> list[Bundle]:
        return self._inner.due_bundles(limit, at, full_kinds, priorities,
                                       follow_ons=follow_ons, apart=apart)

    def due_page(self, limit: int, at: float, full_kinds: Collection[str] = (),
                 priorities: Collection[Priority] | None = None, *, follow_ons: bool = False,
                 after: Record | None = None, apart: Collection[str] = ()
                 ) -> tuple[list[Bundle], Record | None]:
        return self._inner.due_page(limit, at, full_kinds, priorities, follow_ons=follow_ons,
                                    after=after, apart=apart)

    def tenant_state(self) -> tuple[dict[str, TenantPolicy], dict[str, float], float | None]:
        return self._inner.tenant_state()

    def tenant_policies(self) -> dict[str, TenantPolicy]:
        return self._inner.tenant_policies()

    def save_tenant_usage(self, usage: Mapping[str, float], at: float) -> None:
        self._plan.would("save_tenant_usage", tenants=len(usage))

    def rate_limits(self) -> dict[str, RateLimit]:
        return self._inner.rate_limits()

    def buckets(self, shards: Iterable[tuple[str, int]]) -> dict[tuple[str, int], float]:
        return self._inner.buckets(shards)

    def take(self, bucket: str, shard: int, n: float, limit: RateLimit, now: float,
             known: float | None) -> float | None:
        self._plan.would("take_tokens", bucket=bucket, shard=shard, tokens=n)
        return rate_limits.grant(known, now, n, limit)

    def batch_cursors(self, batches: list[str]) -> dict[str, tuple[int, int | None]]:
        return self._inner.batch_cursors(batches)

    def bundles_of(self, bundle_ids: list[str]) -> list[Bundle]:
        return self._inner.bundles_of(bundle_ids)

    def priority_credit(self) -> dict[str, float]:
        return self._inner.priority_credit()

    def deployment(self) -> Deployment | None:
        return self._inner.deployment()

    def save_deployment(self, new: Deployment, read: Deployment | None) -> Deployment:
        self._plan.would("save_deployment", task_definition=new.task_definition,
                         derived_from=new.derived_from, image=new.image)
        return new

    def save_priority_credit(self, credit: Mapping[str, float]) -> None:
        self._plan.would("save_priority_credit", credit=dict(credit))

    def save_tick_revision(self, task_definition: str, version: int | None) -> None:
        self._plan.would("save_tick_revision", task_definition=task_definition,
                         version=version)

    def save_tick_summary(self, summary: TickSummary, task_definition: str | None = None,
                          version: int | None = None) -> None:
        self._plan.would("save_tick_summary", summary=summary.to_json(),
                         task_definition=task_definition, version=version)

    def orphaned_launches(self, older_than: float) -> list[Launch]:
        return self._inner.orphaned_launches(older_than)

    def recover_recordings(self) -> list[Bundle]:
        return []  # commits nothing: a crashed tick's RECORDING bundles wait for a real tick

    def job_ids_of(self, bundle: Bundle) -> list[str]:
        return self._inner.job_ids_of(bundle)

    def record(self, bundles: list[Bundle], jobs: list[Job]) -> set[str]:
        existing = {j.job_id for j in self._inner.get_jobs([j.job_id for j in jobs])}
        for b in bundles:
            b.job_ids = [j for j in b.job_ids if j not in existing]
        self._plan.would("record", bundles=[{"bundle_id": b.bundle_id, "jobs": b.job_ids,
                                             "estimated_seconds": b.estimated_seconds}
                                            for b in bundles if b.job_ids],
                         duplicates=sorted(existing))
        return existing

    def reject(self, rejections: list[Rejection]) -> None:
        self._plan.would("reject", rejections=[{"key": r.key, "reason": r.reason}
                                               for r in rejections])

    def begin_launch(self, launch: Launch, bundles: list[Bundle]) -> None:
        self._plan.would("launch", launch_id=launch.launch_id, bundles=launch.bundle_ids,
                         task_definition=launch.task_definition)
        for b in bundles:
            b.state, b.attempt = BundleState.LAUNCHING, b.attempt + 1

    def finish_launch(self, launch: Launch, outcome: LaunchOutcome,
                      retry_at: dict[str, float]) -> None:
        return None

    def get_job(self, job_id: str) -> Job | None:
        return self._inner.get_job(job_id)

    def get_bundle(self, bundle_id: str) -> Bundle | None:
        return self._inner.get_bundle(bundle_id)

    def get_jobs(self, job_ids: list[str]) -> list[Job]:
        return self._inner.get_jobs(job_ids)

    def bundle_for_task(self, task_arn: str) -> Bundle | None:
        return self._inner.bundle_for_task(task_arn)

    def task_pointer(self, task_arn: str) -> TaskPointer | None:
        return self._inner.task_pointer(task_arn)

    def get_rejection(self, key: str) -> Rejection | None:
        return self._inner.get_rejection(key)

    def first_report(self, bundle_id: str, task_arn: str,
                     bill: TaskCost | None = None) -> tuple[bool, bool]:
        self._plan.would("mark_stop_reported", bundle_id=bundle_id, task_arn=task_arn)
        return True, bill is not None and self.settle_bill(bill)

    def index_labels(self, jobs: Sequence[Job]) -> None:
        if jobs:
            self._plan.would("index_labels", job_ids=[j.job_id for j in jobs])

    def settle_bill(self, s: TaskCost, with_ops: Sequence[Op] = ()) -> bool:
        self._plan.would("settle_bill", task_arn=s.task_arn, cost=s.cost,
                         job_seconds=s.usage.seconds)
        return True

    def settle(self, bundle: Bundle, updates: list[JobUpdate], target: BundleState,
               retry_at: float | None = None, *, serial: bool = False) -> set[str]:
        self._plan.would("settle", bundle_id=bundle.bundle_id, to=str(target), serial=serial,
                         jobs=[{**asdict(u), "source": str(u.source), "target": str(u.target)}
                               for u in updates])
        bundle.state = target
        return set()

    def full_bundles(self, bundle_ids: list[str]) -> list[Bundle]:
        return self._inner.full_bundles(bundle_ids)

    def full_bundles_now(self, bundle_ids: list[str]) -> list[Bundle]:
        return self._inner.full_bundles_now(bundle_ids)

    def hand(self, source: Bundle, job_ids: list[str], host: Bundle) -> list[str]:
        moving = [j for j in job_ids if j in source.job_ids]
        self._plan.would("hand", job_ids=moving, from_bundle=source.bundle_id,
                         to_bundle=host.bundle_id, task_arn=host.task_arn)
        host.handed_jobs = [*host.handed_jobs, *moving]
        source.job_ids = [j for j in source.job_ids if j not in moving]
        if not source.job_ids:
            source.state = BundleState.DONE
        return moving

    def running_jobs(self, *, overdue_by: float | None = None) -> list[Job]:
        return self._inner.running_jobs(overdue_by=overdue_by)

    def held_bundles(self) -> list[Bundle]:
        return self._inner.held_bundles()

    def release_held(self, bundle: Bundle, job: Job) -> None:
        self._plan.would("release_held", bundle_id=bundle.bundle_id, job_id=job.job_id)

    def claim_sweep(self, every: float) -> float | None:
        # A dry tick shows the look at every held dependent, writing nothing.
        return self._inner.clock()

    def give_back_sweep(self, claimed_at: float, every: float, after: float) -> bool:
        return False  # it claimed nothing

    def held_dependents(self, among: list[str] | None = None) -> list[tuple[Bundle, Job]]:
        return self._inner.held_dependents(among)

    def link(self, dependent_id: str, job_ids: list[str]) -> list[str]:
        self._plan.would("link_dependent", job_id=dependent_id, waits_for=job_ids)
        return []

    def waiting_for(self, job_id: str) -> list[str]:
        return self._inner.waiting_for(job_id)

    def unlinked(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return self._inner.unlinked(pairs)

    def refresh_links(self, dependents: list[Job], within: float) -> int:
        self._plan.would("refresh_dependency_links", job_ids=[j.job_id for j in dependents])
        return 0

    def fail_overdue(self, job: Job, reason: str) -> None:
        self._plan.would("fail", job_id=job.job_id, reason=reason)

    def record_parents(self, parents: list[Job]) -> set[str]:
        existing = {j.job_id for j in self._inner.get_jobs([j.job_id for j in parents])}
        self._plan.would("record_arrays", jobs=[j.job_id for j in parents
                                                if j.job_id not in existing],
                         duplicates=sorted(existing))
        return existing

    def open_arrays(self, priority: Priority | None = None) -> list[OpenArray]:
        return self._inner.open_arrays(priority)

    def recorded_up_to(self, parent_id: str, n: int) -> None:
        self._plan.would("record_children", job_id=parent_id, up_to=n)

    def may_offer(self, parent_id: str, below: int) -> bool:
        return True  # the mark guards recordings, and a dry tick records nothing

    def offered_back(self, parent_id: str, mark: int, down_to: int) -> None:
        pass

    def settle_array(self, array: OpenArray, pages: int = 1000) -> OpenArray:
        if array.retry is not None and array.parent.state not in TERMINAL_JOB_STATES:
            self._plan.would("retry_array_children", job_id=array.parent.job_id,
                             from_child=array.retry.next, through=array.retry.through)
        return array  # its parent's state is written by a real tick

    def fire_record(self, name: str) -> FireRecord:
        # What this dry tick noted so far (kept here, not written): its next fire of the
        # schedule is judged as the tick would judge it.
        return self._noted.get(name) or self._inner.fire_record(name)

    def save_fire_record(self, record: FireRecord) -> None:
        self._noted[record.name] = replace(record, version=record.version + 1)
        self._plan.would("note_fire", schedule=record.name, last_run=record.last_run,
                         fires=[f.as_json() for f in record.fires[:3]])

    def record_skipped(self, job: Job, reason: str) -> bool:
        self._plan.would("record_skipped", job_id=job.job_id, reason=reason)
        return True

    def job_states(self, job_ids: list[str]) -> dict[str, str | None]:
        return self._inner.job_states(job_ids)

    def cancel_held(self, bundle: Bundle, job: Job, reason: str) -> None:
        self._plan.would("cancel_dependent", job_id=job.job_id, reason=reason)

    def array_may_start(self, parent: Job, reason: str | None = None,
                        keep: list[dict[str, str | bool]] | None = None) -> None:
        self._plan.would("start_array" if reason is None else "cancel_dependent",
                         job_id=parent.job_id, reason=reason)

    def end_live_runs(self, task_arn: str, jobs: list[Job]) -> None:
        ended = [j.job_id for j in jobs if j.live_task == task_arn]
        if ended:
            self._plan.would("end_live_runs", task_arn=task_arn, job_ids=ended)


class DryRunLauncher(Launcher):
    def __init__(self, inner: Launcher, plan: DryRunPlan) -> None:
        self._inner, self._plan = inner, plan

    def resolve_task_definition(self) -> str:
        return self._inner.resolve_task_definition()

    def run(self, request: LaunchRequest) -> LaunchResult:
        self._plan.would("run_task", count=request.count, client_token=request.client_token,
                         task_definition=request.task_definition)
        return LaunchResult([f"dry-run-task-{i}" for i in range(request.count)], [])

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        return self._inner.describe(task_arns)

    def stop(self, task_arn: str, reason: str) -> None:
        self._plan.would("stop_task", task_arn=task_arn, reason=reason)


def dry_run(cfg: Config) -> tuple[Tick, DryRunPlan]:
    """A dispatcher whose tick writes nothing and reports what it would have done."""
    plan = DryRunPlan()
    wrapped: dict[int, Queue] = {}  # one wrapper per queue: levels sharing a queue still do
    queues = {p: wrapped.setdefault(id(q), DryRunQueue(q, plan))
              for p, q in adapters.queues(cfg).items()}
    # No task definitions: a deployment made before a stack update is shown launching its own
    # revision; the real tick registers its copy of the stack's new revision first.
    stages = pipeline.build(cfg, queue=queues[Priority.NORMAL], priority_queues=queues,
                          store=DryRunStore(adapters.store(cfg), plan),
                          launcher=DryRunLauncher(adapters.launcher(cfg), plan),
                          # Starts nothing, so waits for nothing: paced_seconds still shows
                          # what a real launch would have waited.
                          pacer=LaunchPacer.simulated(
                              runtask_per_second=cfg.runtask_per_second,
                              task_launch_burst=cfg.task_launch_burst,
                              task_launch_per_second=cfg.task_launch_per_second))
    return stages.tick, plan
