"""Wiring: build the adapters the configuration asks for. The only place that picks backends."""

from __future__ import annotations

import time

from dispatcher.aws import clients
from dispatcher.aws.dynamodb.store import DynamoStore
from dispatcher.aws.ecs import EcsLauncher
from dispatcher.aws.sqs import SqsQueue
from dispatcher.local.launcher import LocalLauncher
from dispatcher.ops.dryrun import DryRunLauncher, DryRunQueue, DryRunStore, Plan
from dispatcher.ports.launcher import Launcher
from dispatcher.settings import Config
from dispatcher.stages.launch import Launches
from dispatcher.stages.rerun import Reruns
from dispatcher.stages.tick import Dispatcher


def store(cfg: Config) -> DynamoStore:
    return DynamoStore(cfg.table, region=cfg.region, host=cfg.endpoint_url)


def queue(cfg: Config) -> SqsQueue:
    return SqsQueue(clients.client("sqs", cfg), cfg.queue_url)


def launcher(cfg: Config) -> Launcher:
    ecs = clients.client("ecs", cfg, retries=1)
    if cfg.launcher == "local":
        return LocalLauncher(cfg, ecs=ecs, region=cfg.region or "us-east-1")
    return EcsLauncher(ecs, cfg)


def dispatcher(cfg: Config, launch_with: Launcher | None = None) -> Dispatcher:
    return Dispatcher(cfg, queue(cfg), store(cfg), launch_with or launcher(cfg))


def reruns(cfg: Config, launch_with: Launcher | None = None) -> Reruns:
    return Reruns(Launches(cfg, store(cfg), launch_with or launcher(cfg), time.time))


def dry_run(cfg: Config) -> tuple[Dispatcher, Plan]:
    """A dispatcher whose tick writes nothing and reports what it would have done."""
    plan = Plan()
    d = Dispatcher(cfg, DryRunQueue(queue(cfg), plan), DryRunStore(store(cfg), plan),
                   DryRunLauncher(launcher(cfg), plan))
    return d, plan
