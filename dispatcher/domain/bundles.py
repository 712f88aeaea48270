"""Bundles: the unit of launch. One task runs one bundle's jobs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from dispatcher.domain import labels as labels_rule
from dispatcher.domain import rate_limits, tenants
from dispatcher.domain.jobs import Priority, Resources, now


class BundleState(StrEnum):
    # Being written in several transactions (a bundle of more than ~98 jobs); never launched
    # in this state. Its last transaction commits it to PENDING.
    RECORDING = "RECORDING"
    PENDING = "PENDING"  # waiting for a launch (new, capacity failure or rerun)
    LAUNCHING = "LAUNCHING"  # a Launch owns it; RunTask may or may not have happened
    LAUNCHED = "LAUNCHED"  # has a task ARN; the task has not claimed it yet
    RUNNING = "RUNNING"  # claimed by its task
    DONE = "DONE"  # every job reached a terminal state


ACTIVE_BUNDLE_STATES = (BundleState.LAUNCHING, BundleState.LAUNCHED, BundleState.RUNNING)


@dataclass
class Bundle:
    """The unit of launch: one task runs one bundle's jobs (``task_concurrency`` at once)."""

    bundle_id: str
    job_ids: list[str]
    state: BundleState = BundleState.PENDING
    estimated_seconds: float = 0.0
    attempt: int = 0  # launch attempts; with task_arn, the fence every task write carries
    launch_id: str | None = None
    task_arn: str | None = None
    task_definition: str | None = None  # family:revision pinned at launch
    next_attempt_at: float = field(default_factory=now)
    launch_failures: int = 0
    last_failure: str | None = None
    created_at: float = field(default_factory=now)
    updated_at: float = 0.0  # when it entered its current state
    heartbeat_at: float | None = None
    # A bundle too large for one transaction keeps its job ids in this many page items
    # (PAGE#<bundle_id>#<n>) instead of on the bundle item (DynamoDB items stop at 400 KB).
    pages: int = 0
    running_jobs: list[str] = field(default_factory=list)  # as of the last heartbeat
    priority: Priority = Priority.NORMAL  # of all its jobs
    resources: Resources = field(default_factory=Resources)  # of all its jobs: launch overrides
    # Set when every job is of one kind that has a limit (LONGJOBS_KIND_LIMITS), and on the
    # bundle of one job a retry makes: the bundle then counts ``slots`` (jobs it can run at
    # once) against that kind's limit while active, if the kind has one. While it runs, its
    # runner lowers it to the jobs it has left, once those are fewer (job_runner.writes).
    kind: str | None = None
    slots: int = 0
    # Urgent jobs handed to this bundle while it ran (dispatcher/stages/handoff.py): members of
    # it from then on, as its own jobs are. ``takes_handed``: its runner takes such jobs.
    handed_jobs: list[str] = field(default_factory=list)
    takes_handed: bool = False
    # The batch of a large drain (stages/bundle.py) whose follow-ons its runner takes, its
    # bundle done, without a launch of their own (dispatcher.store.follow_ons); or a batch of
    # none (:func:`lone_batch`), whose runner takes other due work only.
    batch: str | None = None
    # The smallest ``timeout_seconds`` of its jobs (handed ones included); 0: none of them has
    # one; None: not known (recorded before bundles kept it). The tick's look for jobs past
    # their timeout reads the running jobs only while an active bundle may hold one
    # (dispatcher.stages.reconcile).
    timeout_seconds: float | None = None
    # The rate limits' tokens its launch takes (dispatcher.domain.rate_limits), its jobs'
    # added up: key -> count; its id says it has them (rate_limits.takes_tokens).
    uses: dict[str, int] | None = None
    # The labels every one of its jobs has (key -> value): its tasks' tags
    # (dispatcher.domain.labels.tags). None: not read (a row of the status index, which holds
    # none); its id says whether it may have any (:func:`labelled`).
    labels: dict[str, str] | None = None

    @property
    def tenant(self) -> str | None:
        """The tenant of all its jobs (bundles never mix tenants), as its id names it
        (dispatcher.domain.tenants)."""
        return tenants.of_bundle(self.bundle_id)


def jobs_timeout(timeouts: Iterable[float | None]) -> float:
    """A bundle's ``timeout_seconds`` from its jobs': the smallest, or 0 if none has one."""
    return min((t for t in timeouts if t), default=0.0)


def joined_timeout(a: float | None, b: float | None) -> float | None:
    """The ``timeout_seconds`` of a bundle of ``a``'s jobs and ``b``'s (unknown if either is)."""
    if a is None or b is None:
        return None
    return jobs_timeout([a, b])


# A batch of no follow-ons ends in this: its bundle's runner, its bundle done, takes the oldest
# due work of the same resources that the last tick left waiting (as a drain's runners do
# before their follow-ons; dispatcher.store.follow_ons), and exits when there is none. A
# retry's shared bundles are each of one (dispatcher.store.job_ops), so that a retry of more
# bundles than free slots runs in the slots' tasks, as an admitted batch does, instead of
# launching a task per bundle. A drain's batch id (jobs.new_id: hex digits) never ends in it.
LONE_BATCH_MARK = "~"


def lone_batch(bundle_id: str) -> str:
    """The batch of no follow-ons that ``bundle_id`` alone belongs to."""
    return f"{bundle_id}{LONE_BATCH_MARK}"


def has_follow_ons(batch: str) -> bool:
    """Whether ``batch`` may have follow-ons (a drain's), or is a batch of none."""
    return not batch.endswith(LONE_BATCH_MARK)


def follow_on_id(batch: str, n: int) -> str:
    """The id of the ``n``-th follow-on of ``batch``: runners take them in that order."""
    return f"{batch}-{n}"


def of_small_jobs(bundle: Bundle, small_job_seconds: float) -> bool:
    """Whether ``bundle`` holds small jobs (estimated at most ``small_job_seconds``; a job
    with no estimate is not small): its task ends it soon and takes a follow-on then, as
    every task does. Only small jobs share a bundle, so one of several jobs (or of pages:
    its ids are kept apart) holds small jobs; one of a single job, if that job is small."""
    if bundle.pages > 0 or len(bundle.job_ids) > 1:
        return True
    return 0 < bundle.estimated_seconds <= small_job_seconds and len(bundle.job_ids) == 1


def new_bundle_id(tenant: str | None, takes_tokens: bool, rest: str,
                  labelled: bool = False) -> str:
    """A new bundle's id: its tenant's (dispatcher.domain.tenants), marked when its jobs take
    rate limits' tokens (:func:`dispatcher.domain.rate_limits.marked`) and when the job it
    opens with has labels (:func:`dispatcher.domain.labels.marked`)."""
    rest = labels_rule.marked(rest) if labelled else rest
    return tenants.bundle_id(tenant, rate_limits.marked(rest) if takes_tokens else rest)


def new_batch_id(tenant: str | None, labelled: bool, rest: str) -> str:
    """A drain's batch id (its bundles' ids begin with it: :func:`first_wave_id`,
    :func:`follow_on_id`), marked as :func:`new_bundle_id` marks a bundle's."""
    return tenants.bundle_id(tenant, labels_rule.marked(rest) if labelled else rest)


def labelled(bundle_id: str) -> bool:
    """Whether a bundle's id says its jobs may share labels, which the status index's rows do
    not hold (:data:`dispatcher.domain.labels.BUNDLE_MARK`)."""
    rest = bundle_id.rpartition(tenants.MARK)[2]
    return labels_rule.has_mark(rest.removeprefix(rate_limits.BUNDLE_MARK))


def labels_known(bundle: Bundle) -> dict[str, str] | None:
    """The labels ``bundle``'s jobs share, if known without reading its item (None: read it)."""
    if bundle.labels is not None:
        return bundle.labels
    return None if labelled(bundle.bundle_id) else {}


def task_can_run(ran: Bundle, other: Bundle) -> bool:
    """Whether the task that ran ``ran`` can run ``other`` next: of its size (a launch's
    overrides) and its tenant (a task runs one tenant's jobs, as a bundle holds them), and
    ``other`` takes no rate limit's tokens (only the tick's launch takes them)."""
    return other.resources == ran.resources and other.tenant == ran.tenant \
        and not rate_limits.takes_tokens(other.bundle_id)


def follow_on_batch(bundle_id: str) -> str:
    """The batch a follow-on's id (:func:`follow_on_id`) names."""
    return bundle_id.rsplit("-", 1)[0]


def first_wave_id(batch: str, n: int) -> str:
    """The id of the ``n``-th bundle of ``batch`` launched for a free slot (not a follow-on)."""
    return f"{batch}-w{n}"


def untaken_follow_on(bundle: Bundle) -> bool:
    """Whether ``bundle`` is a follow-on of its batch that no task has run yet: PENDING at its
    first attempt. Such follow-ons wait apart from other due bundles (the store keeps them
    in an index partition of their own), behind them: the batch's running tasks take them,
    and a slot that other due work does not need gets them."""
    if bundle.batch is None or bundle.attempt or bundle.state != BundleState.PENDING:
        return False
    n = bundle.bundle_id.removeprefix(f"{bundle.batch}-")
    return n != bundle.bundle_id and n.isdigit()
