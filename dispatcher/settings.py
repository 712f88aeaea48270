"""Every setting longjobs reads, declared once, read in one place, validated before any work starts.

Each field of :class:`Config` is one setting: its type and default are the field's, and an
:class:`Env` annotation gives the environment variable (and an optional fallback variable), who
reads it and what it means. From that single declaration:

- :func:`load` parses and validates the variables (with pydantic) and raises one ``ConfigError``
  naming every bad variable;
- :func:`required` lists what a role cannot start without (the infra tests check that the SAM
  template sets them);
- ``Env.on_aws`` says who sets it on AWS: a stack parameter (``Env.parameter``), the stack
  itself, Lambda and ECS, or nobody (local only); ``tests/integration/test_stack_settings.py``
  checks the template against it for the two functions and the worker task;
- :mod:`dispatcher.settings_page` renders the configuration table of
  ``docs/configuration.md`` (``python -m dispatcher.settings_page --markdown`` prints it,
  ``make docs`` rewrites it; ``tests/twins/test_settings.py`` fails when that table and this
  declaration differ).

A setting's parts (:class:`Env`, :class:`OnAws`, the parsers of compound values) are declared
in :mod:`dispatcher.settings_fields`.

Who reads ``os.environ``. In production code only this module reads settings from the
environment: the dispatcher, the client, the runner and the metrics all get them from :func:`load`.
The other reads and writes of ``os.environ`` in the project are precisely these (and
``tests/twins/test_settings.py`` fails if another appears):

- ``dispatcher/ops/client.py`` passes ``os.environ`` merged with its caller's overrides to
  :func:`load` (``longjobs local``'s console hands it the settings of the stack it started);
- local mode (``dispatcher/local/``), which is not deployed: ``environment.py`` puts the moto
  endpoint and dummy credentials into the process environment, ``local_launcher.py`` hands a
  copy of it to task processes, ``warm.py`` (warm starts) gives each forked task its own
  environment, ``recorded_run.py`` (the counting benchmarks' run) sets the endpoint and the
  provisioned names in its own process as local mode does, and the demo's job handlers
  (``demo_handlers.py``) read ``LONGJOBS_DEMO_LOG``, ``LONGJOBS_TASK_ARN`` and
  ``LONGJOBS_TASK_DEFINITION`` as any user's handler code may;
- ``dispatcher/cli/dispatch_commands.py`` passes ``os.environ`` to :func:`load` for a dry run
  with the launcher as ECS and a placeholder subnet (a dry run launches nothing).

Libraries read their own variables: boto3 the ``AWS_*`` ones (credentials, region), powertools
the ``POWERTOOLS_*`` ones (log level, ``POWERTOOLS_METRICS_DISABLED``, the logger's service name).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from dispatcher.domain import tenants
from dispatcher.domain.costs import Prices
from dispatcher.domain.errors import ConfigError
from dispatcher.settings_fields import (
    ALL_ROLES,
    CapacityProvider,
    Env,
    Limits,
    Names,
    OnAws,
    PriceList,
    SecondsRange,
    Strategy,
    kind_limits,
    one_of,
)

# What the rest of the project reads from here; a setting's parts are declared in
# dispatcher.settings_fields, and the configuration page is rendered by dispatcher.settings_page.
__all__ = ["ALL_ROLES", "MAX_BUNDLE_JOBS", "SETTINGS", "CapacityProvider", "Config", "Env",
           "OnAws", "declaration", "kind_limits", "load", "required"]

# A bundle is recorded in as many transactions as it needs (see dispatcher.store.recording);
# this cap bounds what one runner holds and one recording writes.
MAX_BUNDLE_JOBS = 100_000


class Config(BaseModel):
    """Validated settings, one field per setting. Build it with :func:`load`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    queue_url: Annotated[str, Env(
        "LONGJOBS_QUEUE_URL", "URL of the SQS job queue.",
        ("dispatcher", "client"), required=True,
        on_aws=OnAws.STACK)] = ""
    high_queue_url: Annotated[str, Env(
        "LONGJOBS_HIGH_QUEUE_URL", "URL of the high-priority job queue; empty: priority high "
        "goes to LONGJOBS_QUEUE_URL.", ("dispatcher", "client"),
        on_aws=OnAws.STACK)] = ""
    low_queue_url: Annotated[str, Env(
        "LONGJOBS_LOW_QUEUE_URL", "URL of the low-priority job queue; empty: priority low goes "
        "to LONGJOBS_QUEUE_URL.", ("dispatcher", "client"),
        on_aws=OnAws.STACK)] = ""
    priority_weights: Annotated[Limits, Env(
        "LONGJOBS_PRIORITY_WEIGHTS", "Share of the free task slots each priority with work "
        "gets over time, as high=n,normal=n,low=n (carried across ticks: a priority of weight "
        "w gets a slot within ceil(sum/w)+1 ticks); slots a priority cannot use go to the "
        "others.",
        on_aws=OnAws.PARAMETER)] = {"high": 6, "normal": 3, "low": 1}
    kind_limits: Annotated[Limits, Env(
        "LONGJOBS_KIND_LIMITS", "Most jobs of a kind running at once across all tasks, as "
        "kind=n,... (e.g. report=10,resize=50); a kind at its limit waits in the table "
        "without holding up other kinds; a change applies to bundles launched from then on.",
        on_aws=OnAws.PARAMETER)] = {}
    dlq_url: Annotated[str, Env(
        "LONGJOBS_DLQ_URL", "URL of the job queue's dead-letter queue (operators' dlq commands; "
        "the stack's DeadLetterQueueUrl output).", ("client",),
        on_aws=OnAws.STACK)] = ""
    alarm_prefix: Annotated[str, Env(
        "LONGJOBS_ALARM_PREFIX", "Prefix of the names of the stack's alarms (the stack's "
        "AlarmNamePrefix output): the console's overview lists those in alarm; empty: it lists "
        "none.", ("client",), on_aws=OnAws.STACK)] = ""
    # The team console's function (dispatcher/console/lambda_entry.py): how its page signs in.
    console_client_id: Annotated[str, Env(
        "LONGJOBS_CONSOLE_CLIENT_ID", "Team console: the OAuth 2.0 client its page signs in "
        "with (a public client: no secret), the stack's user pool client or ConsoleClientId.",
        ("console",), required=True, on_aws=OnAws.STACK)] = ""
    console_authorize_url: Annotated[str, Env(
        "LONGJOBS_CONSOLE_AUTHORIZE_URL", "Team console: the issuer's OAuth 2.0 authorization "
        "endpoint.", ("console",), required=True, on_aws=OnAws.STACK)] = ""
    console_token_url: Annotated[str, Env(
        "LONGJOBS_CONSOLE_TOKEN_URL", "Team console: the issuer's OAuth 2.0 token endpoint "
        "(its page's script exchanges the sign-in's code there).", ("console",), required=True,
        on_aws=OnAws.STACK)] = ""
    console_logout_url: Annotated[str, Env(
        "LONGJOBS_CONSOLE_LOGOUT_URL", "Team console: where signing out sends the browser "
        "(Cognito's /logout); empty: signing out forgets the tab's token only.", ("console",),
        on_aws=OnAws.STACK)] = ""
    console_operate: Annotated[bool, Env(
        "LONGJOBS_CONSOLE_OPERATE", "Team console: true lets people whose token has the "
        "longjobs/operate scope act; false keeps it read-only for everyone.", ("console",),
        on_aws=OnAws.STACK)] = True
    schedule_group: Annotated[str, Env(
        "LONGJOBS_SCHEDULE_GROUP", "EventBridge Scheduler schedule group the stack owns, where "
        "`longjobs schedules` keeps its schedules (the stack's ScheduleGroupName output).",
        ("client",), on_aws=OnAws.STACK)] = ""
    scheduler_role_arn: Annotated[str, Env(
        "LONGJOBS_SCHEDULER_ROLE_ARN", "Role EventBridge Scheduler assumes to send a schedule's "
        "jobs to the job queues (the stack's SchedulerRoleArn output).", ("client",),
        on_aws=OnAws.STACK)] = ""
    schedule_dlq_arn: Annotated[str, Env(
        "LONGJOBS_SCHEDULE_DLQ_ARN", "Queue that keeps the fires EventBridge Scheduler could not "
        "deliver (the stack's ScheduleDeadLetterQueueArn output).", ("client",),
        on_aws=OnAws.STACK)] = ""
    table: Annotated[str, Env(
        "LONGJOBS_TABLE", "Name of the DynamoDB job table.", ALL_ROLES, required=True,
        on_aws=OnAws.STACK)] = ""
    cluster: Annotated[str, Env(
        "LONGJOBS_CLUSTER", "ECS cluster name or ARN the tasks run in.", required=True,
        on_aws=OnAws.STACK)] = ""
    task_family: Annotated[str, Env(
        "LONGJOBS_TASK_FAMILY", "Task-definition family of the worker; without "
        "LONGJOBS_STACK_TASK_DEFINITION its latest ACTIVE revision is resolved once per tick "
        "and pinned on every launch.", required=True,
        on_aws=OnAws.PARAMETER)] = ""
    stack_task_definition: Annotated[str, Env(
        "LONGJOBS_STACK_TASK_DEFINITION", "The stack's own worker revision (ARN or "
        "family:revision; the template sets it). Set: launches run the deployed job code "
        "(longjobs deploy's record) on this revision's settings, re-derived once after a stack "
        "update; `longjobs deploy` copies this revision. Empty: the family's latest ACTIVE "
        "revision, which a stack update replaces with the stack's Image.",
        ("dispatcher", "deploy"), on_aws=OnAws.STACK)] = ""
    container: Annotated[str, Env(
        "LONGJOBS_CONTAINER", "Name of the worker container (target of env overrides).",
        on_aws=OnAws.STACK)
    ] = "worker"
    subnets: Annotated[Names, Env(
        "LONGJOBS_SUBNETS", "Comma-separated subnet ids for awsvpc networking (ECS launcher; "
        "required by the dispatcher when LONGJOBS_LAUNCHER is ecs).",
        on_aws=OnAws.PARAMETER)] = ()
    security_groups: Annotated[Names, Env(
        "LONGJOBS_SECURITY_GROUPS", "Comma-separated security-group ids (ECS launcher).",
        on_aws=OnAws.PARAMETER)] = ()
    assign_public_ip: Annotated[str, one_of("ENABLED", "DISABLED"), Env(
        "LONGJOBS_ASSIGN_PUBLIC_IP", "ENABLED or DISABLED: public IP for Fargate tasks.",
        on_aws=OnAws.PARAMETER)
    ] = "DISABLED"
    capacity_strategy: Annotated[Strategy, Env(
        "LONGJOBS_CAPACITY_STRATEGY", "Capacity-provider strategy as provider:weight[:base],"
        "... (e.g. FARGATE_SPOT:4,FARGATE:1; a base applies to each RunTask call); empty "
        "means launch type FARGATE.",
        on_aws=OnAws.PARAMETER)] = ()
    spot_fallback: Annotated[bool, Env(
        "LONGJOBS_SPOT_FALLBACK", "true: bundles that FARGATE_SPOT has no capacity for are "
        "relaunched at once on on-demand FARGATE (only with a strategy that uses "
        "FARGATE_SPOT); false: they wait for their backoff like any launch failure.",
        on_aws=OnAws.PARAMETER)] = True
    prices: Annotated[PriceList, Env(
        "LONGJOBS_PRICES", "What a task's bill is priced at, dollars an hour: vcpu=,gb= (x86 "
        "on-demand), arm_vcpu=,arm_gb= (ARM), spot= (Fargate Spot's fraction of on-demand); "
        "each optional. Defaults: us-east-1 Linux list prices as of 2026-06 (vcpu=0.04048,"
        "gb=0.004445,arm_vcpu=0.03238,arm_gb=0.00356, https://aws.amazon.com/fargate/pricing/) "
        "and spot=0.3 (Spot floats, up to 70 % off).",
        on_aws=OnAws.PARAMETER)] = Prices()
    retention_days: Annotated[float, Field(ge=0), Env(
        "LONGJOBS_RETENTION_DAYS", "Days a finished job (SUCCEEDED, FAILED, CANCELLED, "
        "REJECTED) stays in the table before DynamoDB's TTL deletes it; 0 keeps it forever.",
        ALL_ROLES,
        on_aws=OnAws.PARAMETER)] = 30.0
    max_running_tasks: Annotated[int, Field(ge=1), Env(
        "LONGJOBS_MAX_RUNNING_TASKS", "Admission limit: bundles launched and not finished.",
        on_aws=OnAws.PARAMETER)
    ] = 10
    bundle_max_jobs: Annotated[int, Field(ge=1, le=MAX_BUNDLE_JOBS), Env(
        "LONGJOBS_BUNDLE_MAX_JOBS", f"Most jobs in one bundle (1..{MAX_BUNDLE_JOBS}); bounds "
        "what one runner holds.",
        on_aws=OnAws.PARAMETER)] = 10_000
    bundle_max_seconds: Annotated[int, Field(ge=1), Env(
        "LONGJOBS_BUNDLE_MAX_SECONDS", "Most seconds one task spends on a bundle: a bundle "
        "holds small jobs worth this many seconds at LONGJOBS_TASK_CONCURRENCY in parallel "
        "(900 s at 20 in parallel of 2 s jobs is 9,000 jobs).",
        on_aws=OnAws.PARAMETER)] = 900
    follow_on_seconds: Annotated[int, Field(ge=0), Env(
        "LONGJOBS_FOLLOW_ON_SECONDS", "A backlog more than the free task slots take at this "
        "many seconds of a task's time each is cut into bundles of that size: one launched "
        "per free slot, the rest taken in order by the running tasks as their bundles end, so "
        "that the tasks end together however their starts spread; 0 launches one bundle per "
        "slot.",
        on_aws=OnAws.PARAMETER)] = 45
    task_concurrency: Annotated[int, Field(ge=1, le=1000), Env(
        "LONGJOBS_TASK_CONCURRENCY", "Jobs a task runs at once (plain handlers in a thread "
        "pool, async handlers on one event loop); the dispatcher sizes bundles by it.",
        ("dispatcher", "runner"),
        on_aws=OnAws.PARAMETER)] = 1
    task_kind_concurrency: Annotated[Limits, Env(
        "LONGJOBS_TASK_KIND_CONCURRENCY", "Per-kind cap within one task as kind=n,... (e.g. "
        "report=2); a kind at its cap does not hold up other kinds.", ("runner",),
        on_aws=OnAws.PARAMETER)] = {}
    small_job_seconds: Annotated[int, Field(ge=0), Env(
        "LONGJOBS_SMALL_JOB_SECONDS", "Jobs estimated at or under this many seconds are "
        "bundled; others (and jobs with no estimate) run alone.",
        on_aws=OnAws.PARAMETER)] = 60
    allowed_kinds: Annotated[Names, Env(
        "LONGJOBS_ALLOWED_KINDS", "Comma-separated allow-list of job kinds; empty allows any.",
        ("dispatcher", "client"),
        on_aws=OnAws.PARAMETER)] = ()
    tenant: Annotated[str, Field(pattern=f"^({tenants.TENANT.pattern})?$"), Env(
        "LONGJOBS_TENANT", "The tenant the jobs this producer submits are for, unless a job "
        "names its own (--tenant, tenant=): 1-64 chars of [A-Za-z0-9._-]; empty: none.",
        ("client",), on_aws=OnAws.LOCAL)] = ""
    tenant_half_life_seconds: Annotated[float, Field(ge=0), Env(
        "LONGJOBS_TENANT_HALF_LIFE_SECONDS", "Half-life of a tenant's counted usage (its "
        "tasks' vCPU-seconds), which orders tenants equally far from their shares of the task "
        "slots (longjobs tenants set); 0 never forgets.", ("dispatcher",),
        on_aws=OnAws.PARAMETER)] = 600.0
    launcher: Annotated[str, one_of("ecs", "local"), Env(
        "LONGJOBS_LAUNCHER", "ecs (RunTask) or local (tasks as local processes).",
        on_aws=OnAws.LOCAL)] = "ecs"
    tick_seconds: Annotated[float, Field(gt=0), Env(
        "LONGJOBS_TICK_SECONDS", "Time budget of one tick when not inside Lambda (inside "
        "Lambda: the invocation's remaining time less LONGJOBS_TICK_RESERVE_SECONDS).",
        on_aws=OnAws.LOCAL)] = 50.0
    tick_reserve_seconds: Annotated[float, Field(ge=0), Env(
        "LONGJOBS_TICK_RESERVE_SECONDS", "Lambda time kept back from the drain to record, "
        "delete and launch what it admitted.",
        on_aws=OnAws.STACK)] = 30.0
    tick_one_at_a_time: Annotated[bool, Env(
        "LONGJOBS_TICK_ONE_AT_A_TIME", "true only where the platform never runs two ticks at "
        "once (the stack's tick function has a reserved concurrency of 1): a tick then takes "
        "over at once the lease of one that died, instead of waiting out its term. Whatever "
        "the setting, a tick that takes over a lease its holder never gave back logs `lease "
        "taken over from a tick that did not give it back` (a warning).",
        on_aws=OnAws.STACK)] = False
    urgent_watch_seconds: Annotated[float, Field(ge=0, le=840), Env(
        "LONGJOBS_URGENT_WATCH_SECONDS", "A tick that finds every task slot busy keeps "
        "long-polling the high queue until this long after it began, handing each urgent job "
        "to a running task as it arrives; 0 (or a drain that took longer) looks once. The "
        "stack sets 50 (its tick runs every minute: the watch ends before the next).",
        on_aws=OnAws.STACK)] = 0.0
    tick_concurrency: Annotated[int, Field(ge=1, le=64), Env(
        "LONGJOBS_TICK_CONCURRENCY", "AWS calls the tick keeps in flight while it receives, "
        "records and deletes. Each admits about 200 small jobs a second (modelled: 8 take "
        "~1,700/s, 16 ~3,400/s); raise it where the task slots finish more jobs a second than "
        "that (a million jobs of 2 s on 300 tasks x 20 need 16: docs/measured.md).",
        on_aws=OnAws.PARAMETER)] = 8
    hold_seconds: Annotated[int, Field(ge=2, le=43200), Env(
        "LONGJOBS_HOLD_SECONDS", "Visibility timeout the tick receives messages with; it "
        "records and deletes each message within half of it, and hides one it still holds at "
        "three quarters of it (a recording slowed by throttling) for another hold. What a tick "
        "that dies held comes back after it.",
        on_aws=OnAws.PARAMETER)] = 120
    lease_seconds: Annotated[int, Field(ge=1), Env(
        "LONGJOBS_LEASE_SECONDS", "Expiry of the tick lease; longer than any tick can run.",
        on_aws=OnAws.PARAMETER)
    ] = 300
    launch_backoff_seconds: Annotated[int, Field(ge=0), Env(
        "LONGJOBS_LAUNCH_BACKOFF_SECONDS", "First backoff after RunTask failures[]; doubles "
        "per failure.",
        on_aws=OnAws.PARAMETER)] = 30
    launch_backoff_max_seconds: Annotated[int, Field(ge=0), Env(
        "LONGJOBS_LAUNCH_BACKOFF_MAX_SECONDS", "Cap of that backoff.",
        on_aws=OnAws.PARAMETER)] = 900
    runtask_per_second: Annotated[float, Field(gt=0, le=20), Env(
        "LONGJOBS_RUNTASK_PER_SECOND", "Pace of RunTask calls (Fargate allows 20/s).",
        on_aws=OnAws.PARAMETER)] = 20.0
    task_launch_burst: Annotated[int, Field(ge=1), Env(
        "LONGJOBS_TASK_LAUNCH_BURST", "Fargate task launches allowed at once per capacity "
        "provider (the token bucket's size).",
        on_aws=OnAws.PARAMETER)] = 100
    task_launch_per_second: Annotated[float, Field(gt=0), Env(
        "LONGJOBS_TASK_LAUNCH_PER_SECOND", "Fargate task launches per second per capacity "
        "provider, sustained (the bucket's refill).",
        on_aws=OnAws.PARAMETER)] = 20.0
    local_start_seconds: Annotated[SecondsRange, Env(
        "LONGJOBS_LOCAL_START_SECONDS", "Local mode: modelled Fargate start latency of a task, "
        "as seconds or min-max (Fargate: 30-60).",
        on_aws=OnAws.LOCAL)] = (0.0, 0.0)
    local_capacity_errors: Annotated[float, Field(ge=0, le=1), Env(
        "LONGJOBS_LOCAL_CAPACITY_ERRORS", "Local mode: share of tasks that RunTask reports as "
        "not started for lack of capacity (as Fargate Spot does).",
        on_aws=OnAws.LOCAL)] = 0.0
    local_warm_start: Annotated[bool, Env(
        "LONGJOBS_LOCAL_WARM_START", "Local mode: fork each task from one process that has "
        "imported the runner, rather than start a fresh interpreter (on Fargate a task's "
        "imports use CPUs of its own; here they would share the machine's).",
        on_aws=OnAws.LOCAL)] = True
    launch_recovery_seconds: Annotated[int, Field(ge=0), Env(
        "LONGJOBS_LAUNCH_RECOVERY_SECONDS", "Age after which a launch left unfinished by a "
        "crashed tick is retried with its original clientToken.",
        on_aws=OnAws.PARAMETER)] = 60
    max_infra_attempts: Annotated[int, Field(ge=0), Env(
        "LONGJOBS_MAX_INFRA_ATTEMPTS", "Reruns after infrastructure stops (Spot, host "
        "failure, never started) before a job fails; separate from a job's max_attempts.",
        on_aws=OnAws.PARAMETER)] = 10
    start_timeout_seconds: Annotated[int, Field(ge=0), Env(
        "LONGJOBS_START_TIMEOUT_SECONDS", "A launched task still running without having "
        "claimed its bundle after this long is stopped and its bundle rerun (one already "
        "stopped is found a minute after its launch).",
        on_aws=OnAws.PARAMETER)] = 600
    heartbeat_seconds: Annotated[float, Field(gt=0), Env(
        "LONGJOBS_HEARTBEAT_SECONDS", "Runner heartbeat interval; a bundle silent for 4 "
        "intervals is checked and, if its task still runs, stopped and rerun.",
        ("dispatcher", "runner"),
        on_aws=OnAws.PARAMETER)] = 30.0
    assign_wait_seconds: Annotated[float, Field(ge=0), Env(
        "LONGJOBS_ASSIGN_WAIT_SECONDS", "How long a runner waits for its bundle assignment "
        "before exiting without running anything.", ("runner",),
        on_aws=OnAws.PARAMETER)] = 120.0
    stream_wait_seconds: Annotated[float, Field(ge=0, le=600), Env(
        "LONGJOBS_STREAM_WAIT_SECONDS", "How long a runner with no follow-on left to take "
        "waits for the next tick's, while the last tick fed the running tasks as a stream's "
        "ticks do (or left small jobs in the queue for want of slots), rather than exit and "
        "leave them to a new task's start; 0 never waits. The stack sets 90 (its tick runs "
        "every minute).", ("runner",),
        on_aws=OnAws.STACK)] = 0.0
    flush_seconds: Annotated[float, Field(ge=0), Env(
        "LONGJOBS_FLUSH_SECONDS", "Longest a finished job's result waits to be written with "
        "others.", ("runner",),
        on_aws=OnAws.PARAMETER)] = 2.0
    handlers: Annotated[Names, Env(
        "LONGJOBS_HANDLERS", "Job handlers as kind=module:function,... (added to the "
        "longjobs.handlers entry points).", ("runner",),
        on_aws=OnAws.PARAMETER)] = ()
    retry_any_exception: Annotated[bool, Env(
        "LONGJOBS_RETRY_ANY_EXCEPTION", "true: any handler exception is retried while attempts "
        "remain; false: only RetryableError is.", ("runner",),
        on_aws=OnAws.PARAMETER)] = True
    log_level: Annotated[str, BeforeValidator(lambda v: v.upper() if isinstance(v, str) else v),
                         one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), Env(
        "LONGJOBS_LOG_LEVEL", "Log level of the runner's JSON logs (the dispatcher's follow "
        "POWERTOOLS_LOG_LEVEL).", ("runner",),
        on_aws=OnAws.PARAMETER)] = "INFO"
    job_log_level: Annotated[str, BeforeValidator(lambda v: v.upper() if isinstance(v, str)
                                                  else v),
                             one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), Env(
        "LONGJOBS_JOB_LOG_LEVEL", "Lowest level of the handlers' own logging records kept in "
        "their job's log (any logger; print() output is kept whatever the level).",
        ("runner",), on_aws=OnAws.PARAMETER)] = "INFO"
    metrics_namespace: Annotated[str, Env(
        "LONGJOBS_METRICS_NAMESPACE", "CloudWatch namespace of the EMF metrics; unset, "
        "POWERTOOLS_METRICS_NAMESPACE (what the SAM template sets) is used.",
        fallback="POWERTOOLS_METRICS_NAMESPACE",
        on_aws=OnAws.PARAMETER)] = "longjobs"
    service_name: Annotated[str, Env(
        "POWERTOOLS_SERVICE_NAME", "The service dimension of the dispatcher's metrics (the "
        "powertools variable, which its logger reads too).",
        on_aws=OnAws.STACK)] = "longjobs"
    local_log: Annotated[str, Env(
        "LONGJOBS_LOCAL_LOG", "Local mode: the file local tasks write their output to "
        "(`longjobs local` exports it); set, `longjobs jobs logs` reads a job's lines there "
        "instead of CloudWatch Logs.", ("client",), on_aws=OnAws.LOCAL)] = ""
    endpoint_url: Annotated[str | None, Env(
        "AWS_ENDPOINT_URL", "Endpoint override (moto, LocalStack); empty means AWS.",
        (*ALL_ROLES, "events"),
        on_aws=OnAws.LOCAL)] = None
    region: Annotated[str | None, Env(
        "AWS_REGION", "Region of the queue, table and cluster; empty leaves it to boto3.",
        (*ALL_ROLES, "events"), fallback="AWS_DEFAULT_REGION",
        on_aws=OnAws.AWS)] = None
    task_arn: Annotated[str, Env(
        "LONGJOBS_TASK_ARN", "Local mode only: the task's ARN (on ECS the runner reads it from "
        "the task metadata endpoint).", ("runner",),
        on_aws=OnAws.LOCAL)] = ""
    event_bus: Annotated[str, Field(pattern=r"^[/\.\-_A-Za-z0-9]{1,256}$"), Env(
        "LONGJOBS_EVENT_BUS", "Name of the EventBridge bus the job state-change events go to "
        "(the publisher function's; `default`: the account's default bus).", ("events",),
        on_aws=OnAws.PARAMETER)] = "default"
    ecs_metadata_uri: Annotated[str, Env(
        "ECS_CONTAINER_METADATA_URI_V4", "Set by ECS in every task: the task metadata endpoint "
        "v4, where the runner reads its task's ARN.", ("runner",),
        on_aws=OnAws.AWS)] = ""


def declaration() -> list[tuple[str, Env]]:
    """``(field name, Env)`` of every setting, in declaration order."""
    out = []
    for attr, info in Config.model_fields.items():
        (env,) = (m for m in info.metadata if isinstance(m, Env))
        out.append((attr, env))
    return out


SETTINGS: tuple[Env, ...] = tuple(env for _, env in declaration())


def required(role: str) -> list[str]:
    """Variables a role cannot start without (used by the infra consistency test)."""
    return [s.name for s in SETTINGS if s.required and role in s.roles]


def load(role: str = "dispatcher", env: Mapping[str, str] | None = None, *,
         later: frozenset[str] = frozenset()) -> Config:
    """Parse and validate the settings; raise one ConfigError naming every bad variable.

    ``role`` selects which required variables must be set (see :func:`required`); a role that
    declares none (``metrics``, ``task``) only parses and validates what is set. ``later``
    names required variables the caller checks itself when it first needs them (a producer
    sends jobs without the job table's name).
    """
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    raw: dict[str, tuple[str, str]] = {}
    problems: list[str] = []
    for attr, setting in declaration():
        name, value = setting.name, (env.get(setting.name) or "").strip()
        if not value and setting.fallback:
            name, value = setting.fallback, (env.get(setting.fallback) or "").strip()
        if value:
            values[attr] = value
            raw[attr] = (name, value)
        elif setting.required and role in setting.roles and setting.name not in later:
            problems.append(f"{setting.name} is not set ({setting.meaning})")
    try:
        cfg = Config.model_validate(values)
    except ValidationError as exc:
        for error in exc.errors():
            name, value = raw.get(str(error["loc"][0]), (str(error["loc"][0]), ""))
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{name}={value!r} is invalid: {message}")
        cfg = None
    if cfg is not None and role == "dispatcher" and cfg.launcher == "ecs" and not cfg.subnets:
        problems.append("LONGJOBS_SUBNETS is not set (the ECS launcher needs awsvpc subnets)")
    if problems or cfg is None:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    return cfg
