"""The settings each stage acts on, as plain values.

Stages never read the environment or the settings module: the composition root
(:mod:`dispatcher.wiring`) builds these from the validated settings and passes each stage its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dispatcher.domain.bundle_sizes import work_budget
from dispatcher.domain.costs import Prices


@dataclass(frozen=True)
class BundlePolicy:
    bundle_max_jobs: int = 10_000
    bundle_max_seconds: float = 900.0  # of one task's time, at task_concurrency in parallel
    small_job_seconds: float = 60.0
    task_concurrency: int = 1  # jobs a task runs at once
    # A task's seconds in one follow-on of a large drain (stages/bundle.py); 0: none.
    follow_on_seconds: float = 0.0

    @property
    def max_work_seconds(self) -> float:
        """Estimated job-seconds one bundle may hold."""
        return work_budget(self.bundle_max_seconds, self.task_concurrency)


@dataclass(frozen=True)
class AdmitPolicy:
    allowed_kinds: tuple[str, ...] = ()
    bundling: BundlePolicy = BundlePolicy()
    kind_limits: Mapping[str, int] = field(default_factory=dict)  # running jobs per kind


@dataclass(frozen=True)
class LaunchPolicy:
    recovery_seconds: float = 60.0  # age after which an unfinished launch is retried
    backoff_seconds: float = 30.0  # first backoff after RunTask failures[]; doubles per failure
    backoff_max_seconds: float = 900.0
    # Relaunch bundles Fargate Spot had no capacity for at once, on on-demand FARGATE (set
    # only when the capacity strategy uses FARGATE_SPOT and LONGJOBS_SPOT_FALLBACK is on).
    spot_fallback: bool = False
    # Fargate's two launch limits: RunTask calls per second, and task launches per capacity
    # provider (a token bucket: burst, then a sustained rate).
    runtask_per_second: float = 20.0
    task_launch_burst: int = 100
    task_launch_per_second: float = 20.0
    # The capacity providers a launch may draw tasks from ("FARGATE" when no strategy is set).
    capacity_providers: tuple[str, ...] = ("FARGATE",)


@dataclass(frozen=True)
class RerunPolicy:
    max_infra_attempts: int = 10
    # What an immediate relaunch decides its slots with (as the tick does: launch_slots).
    task_concurrency: int = 1
    kind_limits: Mapping[str, int] = field(default_factory=dict)
    # An immediate relaunch only below it; at it (a limit lowered since) the tick relaunches.
    max_running_tasks: int = 10
    # What a task's bill is priced at (dispatcher.domain.costs; setting LONGJOBS_PRICES).
    prices: Prices = field(default_factory=Prices)


@dataclass(frozen=True)
class ReconcilePolicy:
    start_timeout_seconds: float = 600.0
    heartbeat_seconds: float = 30.0


@dataclass(frozen=True)
class TickPolicy:
    max_running_tasks: int = 10
    tick_seconds: float = 50.0  # budget outside Lambda
    lease_seconds: float = 300.0
    reserve_seconds: float = 30.0  # Lambda time kept back from the drain
    concurrency: int = 8  # AWS calls in flight while receiving, recording, deleting
    hold_seconds: float = 300.0  # visibility timeout of received messages
    kind_limits: Mapping[str, int] = field(default_factory=dict)  # running jobs per kind
    task_concurrency: int = 1  # jobs a task runs at once
    # Each priority's weight in sharing the free task slots (dispatcher.domain.fairness).
    priority_weights: Mapping[str, int] = field(
        default_factory=lambda: {"high": 6, "normal": 3, "low": 1})
    # The platform runs these ticks one at a time (LONGJOBS_TICK_ONE_AT_A_TIME): a dead one's
    # lease is taken over at once (StageStore.acquire_lease).
    one_at_a_time: bool = False
    # A running task whose jobs are this short (on average) takes follow-ons soon: the tick
    # cuts the backlog into follow-ons for it (LONGJOBS_SMALL_JOB_SECONDS).
    small_job_seconds: float = 60.0
    # How fast a tenant's counted usage is forgotten (LONGJOBS_TENANT_HALF_LIFE_SECONDS).
    tenant_half_life_seconds: float = 600.0


@dataclass(frozen=True)
class HandoffPolicy:
    """Urgent jobs handed to running tasks when no slot is free (stages/handoff.py)."""

    heartbeat_seconds: float = 30.0  # a host must have beaten within two of these
    task_concurrency: int = 1  # jobs handed to one host in one tick, at most
    # How long a tick with every slot busy keeps long-polling the high queue for urgent jobs
    # (0: one look); the tick runs every minute, so a little less than that.
    watch_seconds: float = 0.0
    # Running jobs per kind (LONGJOBS_KIND_LIMITS): a bundle of a limited kind neither takes
    # nor gives urgent jobs, whose runs its limit would not count.
    kind_limits: Mapping[str, int] = field(default_factory=dict)
