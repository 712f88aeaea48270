"""What the system model (tests/twins/test_system_model.py) checks, read from the twins'
state alone.

Each check returns the problems it finds as readable lines (empty: it holds), so the model can
say which invariant failed and with which job's data.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from dispatcher.domain import labels as labels_rule
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.job_events import JobStateChange
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.message import compact_json
from dispatcher.domain.waiting import TickSummary
from dispatcher.ops.job_waits import waiting_of
from dispatcher.ports.table import Record
from dispatcher.store import codec as r
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MAX_ITEM_BYTES, MemoryTable, _item_bytes
from tests.model_runner import SimTask

DAY = 86_400.0
LATEST = "latest"  # job_specs: a not_before at the schema's latest time
KINDS = ("plain", "report", "resize")

# A message's job id: the client and the model's own producers write it near the start.
_JOB_ID = re.compile(r'"job_id":\s*"([^"]+)"')
# SQS moves a message to the dead-letter queue at its 5th receive (infra/template.yaml).
MAX_RECEIVE_COUNT = 5
# Bundles that may still hold a job that is not finished: PENDING waits for a launch, RECORDING
# for the next tick's recovery to commit it, the active ones for their task.
LIVE_BUNDLE_STATES = (BundleState.RECORDING, BundleState.PENDING, *ACTIVE_BUNDLE_STATES)


@dataclass
class View:
    """One consistent reading of the table and the queue."""

    items: dict[str, Record]
    queued: list[tuple[str, int]]  # (body, receive count) of every message still in the queue
    # Bodies of the messages SQS deleted for their age (no tick took them in 14 days).
    aged_out: list[str] = field(default_factory=list)
    _queued_ids: set[str] | None = None
    _aged_ids: set[str] | None = None
    _rejected: set[str] | None = None
    # Decoded once a view: the checks after a step ask for the same jobs and bundles many
    # times (they only read what they are given).
    _jobs: dict[str, Job | None] = field(default_factory=dict)
    _bundles: dict[str, Bundle | None] = field(default_factory=dict)

    @classmethod
    def read(cls, table: MemoryTable, queue: MemoryQueue) -> View:
        """The twins' state as it is, without the copies their reads make (checked after
        every step, a copy of every 250 KB item would cost most of the model's time); the
        checks only read it. The queue twin has no peek; its messages are read as SQS's
        console would show them (without those past the retention period)."""
        with table._lock:
            items = dict(table._items)
        queue.expire()
        messages = list(queue._messages.values())
        return cls(items, [(body, n) for body, _, _, n in messages], list(queue.aged_out))

    def job(self, job_id: str) -> Job | None:
        if job_id not in self._jobs:
            rec = self.items.get(r.job_key(job_id))
            self._jobs[job_id] = r.record_job(rec) if rec else None
        return self._jobs[job_id]

    def bundle(self, bundle_id: str) -> Bundle | None:
        if bundle_id not in self._bundles:
            self._bundles[bundle_id] = self._decoded_bundle(bundle_id)
        return self._bundles[bundle_id]

    def _decoded_bundle(self, bundle_id: str) -> Bundle | None:
        rec = self.items.get(r.bundle_key(bundle_id))
        if rec is None:
            return None
        b = r.record_bundle(rec)
        if b.pages and not b.job_ids:
            keys = [r.page_key(bundle_id, n) for n in range(b.pages)]
            b.job_ids = [j for k in keys if k in self.items for j in self.items[k].job_ids or ()]
        # Urgent jobs handed to it while it ran are its jobs too (Reads.job_ids_of).
        b.job_ids = list(dict.fromkeys([*b.job_ids, *b.handed_jobs]))
        return b

    def bundles(self) -> list[Bundle]:
        out = []
        for pk in self.items:
            if pk.startswith("BUNDLE#"):
                b = self.bundle(r.ident(pk))
                assert b is not None
                out.append(b)
        return out

    def rejected(self, key: str) -> bool:
        """Whether ``REJECT#{key}`` or ``REJECT#{key}#...`` is recorded."""
        if self._rejected is None:  # read once: the model asks this of every job after a step
            self._rejected = set()
            for pk in self.items:
                if pk.startswith("REJECT#"):
                    rest = pk[len("REJECT#"):]
                    self._rejected.add(rest)
                    self._rejected.update(rest[:i] for i, c in enumerate(rest) if c == "#")
        return key in self._rejected

    def rejected_body(self, body: str) -> bool:
        return any(pk.startswith("REJECT#") and rec.body == body for pk, rec in self.items.items())

    def queued_job(self, job_id: str) -> bool:
        if self._queued_ids is None:  # read once: bodies may be 1 MiB each
            self._queued_ids = {m.group(1) for body, _ in self.queued
                                if (m := _JOB_ID.search(body[:400]))}
        return job_id in self._queued_ids

    def aged_out_job(self, job_id: str) -> bool:
        """Whether SQS deleted a message of ``job_id`` for its age: the model lets weeks
        pass with no tick, as an outage of the dispatcher would."""
        if self._aged_ids is None:
            self._aged_ids = {m.group(1) for body in self.aged_out
                              if (m := _JOB_ID.search(body[:400]))}
        return job_id in self._aged_ids


def describe(job: Job | None) -> str:
    if job is None:
        return "no record"
    return (f"{job.job_id} {job.state} bundle={job.bundle_id} attempts={job.attempts}/"
            f"{job.max_attempts} infra={job.infra_attempts} reason={job.reason!r} "
            f"not_before={job.not_before} history={len(job.history)} entries")


# What live_path says when TTL deleted an item the job's path needs.
EXPIRED = {"pointer_expired": "no pointer to the bundle", "pages_expired": "pages are gone"}


def live_path(view: View, job: Job) -> str | None:
    """Why a job that is not finished has no way to run, or None if it has one: a PENDING job
    in a bundle that lists it and will launch or runs; a RUNNING one in an active bundle; and
    an active bundle's task can still be found from its ARN (its stop event and the
    reconciliation find the bundle through the task's pointer)."""
    if job.array_size is not None:  # an array's parent: its children run (model_arrays)
        return None if r.array_key(job.job_id) in view.items else "its array marker is gone"
    bundle = view.bundle(job.bundle_id) if job.bundle_id else None
    if bundle is None:
        return "its bundle is gone"
    if job.job_id not in bundle.job_ids:
        if bundle.pages and any(r.page_key(bundle.bundle_id, n) not in view.items
                                for n in range(bundle.pages)):
            return f"its bundle {bundle.bundle_id}'s pages are gone ({bundle.state})"
        return f"its bundle {bundle.bundle_id} ({bundle.state}) does not list it"
    states = ACTIVE_BUNDLE_STATES if job.state == JobState.RUNNING else LIVE_BUNDLE_STATES
    if bundle.state not in states:
        return f"its bundle {bundle.bundle_id} is {bundle.state}"
    # A LAUNCHING bundle still names its previous task (its launch assigns the next one and
    # that task's pointer): only a bundle on its task needs the pointer.
    if bundle.state in (BundleState.LAUNCHED, BundleState.RUNNING) and bundle.task_arn \
            and r.task_key(bundle.task_arn) not in view.items:
        return f"its bundle's task {bundle.task_arn} has no pointer to the bundle any more"
    return None


def lost_jobs(view: View, submitted: Mapping[str, str],
              finished: set[str]) -> list[tuple[str, str]]:
    """Each submitted job (id -> "valid" or "malformed") is recorded (and then finished, or on
    a live path), REJECTED, still in the queue, or was seen finished and has expired since,
    or its message outlived SQS's retention period before any tick took it.
    Each problem comes with the check it fails: ``pointer_expired`` and ``pages_expired`` when
    TTL deleted what the job's path needs, ``lost_job`` otherwise."""
    problems = []
    for job_id, how in submitted.items():
        job = view.job(job_id)
        if job is None:
            if view.rejected(job_id) or view.queued_job(job_id) or job_id in finished \
                    or view.aged_out_job(job_id):
                continue
            problems.append(("lost_job", f"{job_id} ({how}) was submitted and is nowhere: no "
                             "job, no REJECTED record, not in the queue"))
        elif job.state not in TERMINAL_JOB_STATES:
            why = live_path(view, job)
            if why is not None:
                check = next((c for c, says in EXPIRED.items() if says in why), "lost_job")
                problems.append((check, f"{describe(job)}: no live path to running: {why}"))
    return problems


# The labels producers put on the model's jobs (dispatcher.domain.labels).
LABELS = ({"team": "a"}, {"team": "b", "tier": "gold"})
# The tenants producers name (dispatcher.domain.tenants); None: no tenant.
TENANTS = ("t1", "t2")


def job_specs() -> st.SearchStrategy[dict[str, Any]]:
    """The shapes of what producers submit (``not_before`` counts from now; ``LATEST``: the
    latest time the schema takes, absolute)."""
    return st.fixed_dictionaries({
        "kind": st.sampled_from(KINDS),
        "priority": st.sampled_from(["high", "normal", "low"]),
        "estimated_seconds": st.sampled_from([None, 0.5, 30.0, 3600.0, 1e7]),
        "not_before": st.sampled_from([None, -10.0, 60.0, 180 * DAY, LATEST]),
        "payload_bytes": st.sampled_from([0, 1_000, 250_000]),
        "max_attempts": st.integers(1, 3),
        "timeout_seconds": st.sampled_from([None, 30.0, 3600.0]),
        "labels": st.sampled_from([None, *LABELS]),
        "tenant": st.sampled_from([None, *TENANTS]),
        "uses": st.sampled_from([None, None, None, {"api": 1}, {"api:{tenant}": 2}]),
    })


def mixed_tenants(view: View) -> list[str]:
    """Bundles holding a job of another tenant than their id names (handed jobs too), and
    tasks that ran the jobs of more than one tenant (as their runs' history says): a task's
    bill must be one tenant's (dispatcher.domain.tenants). A bundle holds the jobs it lists
    whose records name it (:func:`own_job`)."""
    out: list[str] = []
    by_task: dict[str, set[str | None]] = {}
    jobs: dict[str, Job] = {}
    for pk, rec in view.items.items():
        if pk.startswith("JOB#") and rec.array_size is None:
            job = r.record_job(rec)
            jobs[job.job_id] = job
            for entry in job.history:
                if isinstance(entry.get("task_arn"), str) and "started_at" in entry:
                    by_task.setdefault(entry["task_arn"], set()).add(job.tenant)
    for b in view.bundles():
        strangers = [j for j in b.job_ids
                     if own_job(b, jobs.get(j)) and jobs[j].tenant != b.tenant]
        if strangers:
            out.append(f"bundle {b.bundle_id} (tenant {b.tenant}) holds {strangers}, of "
                       f"{sorted({str(jobs[j].tenant) for j in strangers})}")
    out += [f"task {arn} ran the jobs of tenants {sorted(map(str, owners))}"
            for arn, owners in sorted(by_task.items()) if len(owners) > 1]
    return out


def own_job(bundle: Bundle, job: Job | None) -> bool:
    """Whether ``job``, read under an id ``bundle`` lists, is the bundle's: its record names
    the bundle (a handed job's names its host), as every reader of a bundle's jobs asks
    (``stop_policy.decide``, ``Worker``'s plan, a cancel's bundle-mates). A bundle lists its
    ids for life, but an ended job's record expires after the retention period while the
    bundle may still run its other jobs, and a message sent under that id then makes a new
    job, of any tenant or labels, recorded in another bundle (docs/producing.md)."""
    return job is not None and job.bundle_id == bundle.bundle_id


def task_tags(view: View, requests: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Tasks whose tags do not say what the bundle each was launched for holds: its tenant
    (``longjobs:tenant``) and the labels every one of its own jobs has
    (``longjobs:label:<key>``, those ECS takes). ``requests``: each task's tags, by ARN. A
    task that took a bundle without a launch (a follow-on) is tagged for the one it was
    launched for; a bundle listing a job that is no longer its own (:func:`own_job`: TTL
    deleted it, perhaps for a new job under its id, or a retry moved it to a bundle of its
    own) is not judged: its tags said what its jobs were when it launched."""
    out = []
    for b in view.bundles():
        tags = requests.get(b.task_arn or "")
        if tags is None or tags.get("longjobs:launch") != b.launch_id:
            continue
        own = [view.job(j) for j in b.job_ids if j not in b.handed_jobs]
        if not all(own_job(b, job) for job in own):
            continue
        want = labels_rule.tags(labels_rule.shared(job.labels for job in own if job))
        got = {k: v for k, v in tags.items() if k.startswith(labels_rule.TAG_PREFIX)}
        if got != want or tags.get("longjobs:tenant") != b.tenant:
            out.append(f"task {b.task_arn} of bundle {b.bundle_id} (tenant {b.tenant}, jobs "
                       f"sharing {want}) is tagged {dict(tags)}")
    return out


def live_twice(view: View, tasks: Iterable[SimTask]) -> list[str]:
    """Jobs with a live run (a handler running, abandoned or not) in more than one task."""
    live: dict[str, list[str]] = {}
    for sim in tasks:
        for job_id in sim.live_runs():
            live.setdefault(job_id, []).append(sim.arn)
    return [f"{j} runs in {len(arns)} tasks at once: {arns}; {describe(view.job(j))}"
            for j, arns in sorted(live.items()) if len(arns) > 1]


def blamed(view: View, submitted: Iterable[str], tasks: Mapping[str, SimTask]) -> list[str]:
    """Jobs failed "out of attempts" for a task's stop while their handler was not running
    in it (a kill is charged to the job whose code ended the process)."""
    out = []
    for job_id in submitted:
        job = view.job(job_id)
        if job is None or job.state != JobState.FAILED or not job.history \
                or not (job.reason or "").startswith("out of attempts"):
            continue
        arn = job.history[-1].get("task_arn")
        if arn in tasks and job_id not in tasks[arn].live_at_stop:
            out.append(f"{describe(job)}: charged for the stop of {arn}, where its handler "
                       "was not running")
    return out


def receive_counts(queues: Mapping[str, MemoryQueue]) -> dict[tuple[str, str], int]:
    """Each message's receive count, by (its queue's name, its id): the twins' ids are
    counted per queue."""
    return {(name, mid): n for name, q in queues.items()
            for mid, (_, _, _, n) in q._messages.items()}


def dead_letters(queues: Mapping[str, MemoryQueue],
                 forced: Mapping[tuple[str, str], int]) -> list[str]:
    """Messages SQS would move to the dead-letter queue although the dispatcher spent some of
    their receives itself. ``forced``: the receives a fault spent (the table refused the
    message's recording in more tries than the store makes, or the tick died before deleting
    it), by (queue name, message id). No design can save those: a message is deleted only
    once it is recorded, and each receive counts; a table that refuses it tick after tick is
    a failure that persists, which the dead-letter queue exists to bound (docs/design.md),
    for an array's message as for a plain job's. So a message is dead-lettered within the
    design only when every one of its receives was forced."""
    out = []
    for (name, mid), n in sorted(receive_counts(queues).items()):
        spent = forced.get((name, mid), 0)
        if n >= MAX_RECEIVE_COUNT and n > spent:
            body = queues[name]._messages[mid][0]
            out.append(f"a message was received {n} times ({spent} of them spent by a fault) "
                       f"and would be dead-lettered: {body[:120]!r}")
    return out


def oversized(view: View, sizes: dict[int, tuple[Record, int]] | None = None) -> list[str]:
    """Items over DynamoDB's limit. ``sizes`` (the caller's, kept between steps) remembers each
    stored record's size by identity: the table twin never changes a stored record in place
    (a write stores a new one), so a record seen before has the size it had; the entry holds
    the record, so its id is not reused while remembered."""
    out, known = [], dict(sizes or {})
    if sizes is not None:
        sizes.clear()
    for pk, rec in view.items.items():
        hit = known.get(id(rec))
        size = hit[1] if hit is not None and hit[0] is rec else _item_bytes(rec)
        if sizes is not None:
            sizes[id(rec)] = (rec, size)
        if size > MAX_ITEM_BYTES:
            out.append(f"{pk} is {size} bytes > {MAX_ITEM_BYTES}")
    return out


def item_bytes(rec: Record) -> int:
    return _item_bytes(rec)


def checkpoint_near_limit(table: MemoryTable, job_id: str, slack: int | None) -> dict[str, str]:
    """A checkpoint that leaves ``slack`` bytes under the item limit (None: a small one), as
    a handler's growing list of processed ids would just before it crosses."""
    size = 100
    rec = table.get(r.job_key(job_id))
    if slack is not None and rec is not None:
        own = len("checkpoint") + len(compact_json(rec.checkpoint)) if rec.checkpoint else 0
        size = max(0, MAX_ITEM_BYTES - slack - (_item_bytes(rec) - own) - 25)
    return {"done": "y" * size}


def waiting_for_room(view: View, now: float, max_tasks: int, concurrency: int,
                     limits: Mapping[str, int]) -> list[Bundle]:
    """Due PENDING bundles that the capacity free now could start: a task slot is free, and
    each limited kind they hold has room for as many of their jobs as one task runs at once
    (``LONGJOBS_TASK_CONCURRENCY``, the kind's limit and the jobs left bound that). A kind's
    use is what can run now: in each active bundle, its unfinished jobs of that kind, at most
    ``concurrency`` of them."""
    bundles = view.bundles()
    active = [b for b in bundles if b.state in ACTIVE_BUNDLE_STATES]
    if len(active) >= max_tasks:
        return []

    def left(b: Bundle) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for job_id in b.job_ids:
            job = view.job(job_id)
            if job is not None and job.bundle_id == b.bundle_id \
                    and job.state not in TERMINAL_JOB_STATES:
                kinds[job.kind] = kinds.get(job.kind, 0) + 1
        return kinds

    used: dict[str, int] = {}
    for b in active:
        for kind, n in left(b).items():
            used[kind] = used.get(kind, 0) + min(n, concurrency)
    out = []
    for b in bundles:
        if b.state != BundleState.PENDING or b.next_attempt_at > now:
            continue
        kinds = left(b)
        if kinds and all(limits[k] - used.get(k, 0) >= min(n, concurrency, limits[k])
                         for k, n in kinds.items() if k in limits):
            out.append(b)
    return out


def visible(queue: MemoryQueue) -> set[str]:
    """The ids of the messages a receive could return now."""
    t = queue._clock()
    return {mid for mid, (_, _, visible_at, _) in queue._messages.items() if visible_at <= t}


def held(view: View, queue: MemoryQueue, mids: set[str]) -> list[tuple[str, str]]:
    """Messages among ``mids`` that a tick received and left in flight (hidden until its hold
    ends) instead of deleting them or giving them back, each with its check:
    ``held_duplicate`` when its job is recorded (a copy of it: it costs a receive and comes
    back as a duplicate), ``given_back`` otherwise."""
    t = queue._clock()
    out = []
    for mid, (body, _, visible_at, _) in sorted(queue._messages.items()):
        if mid in mids and visible_at > t:
            m = _JOB_ID.search(body[:400])
            check = "held_duplicate" if m and view.job(m.group(1)) else "given_back"
            out.append((check, f"message {mid} was received and is held until its hold "
                               f"ends: {body[:80]!r}"))
    return out


def unconverged(view: View) -> list[str]:
    """After a tick that ran to its end: what a crashed tick left was taken over (no bundle
    still RECORDING or LAUNCHING)."""
    return [f"bundle {b.bundle_id} is still {b.state} after a whole tick" for b in view.bundles()
            if b.state in (BundleState.RECORDING, BundleState.LAUNCHING)]


def unexplained_waits(view: View, now: float) -> list[str]:
    """Every PENDING job says what it waits for (``jobs show``'s rule, on the job's record,
    its bundle's and the tick's summary), and what it says matches its bundle."""
    tick = view.items.get(r.TICK_KEY)
    summary = TickSummary.from_json(tick.summary) if tick is not None else None
    out = []
    for pk, rec in view.items.items():
        if not pk.startswith("JOB#") or rec.state != JobState.PENDING:
            continue
        bundle = view.items.get(r.bundle_key(rec.bundle_id or ""))
        w = waiting_of(rec, bundle, summary, now)
        state = bundle.state if bundle is not None else None
        expected = {"LAUNCHING": "launching", "LAUNCHED": "starting", "RUNNING": "starting"}
        if w is None:
            out.append(f"{rec.job_id} is PENDING and says nothing about what it waits for")
        elif state in expected and w.reason != expected[state]:
            out.append(f"{rec.job_id} waits for {w.reason} in a {state} bundle")
        elif w.until is not None and w.until <= now:
            out.append(f"{rec.job_id} waits for {w.reason} until {w.until}, past at {now}")
    return out


def untold(view: View, events: list[JobStateChange],
           expired: Mapping[str, int] | None = None) -> list[str]:
    """Each job's state-change events, as the twin's change feed published them: numbered 1,
    2, 3... in the order told, none missing, the last one telling the job's stored state and
    sequence; no job in the table without any. ``expired`` maps a job whose record TTL deleted
    to how many events had been told when it went: a message of that job still in the queue
    (SQS keeps one up to 14 days; the table, LONGJOBS_RETENTION_DAYS) is admitted as a new job,
    whose numbering starts again at 1."""
    told: dict[str, list[JobStateChange]] = {}
    for i, e in enumerate(events):
        if i >= (expired or {}).get(e.job_id, 0):
            told.setdefault(e.job_id, []).append(e)
    out = []
    for job_id, mine in told.items():
        numbers = [e.sequence for e in mine]
        if numbers != list(range(1, len(mine) + 1)):
            out.append(f"{job_id}: its events are numbered {numbers}")
        rec = view.items.get(r.job_key(job_id))
        if rec is not None and (rec.state, int(rec.sequence or 0)) != (mine[-1].state,
                                                                       mine[-1].sequence):
            out.append(f"{job_id} is {rec.state} (sequence {rec.sequence}); its last event "
                       f"says {mine[-1].state} (sequence {mine[-1].sequence})")
    out += [f"{r.ident(pk)} is in the table ({rec.state}) and no event told of it"
            for pk, rec in view.items.items() if pk.startswith("JOB#")
            and r.ident(pk) not in told]
    return out
