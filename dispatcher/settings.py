"""Every setting longjobs reads, read in one place and validated before any work starts.

The settings table below is the single source of truth: the config module parses it, the README's
configuration reference is generated from it, and the infra tests check that the SAM template sets
exactly the variables the dispatcher requires.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain.errors import ConfigError

# DynamoDB's TransactWriteItems takes at most 100 actions; a bundle and all its jobs are written in
# one transaction, so a bundle holds at most 99 jobs.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
MAX_BUNDLE_JOBS = 99


@dataclass(frozen=True)
class Setting:
    name: str
    meaning: str
    default: str | None = None  # None means required (for the roles that need it)
    roles: tuple[str, ...] = ("dispatcher",)


SETTINGS: tuple[Setting, ...] = (
    Setting("LONGJOBS_QUEUE_URL", "URL of the SQS job queue.", None,
            ("dispatcher", "client")),
    Setting("LONGJOBS_DLQ_URL", "URL of the job queue's dead-letter queue (operators' dlq "
            "commands).", "", ("dispatcher", "client")),
    Setting("LONGJOBS_TABLE", "Name of the DynamoDB job table.", None,
            ("dispatcher", "client", "runner")),
    Setting("LONGJOBS_CLUSTER", "ECS cluster name or ARN the tasks run in.", None),
    Setting("LONGJOBS_TASK_FAMILY", "Task-definition family of the worker; the latest ACTIVE "
            "revision is resolved once per tick and pinned on every launch.", None),
    Setting("LONGJOBS_CONTAINER", "Name of the worker container (target of env overrides).",
            "worker"),
    Setting("LONGJOBS_SUBNETS", "Comma-separated subnet ids for awsvpc networking (ECS launcher).",
            ""),
    Setting("LONGJOBS_SECURITY_GROUPS", "Comma-separated security-group ids (ECS launcher).", ""),
    Setting("LONGJOBS_ASSIGN_PUBLIC_IP", "ENABLED or DISABLED: public IP for Fargate tasks.",
            "DISABLED"),
    Setting("LONGJOBS_CAPACITY_STRATEGY", "Capacity-provider strategy as provider:weight[:base],"
            "... (e.g. FARGATE_SPOT:4,FARGATE:1:1); empty means launch type FARGATE.", ""),
    Setting("LONGJOBS_MAX_RUNNING_TASKS", "Admission limit: bundles launched and not finished.",
            "10"),
    Setting("LONGJOBS_BUNDLE_MAX_JOBS", f"Most jobs in one bundle (1..{MAX_BUNDLE_JOBS}).", "50"),
    Setting("LONGJOBS_BUNDLE_MAX_SECONDS", "Most estimated seconds of work in one bundle.", "900"),
    Setting("LONGJOBS_SMALL_JOB_SECONDS", "Jobs estimated at or under this many seconds are "
            "bundled; others (and jobs with no estimate) run alone.", "60"),
    Setting("LONGJOBS_ALLOWED_KINDS", "Comma-separated allow-list of job kinds; empty allows any.",
            "", ("dispatcher", "client")),
    Setting("LONGJOBS_LAUNCHER", "ecs (RunTask) or local (tasks as local processes).", "ecs"),
    Setting("LONGJOBS_TICK_SECONDS", "Time budget of one tick when not inside Lambda.", "50"),
    Setting("LONGJOBS_LEASE_SECONDS", "Expiry of the tick lease; longer than any tick can run.",
            "300"),
    Setting("LONGJOBS_LAUNCH_BACKOFF_SECONDS", "First backoff after RunTask failures[]; doubles "
            "per failure.", "30"),
    Setting("LONGJOBS_LAUNCH_BACKOFF_MAX_SECONDS", "Cap of that backoff.", "900"),
    Setting("LONGJOBS_RUNTASK_PER_SECOND", "Pace of RunTask calls (Fargate allows 20/s).", "20"),
    Setting("LONGJOBS_MAX_INFRA_ATTEMPTS", "Reruns after infrastructure stops (Spot, host "
            "failure, never started) before a job fails; separate from a job's max_attempts.",
            "10"),
    Setting("LONGJOBS_START_TIMEOUT_SECONDS", "A launched task that has not claimed its bundle "
            "after this long is checked with DescribeTasks.", "600"),
    Setting("LONGJOBS_HEARTBEAT_SECONDS", "Runner heartbeat interval; a bundle silent for 4 "
            "intervals is checked and, if its task still runs, stopped and rerun.", "30",
            ("dispatcher", "runner")),
    Setting("LONGJOBS_ASSIGN_WAIT_SECONDS", "How long a runner waits for its bundle assignment "
            "before exiting without running anything.", "120", ("runner",)),
    Setting("LONGJOBS_FLUSH_SECONDS", "Longest a finished job's result waits to be written "
            "with others.", "2", ("runner",)),
    Setting("LONGJOBS_HANDLERS", "Job handlers as kind=module:function,... (added to the "
            "longjobs.handlers entry points).", "", ("runner",)),
    Setting("LONGJOBS_RETRY_ANY_EXCEPTION", "true: any handler exception is retried while "
            "attempts remain; false: only RetryableError is.", "true", ("runner",)),
    Setting("LONGJOBS_METRICS_NAMESPACE", "CloudWatch namespace of the EMF metrics (falls back "
            "to POWERTOOLS_METRICS_NAMESPACE).", "", ("dispatcher",)),
    Setting("LONGJOBS_LAUNCH_RECOVERY_SECONDS", "Age after which a launch left unfinished by a "
            "crashed tick is retried with its original clientToken.", "60"),
)


def _ints(value: str) -> int:
    return int(value)


def _bool(value: str) -> bool:
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _list(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class CapacityProvider:
    provider: str
    weight: int
    base: int = 0


def _strategy(value: str) -> tuple[CapacityProvider, ...]:
    out = []
    for part in _list(value):
        fields = part.split(":")
        if len(fields) not in (2, 3) or not fields[0]:
            raise ValueError(f"{part!r} is not provider:weight[:base]")
        out.append(CapacityProvider(fields[0], int(fields[1]),
                                    int(fields[2]) if len(fields) == 3 else 0))
    return tuple(out)


@dataclass(frozen=True)
class Config:
    """Validated settings. Build it with :func:`load`; never read ``os.environ`` elsewhere."""

    queue_url: str = ""
    dlq_url: str = ""
    table: str = ""
    cluster: str = ""
    task_family: str = ""
    container: str = "worker"
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    assign_public_ip: str = "DISABLED"
    capacity_strategy: tuple[CapacityProvider, ...] = ()
    max_running_tasks: int = 10
    bundle_max_jobs: int = 50
    bundle_max_seconds: int = 900
    small_job_seconds: int = 60
    allowed_kinds: tuple[str, ...] = ()
    launcher: str = "ecs"
    tick_seconds: float = 50.0
    lease_seconds: int = 300
    launch_backoff_seconds: int = 30
    launch_backoff_max_seconds: int = 900
    runtask_per_second: float = 20.0
    launch_recovery_seconds: int = 60
    max_infra_attempts: int = 10
    metrics_namespace: str = ""
    start_timeout_seconds: int = 600
    heartbeat_seconds: float = 30.0
    assign_wait_seconds: float = 120.0
    flush_seconds: float = 2.0
    handlers: tuple[str, ...] = ()
    retry_any_exception: bool = True
    endpoint_url: str | None = None
    region: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)


_PARSERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "LONGJOBS_QUEUE_URL": ("queue_url", str),
    "LONGJOBS_DLQ_URL": ("dlq_url", str),
    "LONGJOBS_TABLE": ("table", str),
    "LONGJOBS_CLUSTER": ("cluster", str),
    "LONGJOBS_TASK_FAMILY": ("task_family", str),
    "LONGJOBS_CONTAINER": ("container", str),
    "LONGJOBS_SUBNETS": ("subnets", _list),
    "LONGJOBS_SECURITY_GROUPS": ("security_groups", _list),
    "LONGJOBS_ASSIGN_PUBLIC_IP": ("assign_public_ip", str),
    "LONGJOBS_CAPACITY_STRATEGY": ("capacity_strategy", _strategy),
    "LONGJOBS_MAX_RUNNING_TASKS": ("max_running_tasks", _ints),
    "LONGJOBS_BUNDLE_MAX_JOBS": ("bundle_max_jobs", _ints),
    "LONGJOBS_BUNDLE_MAX_SECONDS": ("bundle_max_seconds", _ints),
    "LONGJOBS_SMALL_JOB_SECONDS": ("small_job_seconds", _ints),
    "LONGJOBS_ALLOWED_KINDS": ("allowed_kinds", _list),
    "LONGJOBS_LAUNCHER": ("launcher", str),
    "LONGJOBS_TICK_SECONDS": ("tick_seconds", float),
    "LONGJOBS_LEASE_SECONDS": ("lease_seconds", _ints),
    "LONGJOBS_LAUNCH_BACKOFF_SECONDS": ("launch_backoff_seconds", _ints),
    "LONGJOBS_LAUNCH_BACKOFF_MAX_SECONDS": ("launch_backoff_max_seconds", _ints),
    "LONGJOBS_RUNTASK_PER_SECOND": ("runtask_per_second", float),
    "LONGJOBS_LAUNCH_RECOVERY_SECONDS": ("launch_recovery_seconds", _ints),
    "LONGJOBS_MAX_INFRA_ATTEMPTS": ("max_infra_attempts", _ints),
    "LONGJOBS_METRICS_NAMESPACE": ("metrics_namespace", str),
    "LONGJOBS_START_TIMEOUT_SECONDS": ("start_timeout_seconds", _ints),
    "LONGJOBS_HEARTBEAT_SECONDS": ("heartbeat_seconds", float),
    "LONGJOBS_ASSIGN_WAIT_SECONDS": ("assign_wait_seconds", float),
    "LONGJOBS_FLUSH_SECONDS": ("flush_seconds", float),
    "LONGJOBS_HANDLERS": ("handlers", _list),
    "LONGJOBS_RETRY_ANY_EXCEPTION": ("retry_any_exception", _bool),
}


def required(role: str) -> list[str]:
    """Variables a role cannot start without (used by the infra consistency test)."""
    return [s.name for s in SETTINGS if s.default is None and role in s.roles]


def load(role: str = "dispatcher", env: Mapping[str, str] | None = None) -> Config:
    """Parse and validate the settings a role needs; raise one ConfigError naming the variable."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    problems: list[str] = []
    for setting in SETTINGS:
        raw = env.get(setting.name)
        if raw is None or raw.strip() == "":
            if setting.default is None:
                if role in setting.roles:
                    problems.append(f"{setting.name} is not set ({setting.meaning})")
                continue
            raw = setting.default
        attr, parse = _PARSERS[setting.name]
        try:
            values[attr] = parse(raw.strip())
        except ValueError as exc:
            problems.append(f"{setting.name}={raw!r} is invalid: {exc}")
    values["endpoint_url"] = env.get("AWS_ENDPOINT_URL") or None
    values["region"] = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
    if not problems:
        problems.extend(_check(values, role))
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    return Config(**values)


def _check(v: Mapping[str, Any], role: str) -> list[str]:
    problems = []
    if not 1 <= v["bundle_max_jobs"] <= MAX_BUNDLE_JOBS:
        problems.append(f"LONGJOBS_BUNDLE_MAX_JOBS must be 1..{MAX_BUNDLE_JOBS}")
    for name, attr in (("LONGJOBS_MAX_RUNNING_TASKS", "max_running_tasks"),
                       ("LONGJOBS_BUNDLE_MAX_SECONDS", "bundle_max_seconds"),
                       ("LONGJOBS_LEASE_SECONDS", "lease_seconds")):
        if v[attr] < 1:
            problems.append(f"{name} must be at least 1")
    if v["small_job_seconds"] < 0:
        problems.append("LONGJOBS_SMALL_JOB_SECONDS must not be negative")
    if v["launcher"] not in ("ecs", "local"):
        problems.append("LONGJOBS_LAUNCHER must be 'ecs' or 'local'")
    if v["assign_public_ip"] not in ("ENABLED", "DISABLED"):
        problems.append("LONGJOBS_ASSIGN_PUBLIC_IP must be ENABLED or DISABLED")
    if v["runtask_per_second"] <= 0 or v["runtask_per_second"] > 20:
        problems.append("LONGJOBS_RUNTASK_PER_SECOND must be in (0, 20]")
    if role == "dispatcher" and v["launcher"] == "ecs" and not v["subnets"]:
        problems.append("LONGJOBS_SUBNETS is not set (the ECS launcher needs awsvpc subnets)")
    return problems
