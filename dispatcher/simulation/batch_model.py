"""A whole batch in virtual time: the production pipeline on the twins behind the AWS model.

:class:`BatchModel` wires the real stages (``dispatcher.wiring.pipeline.build``: tick,
admission, bundling, recording, launches, reconcile, and the task-event handler's reruns) and
the real store to the twins, each component behind its own :mod:`~dispatcher.simulation.aws_model`
wrappers (so calls are counted per component) and all on one :class:`VirtualClock`. Then a
discrete-event loop (:meth:`BatchModel.run`) plays the batch: the schedule's ticks (one Lambda
invocation each, with the invocation's remaining time; a tick due while the previous one still
runs is skipped, as its lease would refuse it), each launched task's start after Fargate's
start latency and its runner (:mod:`~dispatcher.simulation.task_model`), each task's stop event
after it exits. The stage code runs unmodified; only its thread pools are virtual
(:func:`dispatcher.simulation.virtual_time.patched`).

Under faults (:mod:`dispatcher.simulation.faults`) the loop also plays what goes wrong, each as
AWS would present it: a task killed (its running jobs end unwritten, ECS reports its stop), a
Spot reclaim (SIGTERM, the runner gives its jobs back; the kill two minutes later), a runner
that fails itself when a write is refused past its retries (RUNNER_FAILED_EXIT), a stop event
whose handler raises (Lambda delivers it again, twice at most), a tick that raises (the next
runs as scheduled) or whose Lambda dies after a given write (its lease stays, as a killed
process leaves it). The model's :class:`~dispatcher.simulation.run_ledger.RunLedger` records
every job's runs, for the run to judge itself (:meth:`BatchModel.verdict`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

from dispatcher import settings
from dispatcher.domain import message, rate_limits
from dispatcher.domain.costs import TaskBill
from dispatcher.domain.jobs import Job, JobState, Priority
from dispatcher.domain.pacing import LaunchLimits, LaunchPacer
from dispatcher.domain.rate_limits import RateLimit
from dispatcher.domain.stops import RUNNER_FAILED_EXIT, TaskStop
from dispatcher.ops.client import JobClient
from dispatcher.simulation.arriving_queue import ArrivingQueue
from dispatcher.simulation.aws_model import (
    Calls,
    InvocationDied,
    ItemTimes,
    ModelLauncher,
    ModelQueue,
    ModelTable,
)
from dispatcher.simulation.batch_figures import admission_times, job_ids
from dispatcher.simulation.batch_shape import (
    ENV,
    EVENT_RETRIES,
    EXIT_TO_EVENT,
    EXITED,
    LAMBDA_TIMEOUT,
    QUEUE_URL,
    T0,
    TASK_EVENTS,
    BatchRun,
    Shape,
    seconds_of,
    synthetic_body,
)
from dispatcher.simulation.deep_queue import DeepQueue
from dispatcher.simulation.faults import KILLED, SPOT_WARNING_SECONDS, TaskFate, fate
from dispatcher.simulation.forgetful_table import ForgetfulTable
from dispatcher.simulation.lean_table import lean_table
from dispatcher.simulation.partitions import Partitions
from dispatcher.simulation.run_ledger import RunLedger, Verdict
from dispatcher.simulation.task_model import TaskModel, TaskRun
from dispatcher.simulation.virtual_time import VirtualClock, patched
from dispatcher.stages.tick import TickReport
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.store.base import TableRetry
from dispatcher.testing.memory_launcher import DEFAULT_CPU, DEFAULT_MEMORY, MemoryLauncher
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from dispatcher.wiring import pipeline

# What no fault of AWS's raises: a runner that raises one of these has a bug, or the model has,
# and the run stops on it rather than playing it as a runner that failed itself.
BUGS = (AssertionError, AttributeError, NameError, TypeError, ImportError)
# Where the modelled ECS puts the tasks (what their bills are priced by): the reference
# batch's weights, four Spot tasks to one on-demand (seed 000).
CAPACITY = (("FARGATE_SPOT", 4, 0), ("FARGATE", 1, 0))
# Of a task's start (provisioning, image pull, container start), the seconds Fargate bills:
# from the image pull on (https://aws.amazon.com/fargate/pricing/).
PULL_SECONDS = 10.0


class BatchModel:
    """``backlog``: the queue holds that many messages of the batch's jobs, made as they are
    received (:class:`DeepQueue`'s synthetic backlog) instead of enqueued; ``table``: the
    table twin (default a :class:`MemoryTable`); ``forget_ended``: instead, one that forgets
    a job's item that many seconds after it ended (:class:`ForgetfulTable`: a stream of
    millions)."""

    def __init__(self, shape: Shape, *, backlog: int = 0,
                 table: MemoryTable | None = None, forget_ended: float | None = None,
                 capacity: tuple[tuple[str, int, int], ...] = CAPACITY) -> None:
        self.shape = shape
        self.clock = VirtualClock(T0)
        if forget_ended is not None:
            table = ForgetfulTable(self.clock, forget_ended)
        self.rng = random.Random(shape.seed)
        lat = shape.latencies
        self.calls = {c: Calls(self.clock, lat, shape.faults.calls, seed=shape.seed * 10 + n)
                      for n, c in enumerate(("producer", "dispatcher", "events", "runner"))}
        # The store's own retries of a transaction wait in virtual time.
        self.table_retry = TableRetry(sleep=self.clock.charge)
        self.items = ItemTimes()
        self.table = table if table is not None else MemoryTable(clock=self.clock)
        # DynamoDB's limit of writes a second to one partition key, on every run.
        self.partitions = Partitions(self.table.status_key_of)
        self.sqs = DeepQueue(clock=self.clock, synthetic=shape.jobs if shape.rate else backlog,
                             body_of=synthetic_body(shape), arrival_rate=shape.rate)
        self.ecs = MemoryLauncher(clock=self.clock, limits=LaunchLimits(clock=self.clock),
                                  capacity_strategy=capacity)
        # The high queue of its own, as the stack has it; urgent jobs arrive there on time.
        self.high = ArrivingQueue(MemoryQueue(clock=self.clock), self.clock)
        # The stack's watch for urgent jobs and its runners' wait for a stream's next tick
        # (its defaults: the tick runs every minute), and its one tick at a time (the tick
        # function's reserved concurrency of 1).
        self.env = {**ENV, "LONGJOBS_MAX_RUNNING_TASKS": str(shape.tasks),
                    "LONGJOBS_TASK_CONCURRENCY": str(shape.concurrency),
                    "LONGJOBS_URGENT_WATCH_SECONDS": "50",
                    "LONGJOBS_STREAM_WAIT_SECONDS": "90",
                    "LONGJOBS_TICK_ONE_AT_A_TIME": "true", **shape.settings}
        self.cfg = settings.load("dispatcher", self.env)
        self.runner_cfg = settings.load("runner", self.env)
        self.dispatcher = self._stages("dispatcher")
        self.events = self._stages("events")
        self.runner_store = Store(ModelTable(self.table, self.calls["runner"], self.items,
                                             self.partitions),
                                  clock=self.clock, table_retry=self.table_retry)
        # The JSON logs' level is read once, at import: the model's is its settings'.
        logging.getLogger("dispatcher").setLevel(self.env["LONGJOBS_LOG_LEVEL"])
        self.urgent_id: str | None = None
        self.tenant_id: str | None = None  # the other tenant's job (Shape.tenant_at)
        self.outcome = BatchRun()
        self.ledger = RunLedger()
        self._fault_rng = random.Random(shape.seed + 1)  # the faults' own draws
        self._fates: dict[str, TaskFate] = {}
        self._steps: dict[str, tuple[TaskRun, Iterator[float]]] = {}  # each task's runner
        self._started: dict[str, float] = {}  # a tenant's job running: since when
        # The event loop's state (run): the events, the tasks seen launched, their runners.
        self._events: list[tuple[float, int, str, Any]] = []
        self._seq = itertools.count()
        self._seen: set[str] = set()
        self._last_end = T0
        self._world = threading.Lock()  # the loop's state, from a tick's thread (_catch_up)
        self._tasks = TaskModel(self.runner_store, self.clock, concurrency=shape.concurrency,
                                seconds_of=seconds_of, flush_seconds=self.cfg.flush_seconds,
                                heartbeat_seconds=self.cfg.heartbeat_seconds,
                                stream_wait_seconds=self.runner_cfg.stream_wait_seconds,
                                on_job_start=self._job_started,
                                on_job_end=self._job_ended)

    def _stages(self, component: str) -> pipeline.Stages:
        calls = self.calls[component]
        launcher = ModelLauncher(self.ecs, calls)
        store = Store(ModelTable(self.table, calls, self.items, self.partitions), clock=self.clock,
                      table_retry=self.table_retry)
        pacer = LaunchPacer(runtask_per_second=self.cfg.runtask_per_second,
                            task_launch_burst=self.cfg.task_launch_burst,
                            task_launch_per_second=self.cfg.task_launch_per_second,
                            clock=self.clock, sleep=self.clock.charge)
        return pipeline.build(self.cfg, queue=ModelQueue(self.sqs, calls), store=store,
                              launcher=launcher, clock=self.clock, pacer=pacer,
                              priority_queues={Priority.HIGH: ModelQueue(self.high, calls)})

    def producer(self) -> JobClient:
        return JobClient(queue_url=QUEUE_URL, queue=ModelQueue(self.sqs, self.calls["producer"]))

    def jobs(self) -> Iterator[dict[str, Any]]:
        s = self.shape
        for i in range(s.jobs):
            seconds = s.seconds * self.rng.uniform(1 - s.jitter, 1 + s.jitter)
            job = {"kind": "seed.call", "job_id": f"j{i:07d}",
                   "payload": {"seconds": round(seconds, 3)}, "estimated_seconds": s.seconds}
            if s.tenants:
                job["tenant"] = s.tenants[i % len(s.tenants)][0]
            if s.limit is not None:
                job["uses"] = {s.limit[0]: 1}
            yield job

    def enqueue(self, chunk: int = 10_000) -> None:
        """The batch on the queue before the first tick (the producer's calls are counted,
        its time is not: the drain is measured from the end of enqueueing)."""
        client = self.producer()
        batch: list[dict[str, Any]] = []
        for job in self.jobs():
            batch.append(job)
            if len(batch) == chunk:
                client.submit_many(batch)
                batch = []
        if batch:
            client.submit_many(batch)

    def one_tick(self) -> tuple[float, float, TickReport]:
        """One tick at T0 (its start and end, virtual) on what the queue holds."""
        self.clock.set(T0)
        self.clock.lead()
        with patched(self.clock), lean_table():
            report = self.dispatcher.tick.tick(remaining_ms=self._remaining(T0 + LAMBDA_TIMEOUT))
        return T0, self.clock(), report

    # -- the event loop --------------------------------------------------------------------------
    def run(self, *, max_seconds: float = 24 * 3600.0) -> BatchRun:
        s, out = self.shape, self.outcome
        for tenant, weight in s.tenants:  # longjobs tenants set T --weight W
            self.runner_store.set_tenant_policy(tenant, weight=weight)
        if s.limit is not None:  # longjobs limits set KEY --rate R --burst B
            key, rate, burst = s.limit
            per_second, said = rate_limits.parse_rate(rate)
            self.runner_store.set_rate_limit(key, RateLimit(per_second, burst, said=said))
            self._count_grants()
        if not s.rate:  # a stream's jobs arrive as the run goes (DeepQueue's arrival rate)
            with lean_table():
                self.enqueue()
        self.clock.set(T0)
        self._at(T0, "tick")
        if s.urgent_at is not None:  # on the high queue from then, seen by a tick under way
            self.urgent_id = "urgent-0000001"
            self.high.arrive(T0 + s.urgent_at, message.JobMessage.model_validate({
                "kind": "seed.call", "job_id": self.urgent_id, "payload": {"seconds": s.seconds},
                "estimated_seconds": s.seconds, "priority": "high",
                "schema_version": message.SCHEMA_VERSION}).model_dump_json(exclude_none=True))
        if s.tenant_at is not None:  # sent then to the normal queue, behind the batch
            self.tenant_id = "tenant-0000001"
            self._at(T0 + s.tenant_at, "tenant")
        tick_free = T0
        self.clock.lead()
        self.high.before_receive = self._catch_up
        with patched(self.clock), lean_table():
            target = s.jobs + (s.urgent_at is not None) + (s.tenant_at is not None)
            done = False
            while self._events and not done:
                t, _, kind, what = heapq.heappop(self._events)
                if t - T0 > max_seconds:
                    break
                self.clock.set(t)
                if kind == "tick":
                    if t < tick_free:
                        out.skipped_ticks += 1  # the running tick holds the lease
                    else:
                        tick_free = self._tick(t, len(out.ticks) + len(out.crashed_ticks)
                                               + len(out.failed_ticks))
                    self._at(t + s.tick_interval, "tick")
                elif kind in TASK_EVENTS:
                    self._task_event(t, kind, what)
                elif kind == "stopped":
                    self._stopped(t, what)
                elif kind == "retried":
                    self._stopped(t, *what)
                elif kind == "tenant" and self.tenant_id is not None:
                    self.sqs.send([("t", message.JobMessage.model_validate({
                        "kind": "seed.call", "job_id": self.tenant_id, "tenant": "late",
                        "payload": {"seconds": s.seconds}, "estimated_seconds": s.seconds,
                        "schema_version": message.SCHEMA_VERSION}).model_dump_json(
                            exclude_none=True))])
                if kind in ("tick", "stopped", "retried"):  # only these launch tasks
                    self._start_tasks()
                # Without faults every job runs once: the runs counted say when all are done.
                # With them a run may be lost and rerun: the table says, looked at as tasks
                # come and go.
                done = out.jobs_run >= target if not s.faults.any else \
                    kind in ("tick", "stopped", "retried") and self._final() >= target
            # The stop events still queued when the last job ended (a tick that watched the
            # high queue ran the tasks to their ends) are the batch's too: their calls count.
            for t, _, kind, what in sorted(self._events):
                if kind == "stopped" and t - T0 <= max_seconds:
                    self.clock.set(t)
                    self._stopped(t, what)
        self.high.before_receive = None
        out.drain = self._last_end - T0
        out.calls = {c: calls.counts for c, calls in self.calls.items()}
        out.admitted_at = sorted(admission_times(self.table, self.urgent_id))
        return out

    def _task_event(self, t: float, kind: str, what: Any) -> None:
        if kind == "task":
            self._task_step(t, what)
        elif kind == "kill":
            self._kill(t, what)
        else:
            self._sigterm(t, what)

    def _tick(self, t: float, number: int) -> float:
        """The tick's Lambda invoked at ``t`` (the ``number``-th to run); when it ended (a tick
        that died: when it died; the next tick takes its lease over at once, as the stack's
        LONGJOBS_TICK_ONE_AT_A_TIME says)."""
        crash, out = self.shape.faults.tick_crash, self.outcome
        calls = self.calls["dispatcher"]
        if crash is not None and crash.tick == number:
            calls.die_after(crash.after_writes)
        try:
            report = self.dispatcher.tick.tick(remaining_ms=self._remaining(t + LAMBDA_TIMEOUT))
        except InvocationDied:
            out.crashed_ticks.append(self.clock() - T0)
            return self.clock()  # its lease stays held, for the next tick to take over
        except Exception as exc:  # the invocation failed; the next tick runs
            out.failed_ticks.append(f"+{t - T0:.0f} s: {exc!r}"[:300])
            return self.clock()
        finally:
            calls.revive()
        out.ticks.append((t - T0, self.clock() - T0, report))
        return self.clock()

    def _stopped(self, t: float, task: TaskRun, tries: int = 0) -> None:
        """A task's stop event (one delivery of it), handled by the task-event handler's
        stages, as ECS reports the stop (a kill, a reclaim, a failed runner: ``task.stop``);
        a handler that raises gets the event again (:data:`EVENT_RETRIES`)."""
        code, reason, exit_code = task.stop or (*EXITED, 0)
        if self.ecs.tasks[task.task_arn].last_status.gone is False:
            self.ecs.stop_task(task.task_arn, code, reason, exit_code)
        stopped = T0 + task.ended_at if task.ended_at is not None else t
        ecs = self.ecs.tasks[task.task_arn]
        # Billed from its image pull (PULL_SECONDS before its runner starts) to its stop.
        bill = TaskBill(DEFAULT_CPU, DEFAULT_MEMORY,
                        T0 + max(task.launched_at, task.started_at - PULL_SECONDS), stopped,
                        ecs.capacity_provider)
        self.outcome.bills.setdefault(task.task_arn, bill)
        try:
            self.events.reruns.on_stop(TaskStop(task.task_arn, code, reason, exit_code,
                                                stopped_at=stopped, bill=bill))
        except Exception:  # the invocation failed: Lambda retries it
            self.outcome.failed_events += 1
            if tries < len(EVENT_RETRIES):
                self._at(t + EVENT_RETRIES[tries], "retried", (task, tries + 1))

    def _sigterm(self, t: float, task: TaskRun) -> None:
        """A Spot reclaim's two-minute warning: SIGTERM now (the runner gives its jobs back
        at once), the kill two minutes later if it is still running."""
        if task.ended_at is not None:
            return
        self.outcome.reclaimed += 1
        task.stopping, task.stop = True, (*KILLED[:2], 0)
        self._at(t, "task", self._steps[task.task_arn])
        self._at(t + SPOT_WARNING_SECONDS, "kill", task)

    def _kill(self, t: float, task: TaskRun) -> None:
        """The task killed (dispatcher.simulation.faults): its running jobs end unwritten
        with it, ECS reports it stopped, and its stop event goes out as its fate says."""
        if task.ended_at is not None:  # it had ended before
            return
        # Killed by ECS (a crash, or a reclaim's SIGKILL), or its runner failed itself.
        task.killed_at = t
        task.stop = KILLED if task.stopping or task.stop is None else task.stop
        for job_id in sorted(task.running):
            self.ledger.ended(job_id, task.task_arn, t)
        task.running.clear()
        task.ended_at = t - T0
        self.outcome.jobs_run += task.jobs_run
        if task.last_job_end is not None and not task.urgent:
            self._last_end = max(self._last_end, task.last_job_end)
        self.ecs.stop_task(task.task_arn, *task.stop)
        for delay in self._fates[task.task_arn].deliveries:
            self._at(t + delay, "stopped", task)

    def _final(self) -> int:
        """Jobs ended for good: SUCCEEDED, or FAILED (a job whose reruns spent its budget is
        the ledger's to judge, not a job the run waits for for ever)."""
        return sum(self.table.count(k) for state in (JobState.SUCCEEDED, JobState.FAILED)
                   for k in r.job_statuses(state))

    def _job_ended(self, job: Job, task_arn: str, at: float) -> None:
        self.ledger.ended(job.job_id, task_arn, at)
        started = self._started.pop(job.job_id, None)
        if job.tenant is not None and started is not None:
            work = self.outcome.tenant_work.setdefault(job.tenant, {})
            second = int(at - T0)
            work[second] = work.get(second, 0.0) + at - started

    def verdict(self) -> Verdict:
        """What the run's ledger says of it (:mod:`dispatcher.simulation.run_ledger`): every
        job submitted (the urgent one too) against its state in the table at the end."""
        ids = job_ids(self.shape)
        ids += [self.urgent_id] if self.urgent_id is not None else []
        ids += [self.tenant_id] if self.tenant_id is not None else []
        known = dict(self.table.ended) if isinstance(self.table, ForgetfulTable) else {}
        known.update({rec.job_id: (rec.state or "", float(rec.max_attempts or 0))
                      for pk, rec in self.table.snapshot().items()
                      if pk.startswith("JOB#") and rec.job_id})
        states = {j: JobState(state) if state else None for j, (state, _) in known.items()}

        def budget(job_id: str) -> int:
            rec = known.get(job_id)
            return int(rec[1]) + self.cfg.max_infra_attempts if rec else 0

        return self.ledger.verdict(ids, states, budget)

    def _at(self, t: float, kind: str, what: Any = None) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, what))

    def _start_tasks(self) -> None:
        """The tasks launched since the last look, each starting after Fargate's start."""
        s = self.shape
        for arn, launched in self._launched(self._seen):
            task = TaskRun(arn, launched - T0, launched + self.rng.uniform(*s.start) - T0)
            self.outcome.tasks.append(task)
            steps = self._steps[arn] = (task, self._tasks.run(task))
            self._at(T0 + task.started_at, "task", steps)
            doom = self._fates[arn] = fate(s.faults, self._fault_rng, EXIT_TO_EVENT)
            if doom.killed_after is not None:
                self._at(T0 + task.started_at + doom.killed_after, "kill", task)
            if doom.reclaimed_after is not None:
                self._at(T0 + task.started_at + doom.reclaimed_after, "sigterm", task)

    def _task_step(self, t: float, what: tuple[TaskRun, Iterator[float]]) -> None:
        task, steps = what
        if task.ended_at is not None:  # its runner had ended (or died with it)
            return
        try:
            wake = next(steps, None)
        except BUGS:
            raise  # the runner's code or the model's is wrong: no fault of AWS's to play
        except Exception as exc:  # the runner failed itself (a write refused)
            self.outcome.failed_runners += 1
            self.outcome.runner_errors.append(f"+{t - T0:.0f} s: {exc!r}"[:300])
            task.stop = (*EXITED, RUNNER_FAILED_EXIT)
            self._kill(t, task)  # its running jobs end with its process
            return
        if wake is not None:  # (a SIGTERM's early wake leaves one queued: it wakes in vain)
            self._at(wake, "task", what)
            return
        self.outcome.jobs_run += task.jobs_run
        task.ended_at = (task.ended_at or t) - T0
        if not task.urgent:  # the drain is the batch's: until its last job ends
            end = task.last_job_end if task.last_job_end is not None else task.ended_at + T0
            self._last_end = max(self._last_end, end)
        for delay in self._fates[task.task_arn].deliveries:
            self._at(self.clock() + delay, "stopped", task)

    def _catch_up(self) -> None:
        """The tasks' steps up to the calling thread's time, run while a tick is under way
        (called as it receives from the high queue): a tick runs whole between two events of
        the loop, and a long one would otherwise look for running tasks in a table where none
        has claimed its bundle yet. What befalls tasks (their kills and SIGTERMs) comes in its
        turn among their steps; stop events and ticks stay for the loop."""
        with self._world:
            now = self.clock()
            self._start_tasks()
            later: list[tuple[float, int, str, Any]] = []
            while self._events and self._events[0][0] <= now:
                event = heapq.heappop(self._events)
                if event[2] in TASK_EVENTS:
                    self.clock.set(event[0])
                    self._task_event(event[0], event[2], event[3])
                else:
                    later.append(event)
            for event in later:
                heapq.heappush(self._events, event)
            self.clock.set(now)

    def _launched(self, seen: set[str]) -> list[tuple[str, float]]:
        """Tasks started since the last look (not in ``seen``, which they join)."""
        fresh: list[tuple[str, float]] = []
        for stages in (self.dispatcher, self.events):
            assert isinstance(stages.launcher, ModelLauncher)
            fresh += [(arn, at) for arn, at, _ in stages.launcher.started if arn not in seen]
        seen.update(arn for arn, _ in fresh)
        return sorted(fresh, key=lambda s: s[1])

    def _remaining(self, deadline: float) -> Callable[[], int]:
        return lambda: int(max(0.0, deadline - self.clock()) * 1000)

    def _count_grants(self) -> None:
        """Every grant the dispatcher's launches take, into the outcome (Shape.limit)."""
        store = self.dispatcher.store
        take = store.take

        def counted(bucket: str, shard: int, n: float, limit: RateLimit, now: float,
                    known: float | None) -> float | None:
            got = take(bucket, shard, n, limit, now, known)
            if got is not None:
                self.outcome.grants.append((now - T0, n))
            return got

        store.take = counted  # type: ignore[method-assign]

    def _job_started(self, job: Job, task_arn: str, at: float) -> None:
        self.ledger.started(job.job_id, task_arn, at)
        if self.shape.limit is not None:
            self.outcome.starts.append(at - T0)
        if job.tenant is not None and self.shape.tenants:
            self._started[job.job_id] = at
            self.outcome.tenant_last_start[job.tenant] = at - T0
        if job.job_id == self.tenant_id:
            self.outcome.tenant_started = at - T0
        if job.job_id == self.urgent_id:
            self.outcome.urgent_started = at - T0
            for task in self.outcome.tasks:
                task.urgent = task.urgent or task.bundle_id == job.bundle_id
