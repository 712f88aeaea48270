"""The composition root: the one place that picks adapters and wires them to the stages.

``build`` wires any adapters (the AWS ones, the in-memory twins of ``dispatcher.testing``, the dry
run's wrappers, local mode's process launcher) to the stages; ``for_aws`` builds the AWS adapters
the settings name. Nothing here imports local mode, the CLI or test support, so the Lambda
package does not carry them: callers that launch local processes pass their launcher in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher import logs
from dispatcher.aws import clients
from dispatcher.aws.dynamodb import open_store
from dispatcher.aws.ecs import EcsLauncher, EcsTarget
from dispatcher.aws.sqs import SqsQueue
from dispatcher.domain.errors import ConfigError
from dispatcher.domain.jobs import PRIORITY_ORDER, Priority
from dispatcher.ports.launcher import Launcher, LaunchPacer
from dispatcher.ports.queue import Queue
from dispatcher.ports.store import DispatchStore
from dispatcher.settings import Config
from dispatcher.stages.admit import Intake
from dispatcher.stages.launch import Launches
from dispatcher.stages.policy import (
    AdmitPolicy,
    BundlePolicy,
    LaunchPolicy,
    ReconcilePolicy,
    RerunPolicy,
    TickPolicy,
)
from dispatcher.stages.reconcile import Reconciler
from dispatcher.stages.rerun import Reruns
from dispatcher.stages.tick import Dispatcher


@dataclass(frozen=True)
class Stages:
    """The pipeline, wired: the tick (``dispatcher``) and the stop handler (``reruns``)."""

    dispatcher: Dispatcher
    reruns: Reruns
    launches: Launches
    queue: Queue  # priority normal's (LONGJOBS_QUEUE_URL)
    store: DispatchStore
    launcher: Launcher
    queues: dict[Priority, Queue]  # one per priority level (several may be the same queue)


def build(cfg: Config, *, queue: Queue, store: DispatchStore, launcher: Launcher,
          clock: Callable[[], float] = time.time, pacer: LaunchPacer | None = None,
          priority_queues: dict[Priority, Queue] | None = None) -> Stages:
    """Wire the given adapters to the stages, each stage receiving its own collaborators.

    ``queue`` serves priority normal and any level ``priority_queues`` does not name.
    ``pacer`` replaces the launch pacer built from the settings (the twins and the dry run
    simulate its waits instead of sleeping)."""
    queues = {p: (priority_queues or {}).get(p, queue) for p in PRIORITY_ORDER}
    logs.configure()
    bundling = BundlePolicy(cfg.bundle_max_jobs, cfg.bundle_max_seconds, cfg.small_job_seconds,
                            cfg.task_concurrency)
    uses_spot = any(p.provider == "FARGATE_SPOT" for p in cfg.capacity_strategy)
    launches = Launches(store, launcher, LaunchPolicy(
        cfg.launch_recovery_seconds, cfg.launch_backoff_seconds,
        cfg.launch_backoff_max_seconds, spot_fallback=cfg.spot_fallback and uses_spot,
        runtask_per_second=cfg.runtask_per_second, task_launch_burst=cfg.task_launch_burst,
        task_launch_per_second=cfg.task_launch_per_second,
        capacity_providers=tuple(p.provider for p in cfg.capacity_strategy) or ("FARGATE",)),
        clock, pacer=pacer)
    reruns = Reruns(store, launcher, launches, RerunPolicy(
        cfg.max_infra_attempts, cfg.task_concurrency, cfg.kind_limits), clock)
    reconciler = Reconciler(store, launcher, reruns, ReconcilePolicy(
        cfg.start_timeout_seconds, cfg.heartbeat_seconds), clock)
    intake = Intake(queues, store, AdmitPolicy(cfg.allowed_kinds, bundling, cfg.kind_limits),
                    clock, concurrency=cfg.tick_concurrency, hold_seconds=cfg.hold_seconds)
    tick = Dispatcher(store, launcher, intake, launches, reconciler,
                      TickPolicy(cfg.max_running_tasks, cfg.tick_seconds, cfg.lease_seconds,
                                 cfg.tick_reserve_seconds, cfg.tick_concurrency,
                                 cfg.hold_seconds, cfg.kind_limits, cfg.task_concurrency,
                                 cfg.priority_weights),
                      clock=clock)
    return Stages(tick, reruns, launches, queue, store, launcher, queues)


def store(cfg: Config) -> DispatchStore:
    return open_store(cfg.table, region=cfg.region, host=cfg.endpoint_url,
                      retention_days=cfg.retention_days)


def queue(cfg: Config) -> SqsQueue:
    return SqsQueue(clients.client("sqs", cfg), cfg.queue_url)


def priority_queues(cfg: Config) -> dict[Priority, Queue]:
    """The high and low queues the settings name (unnamed levels share the normal queue)."""
    sqs = clients.client("sqs", cfg)
    urls = {Priority.HIGH: cfg.high_queue_url, Priority.LOW: cfg.low_queue_url}
    return {p: SqsQueue(sqs, url) for p, url in urls.items() if url}


def launcher(cfg: Config) -> Launcher:
    if cfg.launcher == "local":
        raise ConfigError("LONGJOBS_LAUNCHER=local runs tasks as local processes: only local "
                          "mode (longjobs local / longjobs demo) can launch them")
    return EcsLauncher(clients.client("ecs", cfg, retries=1), EcsTarget.from_config(cfg))


def for_aws(cfg: Config, launch_with: Launcher | None = None) -> Stages:
    """The stages on the AWS adapters the settings name (``launch_with`` replaces ECS)."""
    return build(cfg, queue=queue(cfg), store=store(cfg),
                 launcher=launch_with or launcher(cfg), priority_queues=priority_queues(cfg))


def dispatcher(cfg: Config, launch_with: Launcher | None = None) -> Dispatcher:
    return for_aws(cfg, launch_with).dispatcher

