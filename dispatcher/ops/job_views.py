"""What the operators' reads answer with (:mod:`dispatcher.ops.queries`): a job's row in
``jobs list``, everything ``jobs show`` prints, and ``stats``; each with ``to_json()``, a stable
shape for scripts."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from dispatcher.domain import tenants
from dispatcher.domain.costs import JobCost
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.domain.progress import Progress
from dispatcher.domain.waiting import Waiting
from dispatcher.ops.history import Attempt, Flat, flat, opt
from dispatcher.ops.job_path import StateChange
from dispatcher.ports.table import Record
from dispatcher.store.codec import bundle_key, iso

# What `jobs show` prints of a payload, result or checkpoint: enough to recognise it, small
# enough for a terminal (payloads may be 256 KiB).
DISPLAY_BYTES = 2048
# A job's page lists this many of the jobs that wait for it (its count says how many).
DEPENDENTS_SHOWN = 100
# Not a stored state: a PENDING job whose not_before is still ahead (see Job.scheduled).
SCHEDULED = "SCHEDULED"


def clip(value: Any, limit: int = DISPLAY_BYTES) -> tuple[str | None, bool]:
    """A JSON rendering of ``value`` cut to ``limit`` bytes, and whether it was cut."""
    if value is None:
        return None, False
    text = value if isinstance(value, str) else json.dumps(value, default=str,
                                                           separators=(",", ":"))
    raw = text.encode()
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode(errors="ignore"), True


@dataclass(frozen=True)
class JobSummary(Flat):
    """One row of ``jobs list``; a REJECTED record has no kind and is keyed by its job id
    (or, when no id could be read, its SQS message id)."""

    job_id: str
    state: str
    kind: str | None
    created_at: float | None
    updated_at: float | None
    attempts: int
    max_attempts: int | None
    infra_attempts: int
    bundle_id: str | None
    reason: str | None
    # What a job not running waits for (dispatcher.domain.waiting); None once it runs or ended.
    waiting_for: Waiting | None = None
    # How far it got, as its handler last said: a running job's, from its task's last
    # heartbeat; one waiting for a rerun or ended otherwise than SUCCEEDED, as of its last
    # checkpoint (`jobs show` reads it there).
    progress: Progress | None = None
    # Whom its work is for: its item's, or (a row of the status index, which does not hold
    # it) its bundle's id's (dispatcher.domain.tenants); None: no tenant, or not known yet.
    tenant: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = flat(self)
        w = self.waiting_for
        out["waiting_for"] = None if w is None else {
            k: opt(iso, v) if k in ("until", "since") else v for k, v in w.to_json().items()}
        p = self.progress
        out["progress"] = None if p is None else {
            "done": p.done, "total": p.total, "message": p.message, "percent": p.percent,
            "reported_at": iso(p.at),
            "eta": opt(iso, p.eta()) if self.state == JobState.RUNNING else None}
        return out

    @staticmethod
    def from_item(item: Record, at: float | None = None, waiting: Waiting | None = None,
                  bundle: Record | None = None) -> JobSummary:
        """``at``: now, to show a PENDING job waiting for its not_before as SCHEDULED;
        ``waiting``: what it waits for (:func:`dispatcher.ops.queries.waiting_of`);
        ``bundle``: its bundle's record, where a running job's progress is."""
        rejected = item.pk.startswith("REJECT#")
        state = item.state or ""
        if state == JobState.PENDING and at is not None and item.not_before is not None \
                and item.not_before > at:
            state = SCHEDULED
        return JobSummary(
            job_id=item.pk.split("#", 1)[1] if rejected or not item.job_id else item.job_id,
            state=state, kind=None if rejected else item.kind,
            created_at=item.created_at, updated_at=item.updated_at,
            attempts=int(item.attempts or 0),
            max_attempts=None if rejected else int(item.max_attempts or 0),
            infra_attempts=int(item.infra_attempts or 0), bundle_id=item.bundle_id,
            reason=item.reason, waiting_for=waiting, progress=_progress(item, bundle),
            tenant=item.tenant or tenants.of_bundle(item.bundle_id or ""))


def _progress(item: Record, bundle: Record | None) -> Progress | None:
    """A running job's report as its task's last heartbeat carried it (none yet this run:
    none); a job waiting for a rerun, or ended otherwise than SUCCEEDED, the one its last
    checkpoint kept."""
    if item.state == JobState.RUNNING:
        reports = bundle.progress if bundle is not None \
            and bundle.pk == bundle_key(item.bundle_id or "") else None
        found = reports.get(item.job_id) if isinstance(reports, dict) else None
        return Progress.from_json(found)
    if item.state == JobState.SUCCEEDED:
        return None
    return Progress.from_json(item.progress)


@dataclass(frozen=True)
class JobDetail:
    """Everything ``jobs show`` prints. Payload, result and checkpoint are the stored JSON
    values (``display`` clips one for a terminal; ``payload_truncated``: the payload's display
    is cut); ``body`` is set only for REJECTED records (the first 4 KiB of the message, as
    kept). A cancelled job has no error: its stop is its reason, not a traceback."""

    summary: JobSummary
    payload: Any
    payload_truncated: bool
    result: Any
    error: dict[str, Any] | None
    checkpoint: Any
    checkpoint_at: float | None
    history: list[Attempt]  # every attempt and retry boundary, oldest first
    bundle: dict[str, Any] | None
    message_id: str | None
    body: str | None
    # Where each run's lines are (its task's log stream; the latest run last), if known.
    logs: list[dict[str, Any]] = field(default_factory=list)
    # An array job's parent: its children's counts (dispatcher.store.array_ops.array_counts);
    # a child: its parent and index.
    array: dict[str, Any] | None = None
    # The bulk actions that cancelled or retried it, oldest first (its marks: the latest 32).
    bulk_ids: list[str] = field(default_factory=list)
    # Its share of the bills of the tasks that ran it (dispatcher.domain.costs); None: it
    # never ran.
    cost: JobCost | None = None
    labels: dict[str, str] = field(default_factory=dict)  # what its producer tagged it with
    # The jobs it still waits for (their ids), while it waits.
    depends_on: list[str] = field(default_factory=list)
    # The jobs that wait (or waited) for it: the first DEPENDENTS_SHOWN, and how many.
    dependents: list[str] = field(default_factory=list)
    dependents_count: int = 0
    # The rate limits' tokens its launch takes (dispatcher.domain.rate_limits): key -> count.
    uses: dict[str, int] = field(default_factory=dict)
    # Its state changes as its record tells them (dispatcher.ops.job_path), oldest first, and
    # how many state-change events its writes published (its sequence; None: written before
    # the sequence existed).
    state_changes: list[StateChange] = field(default_factory=list)
    sequence: int | None = None

    def to_json(self) -> dict[str, Any]:
        rest = {k: v for k, v in flat(self).items() if k not in ("summary", "cost")}
        c = self.cost
        return {**self.summary.to_json(), **rest,
                "history": [a.to_json() for a in self.history],
                "state_changes": [s.to_json() for s in self.state_changes],
                "cost": None if c is None else {
                    "dollars": c.dollars, "run_seconds": c.seconds,
                    "pending_seconds": c.pending_seconds, "tasks": c.tasks, "final": c.final}}

    @staticmethod
    def display(value: Any) -> str | None:
        """A value as compact JSON for a terminal, clipped to DISPLAY_BYTES."""
        text, cut = clip(value)
        return None if text is None else text + (" … (truncated)" if cut else "")


@dataclass(frozen=True)
class BacklogStats:
    visible: int
    in_flight: int
    delayed: int
    oldest_age_seconds: float | None = None  # None: unknown (SQS has it only in CloudWatch)
    dead_letters: int | None = None  # visible messages in the DLQ, when one is configured


@dataclass(frozen=True)
class Stats:
    """``jobs``: the active jobs (PENDING, RUNNING) all of them; the finished ones (SUCCEEDED,
    FAILED, CANCELLED, REJECTED) those admitted since ``finished_since``, by the state they are
    in now."""

    at: float
    backlog: BacklogStats | None
    jobs: dict[str, int]
    running_by_revision: dict[str, dict[str, int]]
    launch_failures_last_hour: dict[str, int]
    reruns_last_hour: dict[str, int]
    finished_since: float

    def to_json(self) -> dict[str, Any]:
        b = self.backlog
        return {
            "at": iso(self.at),
            "backlog": None if b is None else asdict(b),
            "jobs": dict(self.jobs),
            "finished_since": iso(self.finished_since),
            "finished_window_seconds": self.at - self.finished_since,
            "running_by_revision": {k: dict(v) for k, v in self.running_by_revision.items()},
            "launch_failures_last_hour": {
                "bundles": sum(self.launch_failures_last_hour.values()),
                "by_reason": dict(self.launch_failures_last_hour)},
            "reruns_last_hour": {"jobs": sum(self.reruns_last_hour.values()),
                                 "by_stop_class": dict(self.reruns_last_hour)},
        }


@dataclass(frozen=True)
class JobPage:
    """One page of a job list, newest first, and the cursor of the page after it (None: this
    is the last): the position of its last row in the status index, so the next page is read
    from there (never by skipping the rows before it), whatever was recorded since."""

    jobs: list[JobSummary]
    next: str | None

    @staticmethod
    def cursor(row: Record) -> str:
        return JobPage.cursor_of((row.status_at or "", row.pk))

    @staticmethod
    def cursor_of(position: tuple[str, str]) -> str:
        """A position in the status index (``(status_at, pk)``) as a cursor."""
        raw = json.dumps(list(position), separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @staticmethod
    def position(cursor: str) -> tuple[str, str]:
        """A cursor back to ``(status_at, pk)``; a cursor not made here is a clear error."""
        try:
            at, pk = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
            if isinstance(at, str) and isinstance(pk, str):
                return at, pk
        except (ValueError, TypeError, binascii.Error):
            pass
        raise LongjobsError(f"page cursor {cursor[:40]!r} is not one a job list gave; start "
                            "again from the first page")

