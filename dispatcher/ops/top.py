"""``longjobs top``'s figures: one :class:`Snapshot` of the queues and the job table.

The same figures as the stack's dashboard, read live from any endpoint (AWS, moto, the twins)
instead of from CloudWatch: the backlog of each priority's queue, bundles by state and running
tasks by revision, the jobs admitted in the last minutes, recent launch failures by reason,
per-kind running slots against ``LONGJOBS_KIND_LIMITS`` and the dispatch lag. The CLI
(:mod:`dispatcher.cli.top_commands`) only renders a snapshot, so this module is tested without a
terminal.

Cost per snapshot, whatever the table holds: one GetQueueAttributes per queue (and the DLQ), the
active bundles (one index query per active state, as ``stats`` reads them), COUNT queries of the
status index bounded by the window (jobs) or by the work waiting (PENDING and RECORDING
bundles), the PENDING bundles that RunTask refused (as ``stats``), at most
:data:`PENDING_SAMPLE` PENDING bundles for the dispatch lag and what they wait for, and the
tick's summary (one item). No query reads finished work beyond
the window.

What the index can answer, and what it cannot: a job's index time (``status_at``) is its
creation, and stays so through its life. "Admitted in the window" is therefore exact, and the
window's jobs are counted by the state they are in now (succeeded, failed, ...); a job admitted
before the window that finished within it is not counted. The rates of finished jobs over time
are on the dashboard (``JobsSucceeded``, ``JobsFailed``, ``Reruns``, from the task-event handler).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from dispatcher.domain import tenants
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle, BundleState
from dispatcher.domain.jobs import PRIORITY_ORDER, JobState, Priority
from dispatcher.domain.progress import Progress
from dispatcher.domain.waiting import LAUNCHING, STARTING, TickSummary, waiting_for
from dispatcher.ops.job_waits import bundle_facts
from dispatcher.ops.queries import Queries
from dispatcher.ops.stack_figures import JOB_STATES
from dispatcher.ports.queue import Backlog, Queue
from dispatcher.ports.table import Record
from dispatcher.settings import Config
from dispatcher.store import codec as r

DEFAULT_WINDOW_SECONDS = 300.0
# Running jobs' progress shown, and the RUNNING bundles read for it at most.
PROGRESS_ROWS = 10
PROGRESS_BUNDLES = 100
# PENDING bundles read (oldest index time first) to find the longest-waiting launchable one.
PENDING_SAMPLE = 500
# Bundle states shown, in lifecycle order (DONE is history, not load: never counted).
BUNDLE_STATES = (BundleState.RECORDING, BundleState.PENDING, *ACTIVE_BUNDLE_STATES)


@dataclass(frozen=True)
class QueueRow:
    """One priority's queue; ``backlog`` is None for a level without a queue of its own (its
    jobs go to the normal queue, counted there)."""

    priority: str
    backlog: Backlog | None


@dataclass(frozen=True)
class KindRow:
    """Task slots a limited kind's active bundles hold (what LONGJOBS_KIND_LIMITS counts),
    against its limit (None: the kind has no limit here)."""

    kind: str
    running: int
    limit: int | None

    @property
    def at_limit(self) -> bool:
        return self.limit is not None and self.running >= self.limit


@dataclass(frozen=True)
class Snapshot:
    at: float
    window_seconds: float
    queues: list[QueueRow]
    dead_letters: int | None  # visible in the DLQ; None: no LONGJOBS_DLQ_URL
    bundles: dict[str, int]  # by state (RECORDING, PENDING, LAUNCHING, LAUNCHED, RUNNING)
    tasks_by_revision: dict[str, dict[str, int]]  # revision -> active state -> bundles
    admitted: dict[str, int]  # jobs admitted within the window, by the state they are in now
    rejected: int  # messages REJECTED within the window
    launch_failures: dict[str, int]  # PENDING bundles refused within the window, by reason
    kinds: list[KindRow]
    dispatch_lag_seconds: float | None  # longest wait of a launchable PENDING bundle
    waiting_bundles: int  # launchable PENDING bundles (not scheduled for later)
    # Bundles not running yet by what they wait for (dispatcher.domain.waiting): the PENDING
    # ones read for the dispatch lag, and the LAUNCHING and LAUNCHED ones.
    waiting_for: dict[str, int] = field(default_factory=dict)
    # The running jobs that report progress, the latest reports first (at most PROGRESS_ROWS):
    # read from the RUNNING bundles' items, where their heartbeats carry them.
    progress: list[tuple[str, Progress]] = field(default_factory=list)
    # Active bundles (one task each) by tenant, as their ids name it (no read more); empty
    # when none has one.
    tasks_by_tenant: dict[str, int] = field(default_factory=dict)

    @property
    def running_tasks(self) -> int:
        """Tasks launched and not finished: one per active bundle."""
        return sum(sum(states.values()) for states in self.tasks_by_revision.values())

    @property
    def admitted_total(self) -> int:
        return sum(self.admitted.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "at": r.iso(self.at),
            "window_seconds": self.window_seconds,
            "queues": {q.priority: None if q.backlog is None else asdict(q.backlog)
                       for q in self.queues},
            "dead_letters": self.dead_letters,
            "bundles": dict(self.bundles),
            "running_tasks": self.running_tasks,
            "tasks_by_revision": {k: dict(v) for k, v in self.tasks_by_revision.items()},
            "admitted": {"jobs": self.admitted_total, "by_state": dict(self.admitted),
                         "rejected": self.rejected},
            "launch_failures": {"bundles": sum(self.launch_failures.values()),
                                "by_reason": dict(self.launch_failures)},
            "kinds": [{"kind": k.kind, "running": k.running, "limit": k.limit}
                      for k in self.kinds],
            "dispatch_lag_seconds": self.dispatch_lag_seconds,
            "waiting_bundles": self.waiting_bundles,
            "waiting_for": dict(self.waiting_for),
            "progress": [{"job_id": job_id, "done": p.done, "total": p.total,
                          "percent": p.percent, "message": p.message,
                          "eta": None if (eta := p.eta()) is None else r.iso(eta)}
                         for job_id, p in self.progress],
            "tasks_by_tenant": dict(self.tasks_by_tenant),
        }


@dataclass
class Top(Queries):
    """The operators' read API (:class:`Queries`) with every priority's queue, the kind
    limits and a window: :meth:`snapshot` gathers one frame of ``longjobs top``.

    ``queue`` (the Queries') is priority normal's; ``queues`` may name the others (a level
    it leaves out, or maps to the normal queue, has no queue of its own)."""

    queues: Mapping[Priority, Queue] = field(default_factory=dict)
    kind_limits: Mapping[str, int] = field(default_factory=dict)
    window_seconds: float = DEFAULT_WINDOW_SECONDS

    def snapshot(self) -> Snapshot:
        t = self.clock()
        cutoff = max(0.0, t - self.window_seconds)  # a window longer than the epoch: all
        active = self.store.active_bundles()
        admitted, rejected = self._admitted(cutoff)
        pending = self.store.table.query(r.bundle_status(BundleState.PENDING),
                                         limit=PENDING_SAMPLE)
        lag, waiting = self._dispatch_lag(t, pending)
        summary = self.store.tick_summary()
        return Snapshot(
            at=t, window_seconds=self.window_seconds, queues=self._queues(),
            dead_letters=self.dead_letters.backlog().visible if self.dead_letters else None,
            bundles=self._bundles(active), tasks_by_revision=_by_revision(active),
            admitted=admitted, rejected=rejected,
            launch_failures=self._launch_failures(cutoff),  # the Queries', as `stats`
            kinds=self._kinds(active, summary), dispatch_lag_seconds=lag,
            waiting_bundles=waiting, waiting_for=self._waiting_for(t, pending, active, summary),
            progress=self._progress(active), tasks_by_tenant=_by_tenant(active))

    def _progress(self, active: list[Bundle]) -> list[tuple[str, Progress]]:
        """The latest reports of the running jobs: the items of the first PROGRESS_BUNDLES
        RUNNING bundles (one BatchGetItem: the index projects no report)."""
        running = [b.bundle_id for b in active if b.state == BundleState.RUNNING]
        reports = [(job_id, p) for rec in self.store.bundle_records(running[:PROGRESS_BUNDLES])
                   if isinstance(rec.progress, dict) for job_id, data in rec.progress.items()
                   if (p := Progress.from_json(data)) is not None]
        return sorted(reports, key=lambda jp: jp[1].at, reverse=True)[:PROGRESS_ROWS]

    # -- the figures ----------------------------------------------------------------------------
    def _queues(self) -> list[QueueRow]:
        normal = self.queue or self.queues.get(Priority.NORMAL)
        rows = []
        for p in PRIORITY_ORDER:
            q = normal if p == Priority.NORMAL else self.queues.get(p)
            own = q is not None and (p == Priority.NORMAL or q is not normal)
            rows.append(QueueRow(str(p), q.backlog() if own and q is not None else None))
        return rows

    def _bundles(self, active: list[Bundle]) -> dict[str, int]:
        """Bundles by state: the active ones as read, the waiting ones counted by the index."""
        by_state = Counter(str(b.state) for b in active)
        for state in (BundleState.RECORDING, BundleState.PENDING):
            by_state[str(state)] = self.store.table.count(r.bundle_status(state))
        return {str(s): by_state.get(str(s), 0) for s in BUNDLE_STATES}

    def _admitted(self, cutoff: float) -> tuple[dict[str, int], int]:
        """Jobs created since ``cutoff``, by their state now (COUNT queries of the status index
        from ``cutoff``: bounded by the window), and REJECTED records of the window."""
        counts = {str(s): self.store.count_jobs(s, since=cutoff) for s in JOB_STATES}
        rejected = counts.pop(str(JobState.REJECTED))
        return counts, rejected

    def _dispatch_lag(self, t: float, rows: list[Record]) -> tuple[float | None, int]:
        """How long the longest-waiting launchable PENDING bundle has waited (since it became
        PENDING: admitted, rerun or refused by RunTask), and how many there are. Bundles
        scheduled for later (``not_before``) are not waiting; those backing off after a launch
        failure are (they would run if RunTask took them)."""
        waiting = [b for b in map(r.record_bundle, rows)
                   if b.next_attempt_at <= t or b.launch_failures > 0]
        if not waiting:
            return None, 0
        # A scheduled bundle waits from its not_before, not from when it was recorded.
        since = min(b.updated_at or b.created_at if b.launch_failures
                    else max(b.updated_at or b.created_at, b.next_attempt_at)
                    for b in waiting)
        return max(0.0, t - since), len(waiting)

    def _waiting_for(self, t: float, pending: list[Record], active: list[Bundle],
                     summary: TickSummary | None) -> dict[str, int]:
        """Bundles by what they wait for: the rule a job's ``waiting_for`` follows, on the
        bundle (its runs: its launches less the refused ones) and the last tick's summary."""
        reasons: Counter[str] = Counter()
        for rec in pending:
            runs = max(0, int(rec.attempt or 0) - int(rec.launch_failures or 0))
            w = waiting_for("PENDING", not_before=None, runs=runs, reason=None,
                            bundle=bundle_facts(rec), summary=summary, now=t)
            if w is not None:
                reasons[w.reason] += 1
        for b in active:
            if b.state == BundleState.LAUNCHING:
                reasons[LAUNCHING] += 1
            elif b.state == BundleState.LAUNCHED:
                reasons[STARTING] += 1
        return dict(sorted(reasons.items()))

    def _kinds(self, active: list[Bundle], summary: TickSummary | None) -> list[KindRow]:
        """Each limited kind's running jobs against its limit: the limits the last tick
        decided by (its summary), not this shell's settings, which may name none (a client
        of local mode, or of a stack, seldom has the dispatcher's LONGJOBS_KIND_LIMITS); the
        shell's only before any tick."""
        limits = {k: limit for k, (_, limit) in summary.kinds.items()} \
            if summary is not None else dict(self.kind_limits)
        held: Counter[str] = Counter()
        for b in active:
            # As the tick counts it (a running bundle's runner lowers its slots as its jobs end).
            if b.kind is not None and b.kind in limits:
                held[b.kind] += b.slots
        return [KindRow(k, held.get(k, 0), limits[k]) for k in sorted(limits)]


def _by_revision(active: list[Bundle]) -> dict[str, dict[str, int]]:
    """Active bundles (one task each) by revision and state, as ``stats`` shows them."""
    out: dict[str, dict[str, int]] = {}
    for bundle in active:
        states = out.setdefault(bundle.task_definition or "unknown", {})
        states[str(bundle.state)] = states.get(str(bundle.state), 0) + 1
    return dict(sorted(out.items()))


def _by_tenant(active: list[Bundle]) -> dict[str, int]:
    """Active bundles by tenant (tenants.NONE: of none), most first; empty if none has one."""
    counts = Counter(b.tenant or tenants.NONE for b in active)
    return dict(counts.most_common()) if set(counts) - {tenants.NONE} else {}


def from_config(cfg: Config, *, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> Top:
    """:class:`Top` on the endpoint the settings name: the job table, each priority's queue
    (LONGJOBS_QUEUE_URL, LONGJOBS_HIGH_QUEUE_URL, LONGJOBS_LOW_QUEUE_URL), the DLQ if
    LONGJOBS_DLQ_URL is set, and LONGJOBS_KIND_LIMITS."""
    from dispatcher.wiring import adapters

    queues = adapters.queues(cfg)
    normal = queues[Priority.NORMAL]
    return Top(adapters.store(cfg), queue=normal, dead_letters=adapters.dead_letters(cfg),
               queues={p: q for p, q in queues.items() if p == Priority.NORMAL or q is not normal},
               kind_limits=dict(cfg.kind_limits), window_seconds=window_seconds)
