"""The producer API: ``JobClient(queue_url=..., table_name=...).submit(kind, payload)``.

Validation happens here first, with the same model the dispatcher uses, so a producer learns
about a bad job at submit time instead of finding a REJECTED record later.
"""

from __future__ import annotations

import builtins
import json
import math
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dispatcher import settings
from dispatcher.domain import message, message_errors, rate_limits
from dispatcher.domain.dependencies import REJECTED, child_of, no_such_child
from dispatcher.domain.errors import ConfigError, InvalidMessage, JobNotFound, SubmitError
from dispatcher.domain.jobs import PRIORITY_ORDER, Job, Priority, Rejection
from dispatcher.domain.rate_limits import RateLimit, RateLimitProblem
from dispatcher.ports.queue import Queue, send_all
from dispatcher.ports.table import TableUnavailable
from dispatcher.store import Store
from dispatcher.store.audit_trail import AuditTrail
from dispatcher.wiring import adapters

if TYPE_CHECKING:  # the table's model (pynamodb) loads only when a client reads
    from dispatcher.domain.costs import JobCost
    from dispatcher.domain.tenant_shares import TenantPolicy
    from dispatcher.ops.bulk import BulkAction, BulkFilter, BulkReport
    from dispatcher.ops.dead_letters import DeadLetters
    from dispatcher.ops.job_log import JobLog, LogCursor
    from dispatcher.ops.job_views import JobDetail, JobSummary, Stats
    from dispatcher.ops.queries import Queries
    from dispatcher.ops.schedule_ops import Schedules
    from dispatcher.ops.usage import TenantsReport, UsageReport
    from dispatcher.ports.job_logs import LogLine

# Index partitions an operator's read asks at once (a list of every state has 54): no more
# than the table client's connection pool (pynamodb's default, 10), or connections are thrown
# away and made again.
READS_AT_ONCE = 10
# How many of the ids it sent a client remembers, with their array sizes (see
# JobClient._check_dependencies).
SENT_KEPT = 100_000


class JobClient:
    """Submits jobs to the queue of their priority and reads the job table.

    Settings come from the process's environment, with ``overrides`` over it (local mode's
    console is handed the settings of the stack it started). Queues: ``LONGJOBS_QUEUE_URL``
    for priority normal, ``LONGJOBS_HIGH_QUEUE_URL`` and ``LONGJOBS_LOW_QUEUE_URL`` for high
    and low (empty: the normal queue). Tests hand queues
    in: ``queue`` (the normal one) and/or ``queues`` (per priority). Once either is given, a
    priority ``queues`` leaves out goes to the normal queue, never to a configured URL. A
    ``store`` given is the job table its reads and operator actions use (the twins' tests).
    """

    def __init__(self, queue_url: str | None = None, table_name: str | None = None, *,
                 endpoint_url: str | None = None, region: str | None = None,
                 allowed_kinds: tuple[str, ...] = (), queue: Queue | None = None,
                 queues: Mapping[Priority, Queue] | None = None,
                 send_tries: int = 4, overrides: Mapping[str, str] | None = None,
                 store: Store | None = None) -> None:
        env: dict[str, str] = {}
        if queue_url:
            env["LONGJOBS_QUEUE_URL"] = queue_url
        if table_name:
            env["LONGJOBS_TABLE"] = table_name
        # Sending needs only the queues: the table is checked when a read first needs it.
        cfg = settings.load("client", {**os.environ, **(overrides or {}), **env},
                            later=frozenset({"LONGJOBS_TABLE"}))
        if endpoint_url or region:
            cfg = settings.Config(**{**cfg.__dict__, "endpoint_url": endpoint_url or
                                   cfg.endpoint_url, "region": region or cfg.region})
        self.cfg = cfg
        self.allowed_kinds = allowed_kinds or cfg.allowed_kinds
        given = {Priority(p): q for p, q in (queues or {}).items()}
        if queue is None and not given:
            given = adapters.queues(cfg)
        normal = queue or given.get(Priority.NORMAL) or adapters.queues(cfg)[Priority.NORMAL]
        self._queue = normal  # priority normal's; also the backlog stats() reports
        self._queues: dict[Priority, Queue] = {p: given.get(p) or normal for p in PRIORITY_ORDER}
        self._send_tries = send_tries
        self._store: Store | None = store
        # The ids this client sent last (at most SENT_KEPT), with their array sizes (None: no
        # array): a dependency on a child of one of them is checked against its size before
        # a tick recorded it.
        self._sent: dict[str, int | None] = {}

    # -- producing ------------------------------------------------------------------------------
    def submit(self, kind: str, payload: Mapping[str, Any], *, job_id: str | None = None,
               estimated_seconds: float | None = None, max_attempts: int = 3,
               timeout_seconds: float | None = None, cpu: int | None = None,
               memory: int | None = None, ephemeral_storage: int | None = None,
               priority: Priority | str | None = None,
               not_before: float | str | datetime | None = None,
               array_size: int | None = None, tolerated_failures: int | str = 0,
               depends_on: Sequence[str | Mapping[str, str | bool]] | None = None,
               labels: Mapping[str, str] | None = None, tenant: str | None = None,
               uses: Mapping[str, int] | None = None) -> str:
        """Enqueue one job; returns its id. ``cpu`` (units) and ``memory`` (MiB) together, a
        pair Fargate runs, and ``ephemeral_storage`` (GiB) size its task; ``priority`` picks
        the queue; ``not_before`` (epoch seconds, an RFC 3339 time, or an aware
        datetime) holds it until then. ``array_size`` N makes it an array job: one message,
        N children ``<id>:0`` to ``<id>:N-1`` (each sees ``ctx.array_index``), the job itself
        their parent, FAILED once more than ``tolerated_failures`` (a count, or a percentage
        such as ``"5%"``) of them failed. ``depends_on``: job ids (or ``{"job_id", "condition"}``
        with ``succeeded``, ``finished`` or ``failed``) it waits for, recorded or on its way
        (the dispatcher waits 15 minutes for an unknown one to be recorded, and for a child
        ``A:i`` of a recorded array as long as that array lives); one that can never be met
        (REJECTED, with a table configured; a child past its array's size; a child of this
        job) is refused here. An array adds ``"n_to_n": True`` to depend on an array of its
        size element-wise (its child i waits for that array's child i); one known not to be
        such an array is refused here. ``labels``: key -> value to list, act on and count it
        by (dispatcher.domain.labels). ``tenant``: whom its work is for
        (dispatcher.domain.tenants; default ``LONGJOBS_TENANT``). ``uses``: rate limits' keys
        to the tokens its launch takes (``{"openai": 1}``; dispatcher.domain.rate_limits). A
        bad value raises ``InvalidMessage``."""
        return self.submit_many([{
            # Not a mapping: left for the schema to refuse with a readable reason.
            "kind": kind, "payload": dict(payload) if isinstance(payload, Mapping) else payload,
            "job_id": job_id,
            "estimated_seconds": estimated_seconds, "max_attempts": max_attempts,
            "timeout_seconds": timeout_seconds, "cpu": cpu, "memory": memory,
            "ephemeral_storage": ephemeral_storage, "priority": priority,
            "not_before": not_before, "array_size": array_size,
            "tolerated_failures": tolerated_failures or None,
            "depends_on": [d if isinstance(d, str) else dict(d) for d in depends_on]
            if depends_on else None,
            "labels": dict(labels) if isinstance(labels, Mapping) else labels,
            "tenant": tenant,
            "uses": dict(uses) if isinstance(uses, Mapping) else uses}])[0]

    def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[str]:
        """Send jobs in batches of 10 to the queue of each job's priority; retry partial
        failures; raise one error for what's left. Every job is validated before any is sent."""
        bodies = [self._body(spec) for spec in jobs]
        self._check_dependencies(bodies)
        # SQS batch entry ids allow only [A-Za-z0-9_-]; job ids allow more, so number them.
        pending = {f"e{n}": (self._queues[priority], body)
                   for n, (_, body, priority) in enumerate(bodies)}
        failed: dict[str, str] = {}
        for attempt in range(self._send_tries):
            failed = send_all((queue, k, body) for k, (queue, body) in pending.items())
            pending = {k: pending[k] for k in failed}
            if not pending:
                self._remember({job_id: json.loads(body).get("array_size")
                                for job_id, body, _ in bodies})
                return [job_id for job_id, _, _ in bodies]
            time.sleep(min(2.0, 0.1 * 2 ** attempt))
        lost = {bodies[int(k[1:])][0]: reason for k, reason in failed.items()}
        raise SubmitError(f"{len(lost)} of {len(bodies)} jobs could not be enqueued: "
                          + ", ".join(sorted(lost)[:10]), failed=lost)

    def _remember(self, sizes: dict[str, int | None]) -> None:
        self._sent.update(sizes)
        while len(self._sent) > SENT_KEPT:  # the oldest first (dicts keep insertion order)
            del self._sent[next(iter(self._sent))]

    def _check_dependencies(self, bodies: list[tuple[str, str, Priority]]) -> None:
        """Refuse a dependency that can never be met: a child of its own job (an array
        records none before its dependencies are met), a child past the size of an array
        known (sent by this client, earlier in this batch, or recorded), a REJECTED job, or
        an n_to_n dependency known not to be an array of its dependent's size. One not
        recorded yet is accepted: it may be on its way (sent a moment ago, by this client or
        another, or a child its array has not recorded yet), and the dispatcher waits for it
        (:mod:`dispatcher.domain.dependencies`). Without a table configured, or one whose
        role may not read it (a producer that may only send), only what the batch itself
        shows is checked."""
        earlier: dict[str, int | None] = dict(self._sent)  # sent by this client: on their way
        wanted: dict[str, str] = {}  # dependency -> the first job naming it
        element: list[tuple[str, str, int]] = []  # n_to_n: dependency, job, its size, unsent
        for job_id, body, _ in bodies:
            doc = json.loads(body)
            for dep in doc.get("depends_on") or []:
                dep_id = dep if isinstance(dep, str) else dep["job_id"]
                _child_in_range(dep_id, job_id, earlier)
                if dep_id not in earlier:
                    wanted.setdefault(dep_id, job_id)
                if isinstance(dep, dict) and dep.get("n_to_n"):  # array_size set (schema)
                    if dep_id in earlier:
                        _same_size(dep_id, earlier[dep_id], job_id, doc["array_size"])
                    else:
                        element.append((dep_id, job_id, doc["array_size"]))
            earlier[job_id] = doc.get("array_size")
        if not wanted or not self.cfg.table:
            return
        # The arrays the children named may belong to, read with the arrays named whole.
        parents = {c[0] for d in wanted if (c := child_of(d)) is not None}
        try:
            states = self._table().job_states(sorted(wanted))
            recorded = {j.job_id: j for j in self._table().get_jobs(
                sorted(parents | {d for d, _, _ in element}))} if parents or element else {}
        except TableUnavailable:  # not allowed to read (ProducerPolicy sends only), or down
            return  # the dispatcher judges, as for a producer without a table
        sizes = {i: j.array_size for i, j in recorded.items() if j.array_size is not None}
        for dep_id, job_id in wanted.items():
            if states.get(dep_id) == REJECTED:
                raise InvalidMessage(f"depends_on: job {dep_id!r} was REJECTED, never admitted; "
                                     "submit it again (fixed), then this job",
                                     job_id=job_id)
            if states.get(dep_id) is None:
                _child_in_range(dep_id, job_id, sizes)
        for dep_id, job_id, size in element:
            if dep_id in recorded:
                _same_size(dep_id, recorded[dep_id].array_size, job_id, size)

    def _body(self, spec: Mapping[str, Any]) -> tuple[str, str, Priority]:
        fields = {k: v for k, v in spec.items() if v is not None}
        fields.setdefault("job_id", uuid.uuid4().hex)
        if fields.get("tenant") == "":  # none, as the setting's empty value says
            del fields["tenant"]
        elif self.cfg.tenant:  # the producer's tenant (LONGJOBS_TENANT) unless it names one
            fields.setdefault("tenant", self.cfg.tenant)
        fields["schema_version"] = message.SCHEMA_VERSION
        # An error names the job by the id its caller gave, not one made up here for it.
        chosen = spec.get("job_id")
        try:
            msg = message.JobMessage.model_validate(fields)
            message.check(msg, self.allowed_kinds)
        except ValidationError as exc:
            raise InvalidMessage(message_errors.describe(exc), job_id=chosen) from None
        except InvalidMessage as exc:
            raise InvalidMessage(exc.reason, job_id=chosen) from None
        # priority normal is the default: left out, so the body stays what it was before the
        # field existed (and what a dispatcher that does not know it yet accepts).
        leave_out = {"priority"} if msg.priority == Priority.NORMAL else set()
        if msg.array_size is None:  # likewise: a job that is no array says nothing of arrays
            leave_out.add("tolerated_failures")
        return msg.job_id, message.body_json(msg, leave_out), msg.priority

    # -- reading --------------------------------------------------------------------------------
    def _table(self) -> Store:
        if self._store is None:
            if not self.cfg.table:
                raise ConfigError("invalid configuration: LONGJOBS_TABLE is not set (reading "
                                  "jobs needs the job table's name; sending them does not)")
            self._store = adapters.store(self.cfg)
            # Its retries pack their bundles as the dispatcher's admission would.
            from dispatcher.wiring.pipeline import bundle_sizes

            self._store.bundle_sizes = bundle_sizes(self.cfg)
            # An operator may be far from the table's region: a list's partitions are read
            # at once, not a round trip each (JobLists.fan_out).
            self._store.fan_out = ThreadPoolExecutor(max_workers=READS_AT_ONCE,
                                                     thread_name_prefix="longjobs-reads")
        return self._store

    def get(self, job_id: str) -> Job | Rejection:
        job = self._table().get_job(job_id)
        if job is not None:
            return job
        rejection = self._table().get_rejection(job_id)
        if rejection is not None:
            return rejection
        raise JobNotFound("no such job", job_id=job_id)

    def cancel(self, job_id: str, *, reason: str | None = None) -> Job:
        """A pending job is CANCELLED at once; a running one is stopped at its next heartbeat
        (the returned job then still shows RUNNING). ``reason``: kept in the job's reason."""
        return self._table().cancel(job_id, reason=reason)

    def retry(self, job_id: str, *, from_scratch: bool = False,
              reason: str | None = None) -> Job:
        """Run a FAILED or CANCELLED job again with a fresh attempt budget. It resumes from
        its last checkpoint unless ``from_scratch``. If a run of it may still be alive (the
        returned job's ``live_task`` names that task), its launch waits until the task is
        known stopped. ``reason``: kept in the job's reason."""
        return self._table().retry(job_id, from_scratch=from_scratch, reason=reason)

    def bulk(self, verb: str, *, status: str, kind: str | None = None,
             since_seconds: float | None = None,
             label: str | None = None,
             tenant: str | None = None) -> tuple[BulkAction, BulkFilter]:
        """The bulk action over the jobs a filter selects (``count`` it, then ``run`` it):
        see :mod:`dispatcher.ops.bulk`; ``label``: ``key=value``; ``tenant``: its jobs."""
        from dispatcher.ops.bulk import BulkAction, BulkFilter, BulkVerb

        return BulkAction(self._table()), BulkFilter(BulkVerb(verb), status, kind, since_seconds,
                                                     label, tenant)

    def bulk_cancel(self, *, status: str, kind: str | None = None,
                    since_seconds: float | None = None, reason: str | None = None,
                    bulk_id: str | None = None, dry_run: bool = False) -> BulkReport:
        """Cancel every job in ``status`` (PENDING, SCHEDULED or RUNNING) of ``kind``, created
        within ``since_seconds``, each as :meth:`cancel` does. ``bulk_id``: an interrupted
        run's id, to resume it (its jobs are not acted on twice); ``dry_run``: only count."""
        action, f = self.bulk("cancel", status=status, kind=kind, since_seconds=since_seconds)
        return action.run(f, bulk_id=bulk_id, reason=reason, dry_run=dry_run)

    def bulk_retry(self, *, status: str, kind: str | None = None,
                   since_seconds: float | None = None, reason: str | None = None,
                   bulk_id: str | None = None, from_scratch: bool = False,
                   dry_run: bool = False) -> BulkReport:
        """Retry every job in ``status`` (FAILED or CANCELLED) selected as
        :meth:`bulk_cancel` selects, each as :meth:`retry` does, except that the small jobs
        retried together share new bundles, packed as the dispatcher's admission packs them
        (by this client's settings: ``LONGJOBS_TASK_CONCURRENCY`` and the bundle settings)."""
        action, f = self.bulk("retry", status=status, kind=kind, since_seconds=since_seconds)
        return action.run(f, bulk_id=bulk_id, reason=reason, from_scratch=from_scratch,
                          dry_run=dry_run)

    def tenants(self, *, since: float | None = None,
                since_seconds: float | None = None) -> TenantsReport:
        """Each tenant's tasks running and what its jobs used in the window (the last 24 h
        unless given): see :mod:`dispatcher.ops.usage`."""
        return self.queries().tenants(since=since, since_seconds=since_seconds)

    def set_tenant(self, tenant: str, *, weight: float | None = None,
                   max_running: int | None = None, reserve: int | None = None,
                   no_cap: bool = False, reset: bool = False) -> TenantPolicy:
        """Change ``tenant``'s share of the task slots (see
        :mod:`dispatcher.domain.tenant_shares`); the settings not given stay. The next tick
        applies it."""
        return self.queries().store.set_tenant_policy(
            tenant, weight=weight, max_running=max_running, reserve=reserve, no_cap=no_cap,
            reset=reset)

    def limits(self) -> dict[str, RateLimit]:
        """Every rate limit set, by key (dispatcher.domain.rate_limits)."""
        return self.queries().store.rate_limits()

    def set_limit(self, key: str, rate: str | None = None, burst: float | None = None,
                  shards: int | None = None) -> RateLimit:
        """Set ``key``'s limit (or change one: what is not given stays as it was): ``rate`` as
        ``100/min`` (``5/s``, ``1000/hour``, ``3/10s``),
        ``burst`` tokens at once at most (a new limit's default: a minute's worth, at least 1:
        a tick, once a minute, launches at most a burst's worth of bundles that take tokens),
        ``shards`` buckets to spread its takes over (a new limit's default: one per 250 tokens
        a second).
        The next launches and acquires keep to it."""
        was = self.limits().get(key)
        if rate is None and was is None:
            raise RateLimitProblem(f"limit {key} is not set yet: give its rate, such as "
                                   f"longjobs limits set {key} --rate 100/min")
        per_second, said = rate_limits.parse_rate(rate) if rate is not None \
            else (was.rate, was.said) if was is not None else (0.0, "")
        if burst is None:
            burst = was.burst if was is not None else min(
                float(rate_limits.MAX_BURST), max(1.0, float(math.ceil(per_second * 60))))
        if shards is None:
            shards = was.shards if was is not None else rate_limits.auto_shards(per_second)
        limit = RateLimit(rate=per_second, burst=burst, shards=shards, said=said)
        set_ = self.queries().store.set_rate_limit(key, limit)
        assert set_ is not None
        return set_

    def delete_limit(self, key: str) -> None:
        """Remove ``key``'s limit: its jobs take no tokens of it from then on."""
        self.queries().store.set_rate_limit(key, None)

    # -- operating (dispatcher.ops.queries) ----------------------------------------------------
    def queries(self, *, logs: bool = False, alarms: bool = False) -> Queries:
        """The typed read API over the table, with this client's queues and DLQ for stats (its
        backlog counts every priority's queue); ``logs``: with the job-log reader too (its
        clients are made only for the reads that need them: show, logs); ``alarms``: with the
        stack's alarms (the console's overview)."""
        from dispatcher.ops.queries import Queries

        dlq = adapters.dead_letters(self.cfg)
        others = tuple({id(q): q for q in self._queues.values() if q is not self._queue}.values())
        return Queries(self._table(), queue=self._queue, dead_letters=dlq, other_queues=others,
                       logs=adapters.job_logs(self.cfg) if logs else None,
                       alarms=adapters.alarm_board(self.cfg) if alarms else None)

    def audit_trail(self) -> AuditTrail:
        """The console's audit records: each action written, and listed newest first."""
        return self._table()

    def stats(self, *, since: float | None = None,
              since_seconds: float | None = None) -> Stats:
        """Backlog, jobs by state, running tasks by revision, launch failures and reruns; the
        finished jobs of a window (admitted since ``since``, or within ``since_seconds``; the
        last 24 h unless given): see :meth:`Queries.stats`."""
        return self.queries().stats(since=since, since_seconds=since_seconds)

    def usage(self, by: str = "kind", *, since: float | None = None,
              since_seconds: float | None = None) -> UsageReport:
        """Jobs ended, run hours, vCPU-hours and dollars per group (``by``: kind, tenant, label
        or label:<key>) of the tasks that stopped since ``since`` (or within ``since_seconds``;
        the last 24 h unless given): see :mod:`dispatcher.ops.usage`."""
        return self.queries().usage(by, since=since, since_seconds=since_seconds)

    def costs(self, job_ids: Sequence[str]) -> dict[str, JobCost]:
        """What each of ``job_ids`` that ran cost so far (dispatcher.domain.costs.JobCost):
        its share of the bills of the tasks that ran it."""
        return self.queries().costs(builtins.list(job_ids))

    def show(self, job_id: str) -> JobDetail:
        """A job with its attempts (or a REJECTED record with its reason); JobNotFound if none."""
        return self.queries(logs=True).show(job_id)

    def logs(self, job_id: str, *, attempt: int | None = None) -> builtins.list[LogLine]:
        """The job's own log lines, in order, across its attempts (``attempt``: only runs
        with that attempt number); read from its tasks' streams, so still there after they
        are gone (CloudWatch Logs, or local mode's task output)."""
        return [line for _, line in
                self.queries(logs=True).job_log(job_id, attempt=attempt).lines]

    def follow_logs(self, job_id: str, *, attempt: int | None = None,
                    poll_seconds: float = 2.0,
                    sleep: Callable[[float], None] = time.sleep) -> Iterator[JobLog]:
        """Each read of the job's lines that found new ones, polling every ``poll_seconds``
        until the job has ended (the last read is made after it ended)."""
        queries = self.queries(logs=True)
        cursor: LogCursor | None = None
        while True:
            read = queries.job_log(job_id, attempt=attempt, cursor=cursor)
            cursor = read.cursor
            if read.lines:
                yield read
            if read.finished:
                return
            sleep(poll_seconds)

    def dead_letters(self) -> DeadLetters:
        """The DLQ (LONGJOBS_DLQ_URL): peek at messages, or move them back to their queues."""
        from dispatcher.domain.errors import LongjobsError
        from dispatcher.ops.dead_letters import DeadLetters

        if not self.cfg.dlq_url:
            raise LongjobsError("LONGJOBS_DLQ_URL is not set; the dlq commands need the "
                                "dead-letter queue's URL")
        dlq = adapters.dead_letters(self.cfg)
        assert dlq is not None  # LONGJOBS_DLQ_URL is set (checked above)
        return DeadLetters(dlq, self._queue, self._queues)

    def schedules(self) -> Schedules:
        """The stack's schedules (``LONGJOBS_SCHEDULE_GROUP``): create, list, show, pause,
        resume, update, delete, run_now. Rates in seconds are taken only against a local
        endpoint (local mode fires them; AWS refuses them)."""
        from dispatcher.ops.schedule_ops import Schedules

        return Schedules(adapters.schedule_book(self.cfg), self._table,
                         lambda body: self.submit_many([body])[0],
                         seconds=bool(self.cfg.endpoint_url), allowed_kinds=self.allowed_kinds)

    # Keep `list` the last method: below it, `list[...]` in a class-level annotation would name
    # this method (mypy: "not valid as a type").
    def list(self, *, status: str | None = None, kind: str | None = None,
             since_seconds: float | None = None, limit: int = 50,
             waiting_for: str | None = None, label: str | None = None,
             tenant: str | None = None, prefix: str | None = None
             ) -> builtins.list[JobSummary]:
        """Jobs newest first, through the status index (never a table scan); ``waiting_for``:
        only PENDING jobs waiting for that reason (:mod:`dispatcher.domain.waiting`);
        ``label``: ``key=value``, only the jobs carrying it, ``tenant``: only that tenant's
        (both through the label index); ``prefix``: only jobs whose id starts with it."""
        return self.queries().list_jobs(status=status, kind=kind, since_seconds=since_seconds,
                                         limit=limit, waiting_for=waiting_for, label=label,
                                         tenant=tenant, prefix=prefix)


def _same_size(dep_id: str, its_size: int | None, job_id: str, size: int) -> None:
    """An n_to_n dependency names an array of the dependent's size (as AWS Batch requires)."""
    if its_size is None:
        raise InvalidMessage(f"depends_on: job {dep_id!r} is not an array job; an n_to_n "
                             "dependency names an array (drop n_to_n to wait for the job)",
                             job_id=job_id)
    if its_size != size:
        raise InvalidMessage(f"depends_on: array {dep_id!r} has {its_size} children, this one "
                             f"{size}; an n_to_n dependency needs arrays of one size",
                             job_id=job_id)


def _child_in_range(dep_id: str, job_id: str, sizes: Mapping[str, int | None]) -> None:
    """A dependency named as a child (``A:i``) is one of its job's own children, or of an
    array of ``sizes`` (known array sizes by id; None: no array) past its size."""
    child = child_of(dep_id)
    if child is None:
        return
    if child[0] == job_id:
        raise InvalidMessage(f"depends_on: {dep_id!r} is a child of this job: an array "
                             "records its children only once its dependencies are met; "
                             "drop it (or use n_to_n on another array)", job_id=job_id)
    size = sizes.get(child[0])
    if size is not None and child[1] >= size:
        raise InvalidMessage(f"depends_on: {no_such_child(dep_id, size, quote=True)}; name "
                             "one of those", job_id=job_id)
