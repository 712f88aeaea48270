"""Values the Store roles take and give besides domain objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dispatcher.domain.costs import Usage
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import JobState


@dataclass
class LaunchOutcome:
    """What one RunTask call did, bundle by bundle, in the order of the launch."""

    assigned: list[tuple[str, str]] = field(default_factory=list)  # (bundle_id, task_arn)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (bundle_id, reason)


@dataclass(frozen=True)
class Fence:
    """A task's claim on a bundle: every write the task makes is conditional on it."""

    bundle_id: str
    attempt: int
    task_arn: str
    # Not part of the condition: the bundle's page items (a bundle recorded in pages), which
    # the task's DONE write sets to expire with the bundle (RunnerStore.apply).
    pages: int = 0


@dataclass
class JobUpdate:
    """One job's state change, with everything that changes alongside it."""

    job_id: str
    source: JobState
    target: JobState
    via: JobState | None = None  # a start and an end written together (grouped writes)
    attempts_delta: int = 0
    infra_delta: int = 0
    history: list[dict[str, Any]] | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    reason: str | None = None
    settled_by: str | None = None  # a stop's settle: the stopped task's ARN (Job.settled_by)
    drop_checkpoint: bool = False  # the item is too large for the update: make room
    live_task: str | None = None  # its run there was abandoned still running (Job.live_task)


@dataclass(frozen=True)
class PageOutcome:
    """What a bulk action did to one job of a page (OperatorStore.cancel_page/retry_page):
    ``done`` is "acted" (cancelled or retried), "requested" (a cancel asked of its task),
    "skipped" (this bulk action had acted on it already) or "error" (``error`` says why)."""

    job_id: str
    done: str
    error: LongjobsError | None = None


@dataclass(frozen=True)
class JobOutcomes:
    """How many jobs of a task's bundles ended SUCCEEDED and FAILED by its runner, counted on
    the task's pointer (see :class:`TaskPointer`), so the task's stop reports them without
    reading them."""

    succeeded: int = 0
    failed: int = 0
    # The task's job-seconds through these jobs' bundle, the bundles before it included
    # (dispatcher.domain.costs.Usage): what the task's bill is split by when it stops.
    usage: Usage = field(default_factory=Usage, compare=False)


@dataclass(frozen=True)
class Lease:
    """The dispatcher lease as a tick took it: what the ticks before it left on it, so it
    skips reads and writes whose answer is known.

    ``swept_at``: when the look at every held dependent was last claimed
    (``SWEEP#dependents``), as the last tick to give the lease back left it; None when not
    known. A tick skips a claim the table would refuse (one a period succeeds).

    ``number``: how many times the lease was taken, this time included; ``recordings_left``:
    whether a bundle may be RECORDING, left by a tick that died or failed part-way through
    recording it (only a tick holding the lease records): False when the holder just before
    this one gave the lease back having recorded all it began. The tick then skips the
    query for such bundles. ``taken_over``: the holder just before did not give it back (its
    tick died, or outran its term), which the tick logs: nothing else shows a dead tick.
    ``tenanted``: a holder before saw the work of a tenant (so this tick reads the follow-ons
    no task has taken even when other due work fills its slots: a tenant whose own tasks all
    ended may be owed them first, dispatcher.stages.due_work). Once set, it stays: a tick that
    sees no tenant (no slot free, its tenants' follow-ons unread) must not forget them."""

    owner: str
    swept_at: float | None = None
    number: int = 0
    recordings_left: bool = True
    taken_over: bool = False
    tenanted: bool = False


@dataclass(frozen=True)
class TaskPointer:
    """A task's pointer (``TASK#<arn>``) as read: the bundle the task runs or ran last;
    ``before``, how the jobs of the bundles it ran before that one ended (the follow-ons it
    took, dispatcher.store.follow_ons, each counted as it took the next); ``ended``, how that
    bundle's own jobs ended, when its runner ended it DONE having abandoned none of them and
    the table having refused none of its results (written with the move to DONE: the bundle
    is then DONE on this task, and no run of its jobs is left going on there). None
    otherwise: the bundle and its jobs are read to know."""

    bundle_id: str
    before: JobOutcomes = JobOutcomes()
    ended: JobOutcomes | None = None
    settled: bool = False  # its bill is settled (dispatcher.domain.costs.TaskCost)
    # Whether its runner counted job-seconds (a runner of an older release counted outcomes
    # only): ``before``'s usage is known (it took no follow-on, or counted them), and
    # ``ended``'s (the vouched bundle's).
    before_usage_known: bool = True
    ended_usage_known: bool = True
