"""The settings each stage acts on, as plain values.

Stages never read the environment or the settings module: the composition root
(:mod:`dispatcher.wiring`) builds these from the validated settings and passes each stage its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BundlePolicy:
    bundle_max_jobs: int = 50
    bundle_max_seconds: float = 900.0
    small_job_seconds: float = 60.0


@dataclass(frozen=True)
class AdmitPolicy:
    allowed_kinds: tuple[str, ...] = ()
    bundling: BundlePolicy = BundlePolicy()


@dataclass(frozen=True)
class LaunchPolicy:
    recovery_seconds: float = 60.0  # age after which an unfinished launch is retried
    backoff_seconds: float = 30.0  # first backoff after RunTask failures[]; doubles per failure
    backoff_max_seconds: float = 900.0
    # Relaunch bundles Fargate Spot had no capacity for at once, on on-demand FARGATE (set
    # only when the capacity strategy uses FARGATE_SPOT and LONGJOBS_SPOT_FALLBACK is on).
    spot_fallback: bool = False


@dataclass(frozen=True)
class RerunPolicy:
    max_infra_attempts: int = 10


@dataclass(frozen=True)
class ReconcilePolicy:
    start_timeout_seconds: float = 600.0
    heartbeat_seconds: float = 30.0


@dataclass(frozen=True)
class TickPolicy:
    max_running_tasks: int = 10
    tick_seconds: float = 50.0
    lease_seconds: float = 300.0
