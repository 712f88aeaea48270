"""The pipeline wired: adapters handed to the stages, each stage receiving its collaborators.

``build`` wires any adapters (the AWS ones, the in-memory twins of ``dispatcher.testing``, the dry
run's wrappers, local mode's process launcher) to the stages; ``for_aws`` wires the AWS adapters
the settings name (:mod:`dispatcher.wiring.adapters`). Nothing here imports local mode, the CLI or
test support, so the Lambda package does not carry them: callers that launch local processes pass
their launcher in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dispatcher import logs, versions
from dispatcher.domain.bundle_sizes import BundleSizes
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.ports.launcher import Launcher
from dispatcher.ports.queue import Queue
from dispatcher.ports.task_definitions import TaskDefinitions
from dispatcher.settings import Config
from dispatcher.stages.admit import Admission
from dispatcher.stages.array_children import ArrayChildren
from dispatcher.stages.dependents import Dependents, DependentsStats
from dispatcher.stages.fanout import ArrayTally, FannedQueue
from dispatcher.stages.finish import Finishes
from dispatcher.stages.handoff import Handoffs
from dispatcher.stages.launch import Launches
from dispatcher.stages.policy import (
    AdmitPolicy,
    BundlePolicy,
    HandoffPolicy,
    LaunchPolicy,
    ReconcilePolicy,
    RerunPolicy,
    TickPolicy,
)
from dispatcher.stages.publish import publish_changes
from dispatcher.stages.reconcile import Reconciler
from dispatcher.stages.recorder import Recorder
from dispatcher.stages.rerun import Reruns
from dispatcher.stages.revision import Revisions
from dispatcher.stages.tick import Tick
from dispatcher.store import StageStore
from dispatcher.wiring import adapters


@dataclass(frozen=True)
class Stages:
    """The pipeline, wired: the tick (``tick``) and the stop handler (``reruns``)."""

    tick: Tick
    revisions: Revisions
    reruns: Reruns
    launches: Launches
    queue: Queue  # priority normal's (LONGJOBS_QUEUE_URL)
    store: StageStore
    launcher: Launcher
    queues: dict[Priority, Queue]  # one per priority level (several may be the same queue)
    dependents: Dependents  # releases jobs that wait for others (the table's stream consumer)


def build(cfg: Config, *, queue: Queue, store: StageStore, launcher: Launcher,
          clock: Callable[[], float] = time.time, pacer: LaunchPacer | None = None,
          priority_queues: dict[Priority, Queue] | None = None,
          task_definitions: TaskDefinitions | None = None) -> Stages:
    """Wire the given adapters to the stages, each stage receiving its own collaborators.

    ``queue`` serves priority normal and any level ``priority_queues`` does not name.
    ``task_definitions`` lets the tick re-derive the deployment after a stack update
    (``LONGJOBS_STACK_TASK_DEFINITION``; :mod:`dispatcher.stages.revision`); without it a
    deployment made before a stack update runs on the stack's earlier settings.
    ``pacer`` replaces the launch pacer built from the settings (the twins and the dry run
    simulate its waits instead of sleeping)."""
    queues = {p: (priority_queues or {}).get(p, queue) for p in PRIORITY_ORDER}
    logs.configure()
    # A retry the tick carries on (an array's) packs its bundles by the deployment's settings.
    store.bundle_sizes = bundle_sizes(cfg)
    bundling = BundlePolicy(cfg.bundle_max_jobs, cfg.bundle_max_seconds, cfg.small_job_seconds,
                            cfg.task_concurrency, follow_on_seconds=cfg.follow_on_seconds)
    uses_spot = any(p.provider == "FARGATE_SPOT" for p in cfg.capacity_strategy)
    launches = Launches(store, launcher, LaunchPolicy(
        cfg.launch_recovery_seconds, cfg.launch_backoff_seconds,
        cfg.launch_backoff_max_seconds, spot_fallback=cfg.spot_fallback and uses_spot,
        runtask_per_second=cfg.runtask_per_second, task_launch_burst=cfg.task_launch_burst,
        task_launch_per_second=cfg.task_launch_per_second,
        capacity_providers=tuple(p.provider for p in cfg.capacity_strategy) or ("FARGATE",)),
        clock, pacer=pacer)
    revisions = Revisions(store, launcher, task_definitions, cfg.stack_task_definition or None)
    reruns = Reruns(store, revisions, Finishes(store), launches, RerunPolicy(
        cfg.max_infra_attempts, cfg.task_concurrency, cfg.kind_limits, cfg.max_running_tasks,
        cfg.prices), clock)
    dependents = Dependents(store, clock)
    reconciler = Reconciler(store, launcher, reruns, ReconcilePolicy(
        cfg.start_timeout_seconds, cfg.heartbeat_seconds), clock, dependents)
    # One fanned queue per distinct queue (levels that share a queue share its array children,
    # as they share its messages: Admission drains a shared queue once).
    fanned: dict[int, FannedQueue] = {}
    for q in queues.values():
        fanned.setdefault(id(q), FannedQueue(q, ArrayChildren(store)))
    children = {p: fanned[id(q)].children for p, q in queues.items()}
    admission = Admission({p: fanned[id(q)] for p, q in queues.items()},
                          Recorder(store, dependents),
                          AdmitPolicy(cfg.allowed_kinds, bundling, cfg.kind_limits), clock,
                          concurrency=cfg.tick_concurrency, hold_seconds=cfg.hold_seconds,
                          rate_limits=store.rate_limits)
    handoffs = Handoffs(store, HandoffPolicy(cfg.heartbeat_seconds, cfg.task_concurrency,
                                             cfg.urgent_watch_seconds, cfg.kind_limits), clock)
    tick = Tick(store, revisions, admission, launches, reconciler,
                TickPolicy(cfg.max_running_tasks, cfg.tick_seconds, cfg.lease_seconds,
                           cfg.tick_reserve_seconds, cfg.tick_concurrency, cfg.hold_seconds,
                           cfg.kind_limits, cfg.task_concurrency, cfg.priority_weights,
                           cfg.tick_one_at_a_time, cfg.small_job_seconds,
                           cfg.tenant_half_life_seconds),
                clock=clock, handoffs=handoffs, arrays=ArrayTally(store, children, clock),
                versions=versions.running())
    return Stages(tick, revisions, reruns, launches, queue, store, launcher, queues, dependents)


def bundle_sizes(cfg: Config) -> BundleSizes:
    """The sizing rule admission packs by, which a retry's bundles are packed by too."""
    return BundleSizes(cfg.bundle_max_jobs, cfg.bundle_max_seconds, cfg.small_job_seconds,
                       cfg.task_concurrency, cfg.kind_limits)


def for_aws(cfg: Config, launch_with: Launcher | None = None) -> Stages:
    """The stages on the AWS adapters the settings name (``launch_with`` replaces ECS)."""
    queues = adapters.queues(cfg)
    return build(cfg, queue=queues[Priority.NORMAL], store=adapters.store(cfg),
                 launcher=launch_with or adapters.launcher(cfg), priority_queues=queues,
                 task_definitions=adapters.task_definitions(cfg))


def aws_tick(cfg: Config, launch_with: Launcher | None = None) -> Tick:
    """The tick on the AWS adapters the settings name (:func:`for_aws`)."""
    return for_aws(cfg, launch_with).tick



def publish_stream(cfg: Config, records: list[dict[str, Any]]) -> list[str]:
    """The publisher function's work: the job state-change events of a batch of the job
    table's stream records, sent to the configured bus; the SequenceNumbers of the records
    whose events were not sent (the batch is read again from the first of them)."""
    return publish_changes(adapters.stream_changes(records), adapters.event_sink(cfg, records))


def release_stream(cfg: Config, records: list[dict[str, Any]]) -> DependentsStats:
    """The dependents function's work: the jobs that wait for those a batch of the job
    table's stream records ended, released or cancelled (stages/dependents.py)."""
    return Dependents(adapters.store(cfg), time.time).on_changes(
        adapters.stream_changes(records))
