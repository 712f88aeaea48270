"""The whole system on the twins, as a user's workload mixes it: one model-based test.

Producers submit jobs of every shape (priorities, limited kinds, ``not_before`` near and far,
payloads and checkpoints near DynamoDB's item limit, short and long jobs) and malformed
messages; the tick runs with settings changed between ticks (task concurrency, kind limits,
task slots); each launched task's runner claims, starts, checkpoints and finishes jobs through
the runner's real write paths (tests/model_runner.py), or is killed after any write, gets
SIGTERM, freezes, or has a handler that ignores its cancellation or raises ``Interrupted``;
operators cancel and retry, one job or many by a filter (a bulk action cut short and resumed by
its id), and deploy new job code (tests/model_operators.py); schedules fire, some fires twice
and late (tests/model_schedules.py); stop events arrive late, twice and
out of order; the clock moves by seconds to half a year, and DynamoDB's TTL deletes what has
expired. A tick may die right after any of its table writes, or meet transactions that fail for
a moment (tests/model_faults.py).
After every step the invariants below are checked (tests/model_checks.py reads them from the
twins' state).

KNOWN_GAPS names the checks that today's code is known to fail; each is skipped until the fix
for it is merged, then its name is removed. ``LONGJOBS_MODEL_GAPS`` overrides the set for one
run (an empty value checks everything), ``LONGJOBS_MODEL_EXAMPLES`` the number of examples.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dispatcher.domain import arrays, dependencies
from dispatcher.domain import waiting as waiting_rule
from dispatcher.domain.arrays import Tally
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.dependencies import Dependency
from dispatcher.domain.errors import InvalidMessage, LongjobsError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState, Priority, Resources
from dispatcher.domain.message import MAX_NOT_BEFORE
from dispatcher.domain.stops import TaskStop
from dispatcher.ops.client import JobClient
from dispatcher.ports.queue import Received
from dispatcher.ports.table import Record, TableUnavailable
from dispatcher.stages import bundle as bundle_stage
from dispatcher.stages import handoff
from dispatcher.stages.dependents import Dependents
from dispatcher.stages.policy import HandoffPolicy
from dispatcher.store import codec, handing, job_ops
from dispatcher.store import operator as operator_store
from dispatcher.testing.ended_jobs_feed import EndedJobsFeed
from dispatcher.testing.memory_event_sink import MemoryEventSink, follow
from dispatcher.testing.memory_queue import MemoryQueue
from job_runner import writes as writes_module
from tests import model_checks as checks
from tests import model_costs
from tests import model_promises as promises
from tests.model_arrays import array_problems
from tests.model_faults import FaultRules, FaultyTable, model_store, one_thread
from tests.model_limits import KindLimitWatch, TenantCapWatch, parse_limits
from tests.model_operators import OperatorRules
from tests.model_paths import mistold
from tests.model_promises import Promises, TenantTurns
from tests.model_runner import BEHAVIOURS, NATURES, ModelIds, ModelTime, SimTask, expire
from tests.model_schedules import ScheduleRules
from tests.model_stats import stats_disagree
from tests.model_tokens import TokenWatch
from tests.twins import ENV, Twins

# Checks skipped because today's code fails them; remove a name once its fix is merged.
KNOWN_GAPS: frozenset[str] = frozenset()
GAPS = frozenset(g for g in os.environ.get("LONGJOBS_MODEL_GAPS", ",".join(KNOWN_GAPS))
                 .split(",") if g)

EXAMPLES = int(os.environ.get("LONGJOBS_MODEL_EXAMPLES", "150"))
STEPS = 50
MAX_INFRA_ATTEMPTS = 2
# The stack's LONGJOBS_STREAM_WAIT_SECONDS (infra/template.yaml): a runner of a stream waits
# for the next tick's follow-ons rather than exit.
STREAM_WAIT_SECONDS = 90.0
# The budget's slack (dispatcher/domain/lifecycle.py): every run of a job is charged an
# attempt or an infrastructure attempt, but one: a stop of a bundle's first launch that names
# nobody (its writes were buffered). So runs <= max_attempts + MAX_INFRA_ATTEMPTS + 1.
LAUNCH_SLACK = 1
# A due bundle with room for it launches within this many ticks (with room) beyond the due
# bundles ahead of it when it first had room: the default priority weights (6:3:1) give the
# lowest level one free slot in ten.
STARVATION_TICKS = 10
DAY = checks.DAY


class SystemModel(OperatorRules, FaultRules, ScheduleRules, RuleBasedStateMachine):
    hooks_time = ModelTime()
    hooks_ids = ModelIds()

    def __init__(self) -> None:
        super().__init__()
        self.twins = Twins()  # a fresh world per example: replays and shrinking are exact
        self.table = self.twins.table = FaultyTable(self.twins.clock)
        self.twins.store = model_store(self.table, self.twins.clock)
        self.job_events = MemoryEventSink()  # every job state change, as the stream tells it
        follow(self.table, self.job_events)
        self.expired: dict[str, int] = {}  # job id: events told when TTL deleted its record
        self.ttl_ran = False  # TTL deleted items (counters and bills expire apart)
        self.expired_as: dict[str, str] = {}  # job id: the state TTL deleted it in
        self.hooks_time.clock = self.twins.clock
        self.hooks_ids.reset()
        self.kind_limits = KindLimitWatch()
        self.tenant_caps = TenantCapWatch()
        self.tokens = TokenWatch()  # every grant of the rate limits' buckets
        self.tokens.watch(self.twins.store)
        self.settings = {"LONGJOBS_TASK_CONCURRENCY": "2", "LONGJOBS_KIND_LIMITS": "",
                         "LONGJOBS_MAX_RUNNING_TASKS": "3", "LONGJOBS_TICK_ONE_AT_A_TIME": "true"}
        self.submitted: dict[str, str] = {}  # job id -> "valid" / "malformed"
        self.bodies: list[str] = []  # malformed messages without a job id
        self.finished: set[str] = set()  # seen in a terminal state (TTL may delete them)
        self.tasks: dict[str, SimTask] = {}
        self.events: list[TaskStop] = []  # stop events not delivered yet
        self.delivered: list[TaskStop] = []
        self.stopped: set[str] = set()
        self.runs: dict[str, int] = {}  # handler runs per job since its last retry
        self.depends: dict[str, list[Dependency]] = {}  # what each dependent job waits for
        self.sizes: dict[str, int] = {}  # each array's size (n_to_n dependents pick one)
        self.arrays_client = self.twins.client()
        self.early: list[str] = []  # dependents that ran before their dependencies allowed
        self.ended_as: dict[str, set[str]] = {}  # each dependency's ends seen, after each step
        self.item_sizes: dict[int, tuple[Record, int]] = {}  # checks.oversized's, between steps
        # The table's stream as the dependents function reads it (the stream rule delivers
        # it), and the time of the last look at every held dependent by a tick no fault hit.
        self.feed = EndedJobsFeed(self.table)
        self.clean_sweep: float | None = None
        self.budget: dict[str, int] = {}
        self.nature: dict[str, str] = {}  # what each job's handler does (runners_pass)
        self.waiting: dict[tuple[str, int], list[int]] = {}  # bundle: [ticks, ahead]
        self.n = 0
        # Urgent jobs have a queue of their own (as on AWS): sent into whatever backlog runs,
        # a tick with no slot free hands them to running tasks (dispatcher/stages/handoff.py).
        self.high = MemoryQueue(clock=self.twins.clock)
        self.twins.priority_queues[Priority.HIGH] = self.high
        self.forced: dict[tuple[str, str], int] = {}  # receives a fault spent (FaultRules)
        self.operators_begin()  # bulk actions and deploys (OperatorRules)
        self.schedules_begin()  # fires of schedules, as Scheduler sends them (ScheduleRules)
        self.live_tasks = 0  # tasks running after the last step (task_limit)
        # A tick completed launches a crashed tick had decided, under the limit then in force.
        self.recovered_launches = False
        # Jobs (and array parents) whose cancel returned without an error, with when: none may
        # start again until retried (cancel_kept).
        self.cancelled: dict[str, float] = {}
        # Those whose record TTL deleted since: the id is forgotten (docs/producing.md), so a
        # message sent after the cancel is a new job of it; one sent before must not run it.
        self.forgotten: dict[str, float] = {}
        self.claimed_at_cancel: set[str] = set()  # in a task's claimed bundle then: see operator
        self.broken_cancels: list[str] = []
        self.promises = Promises()  # waiting_for's "the next tick launches it" (promised)
        self.turns = TenantTurns()  # tenants owed a slot (promised)

    # -- helpers ----------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        # Follow-ons of a second's work: the model's backlogs (a few jobs a slot) are cut into
        # them (dispatcher/store/follow_ons.py), and taken by its runners, as large ones are.
        return {**self.settings, "LONGJOBS_MAX_INFRA_ATTEMPTS": str(MAX_INFRA_ATTEMPTS),
                "LONGJOBS_TICK_CONCURRENCY": "2", "LONGJOBS_FOLLOW_ON_SECONDS": "1",
                **self.revision_env()}

    def fire_budget(self, max_attempts: int) -> int:
        """A schedule's fire's job: its max_attempts, and the slack every job has."""
        return max_attempts + MAX_INFRA_ATTEMPTS + LAUNCH_SLACK

    def gap(self, check: str) -> bool:
        return check in GAPS

    def fail(self, check: str, problems: list[str]) -> None:
        if problems and check not in GAPS:
            raise AssertionError(f"[{check}] " + "\n".join(problems[:5]))

    def guarded(self, check: str, what: str, call: Any) -> Any:
        """Run a tick or a stop event; an exception is a violation, with the table's largest
        job items named (the data a job brought)."""
        try:
            return call()
        except Exception as exc:
            sizes = sorted(((checks.item_bytes(rec), pk) for pk, rec in
                            self.twins.table.snapshot().items() if pk.startswith("JOB#")),
                           reverse=True)[:3]
            self.fail(check, [f"{what} raised {type(exc).__name__}: {str(exc)[:300]}; "
                              f"largest job items: {sizes}"])
            return None

    def sync(self) -> None:
        """Learn the tasks the launcher started (and count a launch for each job they were
        started for) and those that stopped (their processes are gone; their stop event is
        on its way)."""
        for arn, task in self.twins.launcher.tasks.items():
            if arn not in self.tasks:
                bundle = self.twins.store.bundle_for_task(arn)
                key = (bundle.bundle_id, bundle.attempt) if bundle else ("?", 0)
                self.tasks[arn] = SimTask(
                    arn, key, self.twins.store, self.twins.launcher, self.twins.clock,
                    int(self.settings["LONGJOBS_TASK_CONCURRENCY"]), self.ran,
                    stream_wait=STREAM_WAIT_SECONDS)
            sim = self.tasks[arn]
            if task.last_status.gone and arn not in self.stopped:
                self.stopped.add(arn)
                sim.gone()
                self.events.append(TaskStop(arn, task.stop_code, task.stopped_reason,
                                            task.exit_code, task.stopped_at, task.bill()))

    def ran(self, job_id: str) -> None:
        self.runs[job_id] = self.runs.get(job_id, 0) + 1
        ids = {job_id, job_id.split(":")[0]}
        if (ids & self.cancelled.keys() or self.revived(job_id, ids & self.forgotten.keys())) \
                and job_id not in self.claimed_at_cancel:
            self.broken_cancels.append(f"{job_id} started after a cancel of it (or of its "
                                       f"array) returned, with no retry since")
        if job_id in self.depends:  # it runs now: each dependency ended as it asked
            wanted = self.depends[job_id]
            states = self.twins.store.job_states([d.job_id for d in wanted])
            # One TTL deleted ended long ago, as it then was (its dependents ran since).
            states = {k: v if v is not None else self.expired_as.get(k)
                      for k, v in states.items()}
            # A dependency's end releases its dependents once: one retried by an operator
            # since (running again) released them when it ended as asked.
            self.early += [f"{job_id} ran while its dependency {d.job_id} was "
                           f"{states.get(d.job_id)} ({d.condition} needed)" for d in wanted
                           if dependencies.verdict(d, states.get(d.job_id)) != dependencies.MET
                           and not any(dependencies.verdict(d, ended) == dependencies.MET
                                       for ended in self.ended_as.get(d.job_id, ()))]

    def revived(self, job_id: str, forgotten: set[str]) -> bool:
        """Whether ``job_id`` runs from a message sent no later than the cancel of an id in
        ``forgotten`` returned (SQS's retention, shorter than the table's, keeps such a copy
        from outliving the record). Read as stored: a runner's step must not meet the tick's
        faults."""
        rec = self.table._items.get(codec.job_key(job_id)) if forgotten else None
        sent = rec.enqueued_at if rec is not None else None
        return any(sent is None or sent <= self.forgotten[j] for j in forgotten)

    def pick(self, data: st.DataObject, ok: Any) -> SimTask | None:
        tasks = sorted((t for t in self.tasks.values() if ok(t)), key=lambda t: t.key)
        return tasks[data.draw(st.integers(0, 15)) % len(tasks)] if tasks else None

    def any_task(self, ok: Any) -> bool:
        return any(ok(t) for t in self.tasks.values())

    # -- producers -------------------------------------------------------------------------------
    @rule(spec=checks.job_specs(), copies=st.sampled_from([1, 1, 2, 5, 15]), resend=st.booleans(),
          nature=st.sampled_from(NATURES))
    def submit(self, spec: dict[str, Any], copies: int, resend: bool,
               nature: str = "succeed") -> None:
        now = self.twins.clock()
        jobs = []
        for _ in range(copies):
            # Not an array's, a dependent's, an urgent job's or a fire's id: its model is its
            # own (an urgent id sent again as another job, a late one, is no urgent job).
            plain = sorted(j for j in self.submitted
                           if not j.startswith(("a", "d", "u", "schedule/")))
            if resend and plain:  # a producer sends a job id again
                job_id = plain[len(plain) // 2]
            else:
                self.n += 1
                job_id = f"j{self.n:03d}"
            jobs.append({"kind": spec["kind"], "payload": {"data": "x" * spec["payload_bytes"]},
                         "job_id": job_id, "estimated_seconds": spec["estimated_seconds"],
                         "max_attempts": spec["max_attempts"], "priority": spec["priority"],
                         "timeout_seconds": spec["timeout_seconds"],
                         "not_before": None if spec["not_before"] is None
                         else MAX_NOT_BEFORE if spec["not_before"] == checks.LATEST
                         else now + spec["not_before"], "labels": spec.get("labels"),
                         "tenant": spec.get("tenant"), "uses": spec.get("uses")})
        self.twins.client().submit_many(jobs)
        for j in jobs:
            self.submitted.setdefault(j["job_id"], "valid")
            self.nature.setdefault(j["job_id"], nature)
            self.budget.setdefault(j["job_id"], j["max_attempts"] + MAX_INFRA_ATTEMPTS
                                   + LAUNCH_SLACK)

    @rule(copies=st.sampled_from([40, 100]), nature=st.sampled_from(NATURES),
          tenant=st.sampled_from([None, *checks.TENANTS]))
    def burst(self, copies: int, nature: str, tenant: str | None = None) -> None:
        """Small jobs, more than the slots take at once: cut into follow-ons that the runners
        take as their bundles end (dispatcher/store/follow_ons.py); of one tenant, or none."""
        self.submit({"kind": "plain", "priority": "normal", "estimated_seconds": 0.5,
                     "not_before": None, "payload_bytes": 0, "max_attempts": 3,
                     "timeout_seconds": None, "tenant": tenant}, copies, False, nature)

    @rule(first=st.sampled_from([None, *checks.TENANTS]), nature=st.sampled_from(NATURES))
    def contend(self, first: str | None, nature: str) -> None:
        """One tenant's backlog takes every slot, and another's comes behind it: the second
        gets its share as the first's tasks end their bundles (the ``tenant_turns`` check)."""
        self.burst(40, nature, first)
        self.tick(1)
        self.runners_pass(nature)
        self.burst(20, "succeed", next(t for t in checks.TENANTS if t != first))

    @rule(size=st.sampled_from([2, 7, 30]), tolerated=st.sampled_from([0, 1, "50%"]),
          nature=st.sampled_from(NATURES), estimate=st.sampled_from([1.0, 600.0]),
          element_wise=st.sampled_from([None, None, *dependencies.Requires]))
    def submit_array(self, size: int, tolerated: int | str, nature: str,
                     estimate: float, element_wise: dependencies.Requires | None = None) -> None:
        """An array job: one message; its children are recorded by the ticks. With
        ``element_wise``, it depends n_to_n on an earlier array (taking its size), the one
        whose children have gone furthest: its child i waits for that array's child i to end
        so."""
        self.n += 1
        job_id = f"a{self.n:03d}"
        view = self.view()
        on = max(self.sizes, default=None, key=lambda a: (
            Tally.from_json(rec.array_tally).settled, int(rec.array_next or 0))
            if (rec := view.items.get(codec.job_key(a))) is not None else (-1, -1))
        wanted = [] if element_wise is None or on is None else [
            dependencies.Dependency(on, element_wise, n_to_n=True)]
        size = self.sizes[on] if wanted and on is not None else size
        # One producer sends the arrays: it knows those it sent before a tick recorded them.
        self.arrays_client.submit("k", {"n": self.n}, job_id=job_id, array_size=size,
                                  tolerated_failures=tolerated, estimated_seconds=estimate,
                                  max_attempts=2, depends_on=[d.as_json() for d in wanted])
        self.submitted[job_id] = "valid"
        self.sizes[job_id] = size
        self.budget[job_id] = 0  # the parent itself never runs
        for i in range(size):
            child = arrays.child_id(job_id, i)
            self.nature[child] = nature if i % 3 == 0 else "succeed"
            self.budget[child] = 2 + MAX_INFRA_ATTEMPTS + LAUNCH_SLACK
            if wanted:
                self.depends[child] = [d.element(i) for d in wanted]

    @precondition(lambda self: bool(self.submitted))
    @rule(data=st.data(), condition=st.sampled_from(list(dependencies.Requires)),
          nature=st.sampled_from(NATURES))
    def submit_dependent(self, data: st.DataObject, condition: dependencies.Requires,
                         nature: str) -> None:
        """A job that waits for one or two submitted jobs (an array's parent among them)."""
        known = sorted(j for j, how in self.submitted.items() if how == "valid")
        # An array's children too, recorded or not yet (the dependent waits for them).
        known += sorted(f"{parent}:{i}" for parent, size in self.sizes.items()
                        for i in (0, size - 1))
        if not known:
            return
        picked = sorted(set(data.draw(st.lists(st.sampled_from(known), min_size=1,
                                               max_size=2))))
        self.n += 1
        job_id = f"d{self.n:03d}"
        wanted = [dependencies.Dependency(j, condition) for j in picked]
        try:
            self.twins.client().submit("k", {}, job_id=job_id, estimated_seconds=1.0,
                                       max_attempts=1, depends_on=[d.as_json() for d in wanted])
        except InvalidMessage:
            return  # a dependency not recorded yet (this client did not send it): refused
        self.submitted[job_id] = "valid"
        self.depends[job_id] = wanted
        self.nature[job_id] = nature
        self.budget[job_id] = 1 + MAX_INFRA_ATTEMPTS + LAUNCH_SLACK

    @rule(copies=st.sampled_from([1, 2, 3]))
    def urgent(self, copies: int) -> None:
        """A producer sends small high jobs to the high queue, into whatever backlog runs."""
        jobs: list[dict[str, Any]] = []
        for _ in range(copies):
            self.n += 1
            jobs.append({"kind": "plain", "payload": {}, "job_id": f"u{self.n:03d}",
                         "estimated_seconds": 5.0, "priority": "high"})
        JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"], table_name=ENV["LONGJOBS_TABLE"],
                  region="us-east-1", queues={Priority.NORMAL: self.twins.queue,
                                              Priority.HIGH: self.high}).submit_many(jobs)
        for j in jobs:
            self.submitted[j["job_id"]] = "valid"
            self.nature[j["job_id"]] = "succeed"
            self.budget[j["job_id"]] = 3 + MAX_INFRA_ATTEMPTS + LAUNCH_SLACK

    def view(self) -> checks.View:
        """The table, and both queues' messages."""
        view = checks.View.read(self.twins.table, self.twins.queue)
        high = checks.View.read(self.twins.table, self.high)
        view.queued += high.queued
        view.aged_out += high.aged_out
        return view

    def queues(self) -> dict[str, MemoryQueue]:
        """Both queues, by name (the twins number each one's messages from 1)."""
        return {"normal": self.twins.queue, "high": self.high}

    def urgent_hosts(self, view: checks.View, now: float) -> int:
        """Running tasks that can take an urgent job (of the default size and no tenant)
        now, as the tick's hand-off tells them (dispatcher/stages/handoff.py): a task runs one
        tenant's jobs, so only one of no tenant takes them."""
        policy = HandoffPolicy(30.0, int(self.settings["LONGJOBS_TASK_CONCURRENCY"]),
                               kind_limits=parse_limits(self.settings["LONGJOBS_KIND_LIMITS"]))
        return sum(1 for b in view.bundles()
                   if handoff.is_host(b, now, policy) and b.takes_handed
                   and len(b.handed_jobs) < handing.MAX_HANDED and b.resources == Resources()
                   and b.tenant is None)

    def urgent_left_waiting(self, view: checks.View, urgent: set[str], hosts: int,
                            handed: int, env: dict[str, str]) -> None:
        """After a tick that began with every slot busy and running tasks able to take them:
        the urgent jobs that were in the high queue, if the hosts can take them all in one
        tick (each its slots' worth), are handed to a running task, none left waiting for a
        slot behind the backlog, unless the tick handed that many. The hosts' room is
        shared: the hand-off serves first the urgent jobs already waiting in the table (the
        older ones: taken in by an earlier look when no task could take them yet, or high
        jobs of the backlog), and those the room leaves out go with the next tick's. So the
        room the tick ``handed`` is what excuses a job left, not the queue's count alone."""
        left = sorted(j for j in urgent if (job := view.job(j)) is not None
                      and job.state == JobState.PENDING
                      and (b := view.bundle(job.bundle_id or "")) is not None
                      and b.state == BundleState.PENDING)
        can = hosts * int(env["LONGJOBS_TASK_CONCURRENCY"])
        if left and len(urgent) <= can and handed < can:
            self.fail("urgent_waits", [
                f"urgent jobs {left} wait for a slot behind the backlog although {hosts} "
                f"running tasks could take {can} and the tick handed {handed}; settings {env}"])

    @rule(shape=st.sampled_from(["not_json", "unknown_field", "huge_unknown_field",
                                 "payload_too_large"]))
    def submit_malformed(self, shape: str) -> None:
        """A producer that does not use the client (another language, a bug)."""
        self.n += 1
        job_id = f"m{self.n:03d}"
        body: dict[str, Any] = {"schema_version": 1, "job_id": job_id, "kind": "plain",
                                "payload": {}}
        if shape == "not_json":
            text = f"not json {job_id}"
            self.bodies.append(text)
            self.twins.queue.send([("e0", text)])
            return
        if shape == "unknown_field":
            body["colour"] = "blue"
        elif shape == "huge_unknown_field":  # a 1 MiB message, as SQS allows
            body["z" * 500_000] = 1
        else:
            body["payload"] = {"data": "x" * 300_000}
        self.twins.queue.send([("e0", json.dumps(body))])
        self.submitted[job_id] = "malformed"

    # -- the dispatcher ----------------------------------------------------------------------------
    @rule(ticks=st.sampled_from([1, 1, 2, 12]))
    def tick(self, ticks: int) -> None:
        """The scheduled tick (a minute apart when several), its runners beating meanwhile."""
        for n in range(ticks):
            if n:
                self.advance(60.0)
            self.one_tick()

    @rule(urgent_at=st.sampled_from([None, 1, 3]))
    def slow_drain_tick(self, urgent_at: int | None) -> None:
        """A tick whose drain takes the world's time (each receive of the normal queue lets
        6 s go by, the runners silent meanwhile), an urgent job sent at its ``urgent_at``-th
        receive: past 15 s of drain, the tick looks at the high queue and hands what came to
        running tasks (dispatcher/stages/lookout.py)."""
        queue, clock = self.twins.queue, self.twins.clock
        receive = queue.receive
        receives = [0]

        def slow(*args: Any, **kwargs: Any) -> list[Received]:
            clock.advance(6.0)
            receives[0] += 1
            if receives[0] == urgent_at:
                self.urgent(1)
            return receive(*args, **kwargs)

        queue.receive = slow  # type: ignore[method-assign]
        try:
            self.one_tick()
        finally:
            del queue.receive  # the class's own again

    def one_tick(self) -> None:
        """One tick; each due bundle with room for it counts a tick of waiting (not a tick
        skipped because a dead tick's lease is still held)."""
        env = self.env()
        now = self.twins.clock()
        visible = checks.visible(self.twins.queue)
        view = checks.View.read(self.twins.table, self.twins.queue)
        due = checks.waiting_for_room(view, now, int(env["LONGJOBS_MAX_RUNNING_TASKS"]),
                                      int(env["LONGJOBS_TASK_CONCURRENCY"]),
                                      parse_limits(env["LONGJOBS_KIND_LIMITS"]))
        all_due = [b for b in view.bundles() if b.state == BundleState.PENDING
                   and b.next_attempt_at <= now]
        for b in due:
            self.waiting.setdefault((b.bundle_id, b.attempt), [0, len(all_due) - 1])
        urgent = {m.group(1) for body, _ in checks.View.read(self.twins.table, self.high).queued
                  if (m := checks._JOB_ID.search(body[:400]))}
        hosts = self.urgent_hosts(view, now)
        # The tick's pools in one order, as a faulty tick's: a bundle launches while its
        # messages are deleted, and which finished first must not depend on the scheduler,
        # or an example would not replay (hypothesis: FlakyStrategyDefinition).
        failed = self.table.failed
        before = self.table.get(codec.SWEEP_KEY)
        with one_thread():
            decision = self.guarded("tick_raises", "the tick",
                                    lambda: self.twins.stages(**env).tick.tick())
        self.sync()
        # Kept until the step's check (a step of several ticks: a later one does not undo it).
        self.recovered_launches = self.recovered_launches or bool(
            decision is not None and decision.launch.recovered)
        if decision is None or decision.skipped:
            return
        # A look at every held dependent by this tick (its claim of the sweep: one at the
        # same instant already, by a faulty tick before it, is not this tick's), no fault hit.
        swept = self.table.get(codec.SWEEP_KEY)
        if swept is not None and (swept.updated_at or 0) >= now and self.table.failed == failed \
                and (before is None or (before.updated_at or 0) < now):
            self.clean_sweep = now
        self.after_tick(visible)
        if self.table.failed == failed:
            self.promised(due, env, before_view=view)
        else:
            self.promises.forget()
            self.turns.forget()
        if decision.capacity == 0 and urgent and hosts:
            # Hosts all through the tick: one whose runner fell silent during a slow drain
            # (its heartbeat too old by the hand-off) is no host the tick could see.
            after = self.view()
            hosts = min(hosts, self.urgent_hosts(after, self.twins.clock()))
            self.urgent_left_waiting(after, urgent, hosts, decision.handoff.handed, env)
        after_view = self.view() if due else None
        for b in due:
            key = (b.bundle_id, b.attempt)
            after = self.twins.store.get_bundle(b.bundle_id)
            if after is None or after.state != BundleState.PENDING or after.attempt != b.attempt:
                self.waiting.pop(key, None)
                continue
            said = promises.waits(after_view, b, self.twins.clock()) if after_view else None
            if said is not None and said.reason in (waiting_rule.FAIR_SHARE,
                                                    waiting_rule.RATE_LIMIT):
                continue  # held, saying so, by its tenant's cap or share, or by its tokens
            self.waiting[key][0] += 1
            ticks, ahead = self.waiting[key]
            if ticks > ahead + STARVATION_TICKS:
                self.fail("starvation", [
                    f"bundle {b.bundle_id} ({b.priority}, kind {b.kind}, slots {b.slots}, "
                    f"{len(b.job_ids)} jobs) waited {ticks} ticks with room for it "
                    f"({ahead} due bundles were ahead of it); settings {env}"])

    def promised(self, due: list[Bundle], env: dict[str, str], before_view: checks.View) -> None:
        """After a tick that met no fault: a free slot left beside work it could run
        (work_conservation), and what waiting_for told of the next ticks (waiting_promise)."""
        now, view = self.twins.clock(), self.view()
        most = int(env["LONGJOBS_MAX_RUNNING_TASKS"])
        room = checks.waiting_for_room(view, now, most, int(env["LONGJOBS_TASK_CONCURRENCY"]),
                                       parse_limits(env["LONGJOBS_KIND_LIMITS"]))
        self.fail("work_conservation", promises.idle_beside_work(view, now, most, due, room))
        active_before = {(b.bundle_id, b.attempt) for b in before_view.bundles()
                         if b.state in ACTIVE_BUNDLE_STATES}
        started = [b for b in view.bundles() if b.state in ACTIVE_BUNDLE_STATES
                   and (b.bundle_id, b.attempt) not in active_before]
        launched = Counter(str(b.priority) for b in started)
        self.fail("waiting_promise", self.promises.after_tick(view, now, launched))
        self.fail("share_order", promises.share_order(view, now, started, due, before_view))
        self.fail("tenant_turns", self.turns.after_tick(before_view, view, now, most))
        self.fail("reserve_kept", promises.reserves_kept(before_view, view, now, most))
        self.fail("rate_limit", self.tokens.false_claims(view))

    @rule(concurrency=st.sampled_from(["1", "2", "4"]),
          limits=st.sampled_from(["", "report=1", "report=2,resize=1", "report=4", "resize=8"]),
          tasks=st.sampled_from(["1", "3", "6"]), one_at_a_time=st.sampled_from(["true", "false"]))
    def change_settings(self, concurrency: str, limits: str, tasks: str,
                        one_at_a_time: str = "true") -> None:
        """An operator redeploys with other settings: the next ticks and tasks use them. The
        model runs one tick at a time, as the stack does, so a tick may take a dead one's
        lease at once (LONGJOBS_TICK_ONE_AT_A_TIME) or wait out its term."""
        self.promises.forget()
        self.turns.forget()
        self.settings = {"LONGJOBS_TASK_CONCURRENCY": concurrency,
                         "LONGJOBS_KIND_LIMITS": limits, "LONGJOBS_MAX_RUNNING_TASKS": tasks,
                         "LONGJOBS_TICK_ONE_AT_A_TIME": one_at_a_time}

    @precondition(lambda self: bool(self.events or self.delivered))
    @rule(data=st.data(), again=st.booleans(), old=st.booleans())
    def stop_event(self, data: st.DataObject, again: bool, old: bool) -> None:
        """A stop event: any pending one (reordered), kept for a second delivery, or one
        delivered before (a duplicate, late)."""
        pool = self.delivered if (old and self.delivered) or not self.events else self.events
        i = data.draw(st.integers(0, 15)) % len(pool)
        stop = pool[i]
        if pool is self.events and not again:
            self.delivered.append(self.events.pop(i))
        self.guarded("stop_event_raises", f"the stop event of {stop.task_arn}",
                     lambda: self.twins.stages(**self.env()).reruns.on_stop(stop))
        self.sync()

    # -- time ----------------------------------------------------------------------------------
    @rule(seconds=st.sampled_from([1.0, 30.0, 130.0, 3600.0, DAY, 31 * DAY, 100 * DAY,
                                   181 * DAY]))
    def advance(self, seconds: float) -> None:
        """Time passes; each runner's heartbeat thread keeps beating meanwhile. ``stats``
        agrees with the table before and after, as its window moves past work (checked here
        rather than after every step: its ~60 queries a call are a quarter of the model's
        time)."""
        self.fail("stats", stats_disagree(self.twins.store, self.table, self.twins.clock))
        self.twins.clock.advance(seconds)
        for sim in sorted(self.tasks.values(), key=lambda t: t.key):
            sim.heartbeat()
        self.sync()
        self.fail("stats", stats_disagree(self.twins.store, self.table, self.twins.clock))

    @rule()
    def ttl(self) -> None:
        """DynamoDB's TTL deletes every item whose ``expires_at`` has passed."""
        jobs = {pk: rec.state for pk, rec in self.table.snapshot().items()
                if pk.startswith("JOB#")}
        expire(self.twins.table, self.twins.clock())
        self.ttl_ran = True
        told = len(self.job_events.events)
        for pk in set(jobs) - set(self.table.snapshot()):
            self.expired[codec.ident(pk)] = told
            self.expired_as[codec.ident(pk)] = str(jobs[pk])
            if codec.ident(pk) in self.cancelled:
                self.forgotten[codec.ident(pk)] = self.cancelled.pop(codec.ident(pk))

    # -- operators ------------------------------------------------------------------------------
    @precondition(lambda self: bool(self.submitted))
    @rule(data=st.data(), action=st.sampled_from(["cancel", "retry", "retry_from_scratch"]),
          any_job=st.booleans())
    def operator(self, data: st.DataObject, action: str, any_job: bool) -> None:
        """``jobs cancel`` or ``jobs retry``: of a job it applies to (any job at all when
        ``any_job``: the operator mistyped, or the job moved on)."""
        fits = (lambda s: s not in TERMINAL_JOB_STATES) if action == "cancel" else \
            (lambda s: s in (JobState.FAILED, JobState.CANCELLED))
        view = checks.View.read(self.twins.table, self.twins.queue)
        jobs = sorted(j for j in self.submitted if any_job or (
            (job := view.job(j)) is not None and fits(job.state)))
        if not jobs:
            return
        job_id = data.draw(st.sampled_from(jobs))
        client = self.twins.client()
        # An array's retry retries its FAILED and CANCELLED children (those an n_to_n
        # dependency cancelled too): those wait for nothing any more.
        retried = [c for c in self.depends if c.startswith(f"{job_id}:")
                   and (child := view.job(c)) is not None
                   and child.state in (JobState.FAILED, JobState.CANCELLED)]
        try:
            if action == "cancel":
                running = self.claimed(view, job_id)
                client.cancel(job_id)
                # Its word: nothing it names starts again. A job of a bundle a task has
                # claimed may start before the task's next heartbeat learns of the cancel
                # (the runner read it with its page): its run is cancelled then, and its
                # result refused (docs/operating.md, "Cancel and retry").
                self.cancelled[job_id] = self.twins.clock()
                self.forgotten.pop(job_id, None)
                self.claimed_at_cancel |= running
            else:
                client.retry(job_id, from_scratch=action == "retry_from_scratch")
                self.uncancel(job_id)
                self.runs[job_id] = 0  # a fresh budget
                self.depends.pop(job_id, None)  # a retry waits for no dependency
                for child in retried:
                    self.depends.pop(child, None)
        except LongjobsError:
            pass  # not found, already finished, not retryable: said to the operator
        self.sync()

    def claimed(self, view: checks.View, job_id: str) -> set[str]:
        """``job_id``, or its array's children, whose bundles a task has claimed."""
        ids = [j for j in self.submitted if j == job_id or j.startswith(f"{job_id}:")]
        ids += [b_job for b in view.bundles() for b_job in b.job_ids
                if b_job.startswith(f"{job_id}:")]
        out = set()
        for j in ids:
            job = view.job(j)
            bundle = view.bundle(job.bundle_id) if job is not None and job.bundle_id else None
            if bundle is not None and bundle.state == BundleState.RUNNING:
                out.add(j)
        return out

    def uncancel(self, job_id: str) -> None:
        """A retry of ``job_id`` (an array's retries its children): they may run again."""
        def of(j: str) -> bool:
            return j == job_id or j.startswith(f"{job_id}:") or job_id.startswith(f"{j}:")
        self.cancelled = {j: t for j, t in self.cancelled.items() if not of(j)}
        self.forgotten = {j: t for j, t in self.forgotten.items() if not of(j)}
        self.retried_fires.add(job_id)  # a skipped fire retried runs on purpose (overlaps)
        self.claimed_at_cancel = {j for j in self.claimed_at_cancel if not of(j)}

    # -- the runners -----------------------------------------------------------------------------
    @precondition(lambda self: self.any_task(lambda t: t.phase == "new" and t.alive))
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        sim = self.pick(data, lambda t: t.phase == "new" and t.alive)
        assert sim is not None
        sim.concurrency = int(self.settings["LONGJOBS_TASK_CONCURRENCY"])
        sim.claim()
        self.sync()

    @precondition(lambda self: self.any_task(SimTask.can_start))
    @rule(data=st.data())
    def start_job(self, data: st.DataObject) -> None:
        sim = self.pick(data, SimTask.can_start)
        assert sim is not None
        sim.start_next()
        self.sync()

    @precondition(lambda self: self.any_task(lambda t: t.alive and not t.silent
                                             and bool(t.active())))
    @rule(data=st.data(), behaviour=st.sampled_from(BEHAVIOURS))
    def finish_job(self, data: st.DataObject, behaviour: str) -> None:
        sim = self.pick(data, lambda t: t.alive and not t.silent and bool(t.active()))
        assert sim is not None
        job_id = data.draw(st.sampled_from(sorted(sim.active())))
        sim.finish(job_id, behaviour)
        self.sync()

    @precondition(lambda self: self.any_task(lambda t: t.alive and not t.silent
                                             and bool(t.active())))
    @rule(data=st.data(), slack=st.sampled_from([None, 64, 2_000, 20_000]))
    def checkpoint(self, data: st.DataObject, slack: int | None) -> None:
        """A checkpoint, small or sized to leave ``slack`` bytes under the item limit."""
        sim = self.pick(data, lambda t: t.alive and not t.silent and bool(t.active()))
        assert sim is not None
        job_id = data.draw(st.sampled_from(sorted(sim.active())))
        sim.checkpoint(job_id, self.checkpoint_state(job_id, slack))
        self.sync()

    def checkpoint_state(self, job_id: str, slack: int | None) -> dict[str, str]:
        return checks.checkpoint_near_limit(self.twins.table, job_id, slack)

    @precondition(lambda self: self.any_task(lambda t: t.phase == "running" and t.alive))
    @rule(data=st.data(), what=st.sampled_from(["heartbeat", "flush", "sigterm", "freeze"]))
    def runner_event(self, data: st.DataObject, what: str) -> None:
        sim = self.pick(data, lambda t: t.phase == "running" and t.alive)
        assert sim is not None
        if what == "heartbeat":
            sim.heartbeat()
        elif what == "flush":
            sim.flush()
        elif what == "sigterm":
            sim.sigterm()
        else:
            sim.silent = True
        self.sync()

    @precondition(lambda self: self.any_task(lambda t: t.alive and t.phase != "ended"))
    @rule(behaviour=st.sampled_from((*BEHAVIOURS, "by_nature", "by_nature")))
    def runners_pass(self, behaviour: str) -> None:
        """Every runner does what it can now, its handlers all ending as ``behaviour``, or
        each as its job's nature (the same on every run: a poison job kills every task)."""
        def of(job_id: str) -> str:
            return self.nature.get(job_id, "succeed") if behaviour == "by_nature" \
                else behaviour

        for sim in sorted(self.tasks.values(), key=lambda t: t.key):
            sim.pass_(of)
        self.sync()

    @precondition(lambda self: self.any_task(SimTask.can_end))
    @rule(data=st.data())
    def end_task(self, data: st.DataObject) -> None:
        sim = self.pick(data, SimTask.can_end)
        assert sim is not None
        sim.end()
        self.sync()

    @precondition(lambda self: self.any_task(lambda t: t.alive))
    @rule(data=st.data(), how=st.sampled_from([("EssentialContainerExited", 137),
                                               ("EssentialContainerExited", 1),
                                               ("SpotInterruption", None),
                                               ("TaskFailedToStart", None)]))
    def kill(self, data: st.DataObject, how: tuple[str, int | None]) -> None:
        """The process dies now, whatever it was doing (after any write): a job's OOM kill or
        crash, a Spot reclaim, a host lost."""
        sim = self.pick(data, lambda t: t.alive)
        assert sim is not None
        sim.stop(how[0], "killed", how[1])
        self.sync()

    @rule()
    def stream(self) -> None:
        """The dependents function reads the table's stream (whenever: the stream's lag):
        the jobs that waited for those that ended are released or cancelled."""
        with contextlib.suppress(TableUnavailable):  # it fails; Lambda delivers it again
            self.feed.deliver(Dependents(self.twins.store, self.twins.clock))

    def undecided(self, view: checks.View) -> list[str]:
        """Held dependents whose dependencies had all ended before the last look at every
        held dependent (by a tick no fault hit): none may still wait. A dependent recorded
        after that look (by a tick that died before it judged it) waits for the next one."""
        if self.clean_sweep is None:
            return []
        out = []
        for job_id in self.depends:
            job = view.job(job_id)
            if job is None or job.state != JobState.PENDING or not job.depends_on \
                    or job.created_at >= self.clean_sweep:
                continue
            ends = [(dep.updated_at if (dep := view.items.get(codec.job_key(d["job_id"])))
                     is not None and dep.state in TERMINAL_JOB_STATES else None)
                    for d in job.depends_on]
            if all(e is not None and e < self.clean_sweep for e in ends):
                out.append(f"{job_id} still waits for {job.depends_on}, all ended before the "
                           f"look at {self.clean_sweep}: {checks.describe(job)}")
        return out

    # -- invariants ------------------------------------------------------------------------------
    @invariant()
    def holds(self) -> None:
        self.sync()
        view = self.view()
        for job_id in self.submitted:
            job = view.job(job_id)
            if (job is not None and job.state in TERMINAL_JOB_STATES) or view.rejected(job_id):
                self.finished.add(job_id)
            elif job is not None:
                self.finished.discard(job_id)
        for wanted in self.depends.values():
            for d in wanted:
                if (job := view.job(d.job_id)) is not None and job.state in TERMINAL_JOB_STATES:
                    self.ended_as.setdefault(d.job_id, set()).add(str(job.state))
        found = checks.lost_jobs(view, self.submitted, self.finished)
        for check in sorted({c for c, _ in found}):
            self.fail(check, [says for c, says in found if c == check])
        lost = []
        self.finished |= {b for b in self.bodies if view.rejected_body(b)}
        lost += [f"malformed message {b!r} is neither REJECTED nor in the queue"
                 for b in self.bodies if b not in self.finished and b not in view.aged_out
                 and all(body != b for body, _ in view.queued)]
        self.fail("lost_job", lost)
        self.fail("dead_letter", checks.dead_letters(self.queues(), self.forced))
        self.fail("two_live_runs", checks.live_twice(view, self.tasks.values()))
        self.fail("tenants_apart", checks.mixed_tenants(view))
        self.fail("task_tags", checks.task_tags(view, {
            arn: task.request.tags for arn, task in self.twins.launcher.tasks.items()}))
        self.fail("kind_limit", self.kind_limits.check(
            view, self.tasks.values(), parse_limits(self.settings["LONGJOBS_KIND_LIMITS"])))
        self.fail("budget", [f"{j} ran {n} times, over its budget {self.budget[j]}: "
                             f"{checks.describe(view.job(j))}"
                             for j, n in self.runs.items() if n > self.budget[j]])
        self.fail("item_size", checks.oversized(view, self.item_sizes))
        self.fail("blamed_innocent", checks.blamed(view, self.submitted, self.tasks))
        self.fail("waiting_for", checks.unexplained_waits(view, self.twins.clock()))
        self.fail("job_events", checks.untold(view, self.job_events.events, self.expired))
        self.fail("path_told", mistold(view, self.job_events.events, self.expired))
        self.fail("arrays", array_problems(view, self.expired))
        self.fail("dependencies", self.early + self.undecided(view))
        self.fail("tenant_cap", self.tenant_caps.check(view, self.recovered_launches))
        self.fail("rate_bound", self.tokens.over_bound())
        self.fail("tokens_taken", self.tokens.untaken(view, self.recovered_launches))
        self.fail("task_limit", self.over_the_limit())
        self.fail("cancel_kept", self.broken_cancels)
        self.fail("schedule_overlap", self.overlaps(view))
        self.fail("task_bills", model_costs.unbalanced(view, jobs_expired=bool(self.expired)))
        self.fail("usage_counters", model_costs.miscounted(view, self.ttl_ran))
        self.fail("label_lists", model_costs.unlisted(
            view, self.twins.store, self.twins.clock(),
            float(self.env().get("LONGJOBS_RETENTION_DAYS", "30"))))

    def over_the_limit(self) -> list[str]:
        """The tasks running never pass ``LONGJOBS_MAX_RUNNING_TASKS``: no step that adds a
        task (a launch, a relaunch, a take) leaves more than the limit in force running.
        (A limit lowered below the tasks running holds once enough of them end; a crashed
        tick's launches that the next tick completes were decided under the limit of their
        tick: RunTask may have started them already, and repeating it with their clientToken
        is what keeps them from starting twice.)"""
        live = sorted(arn for arn, task in self.twins.launcher.tasks.items()
                      if not task.last_status.gone)
        most = int(self.settings["LONGJOBS_MAX_RUNNING_TASKS"])
        before, self.live_tasks = self.live_tasks, len(live)
        recovered, self.recovered_launches = self.recovered_launches, False
        if len(live) <= max(before, most) or recovered:
            return []
        return [f"{len(live)} tasks run after this step ({before} before it), over the "
                f"limit of {most}: " + ", ".join(
                    f"{arn.rsplit('/', 1)[-1]} on {self.tasks[arn].key[0]}" for arn in live
                    if arn in self.tasks)]


@pytest.mark.timeout(300 + 10 * EXAMPLES)  # a hang guard: 1-7 s an example on two busy cores
def test_the_whole_system_keeps_its_invariants(monkeypatch: pytest.MonkeyPatch) -> None:
    # Deterministic bundle ids and the fake clock in the runner's writes: each example replays
    # exactly, so hypothesis can shrink what it finds.
    monkeypatch.setattr(bundle_stage, "new_id", SystemModel.hooks_ids)
    monkeypatch.setattr(operator_store, "new_id", SystemModel.hooks_ids)
    monkeypatch.setattr(job_ops, "new_id", SystemModel.hooks_ids)
    monkeypatch.setattr(writes_module, "time", SystemModel.hooks_time)
    run = hyp_settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                       phases=[Phase.explicit, Phase.generate, Phase.shrink],
                       suppress_health_check=list(HealthCheck),
                       print_blob=True)(SystemModel).TestCase
    run().runTest()
