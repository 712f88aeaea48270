"""Launching bundles: record the launch, call RunTask once per group of <=10, assign the tasks.

Used by the tick and by the task-event handler's immediate reruns, so both follow the same
clientToken discipline. The order of effects is what makes a crash harmless:

1. ``begin_launch`` records a Launch (id derived from its bundles and their next attempt) and
   moves the bundles to LAUNCHING, atomically;
2. RunTask with clientToken = f(launch): a retry after a crash returns the same tasks;
3. ``finish_launch`` assigns task ARNs to bundles in response order (and TASK# pointers the
   runners read) and puts bundles without a task back to PENDING with backoff.

A crash between 1 and 3 leaves the Launch STARTING; the next tick repeats 2 and 3 with the
recorded parameters, which ECS answers with the tasks it already started.

Every RunTask is paced (:class:`~dispatcher.domain.pacing.LaunchPacer`) by Fargate's two
limits, whatever the launcher: RunTask calls per second, and task launches per capacity
provider (a token bucket each for FARGATE and FARGATE_SPOT).
https://docs.aws.amazon.com/AmazonECS/latest/developerguide/throttling.html
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dispatcher.domain import labels
from dispatcher.domain.bundles import Bundle, BundleState, labels_known
from dispatcher.domain.errors import ConflictError, LaunchError, ResourceMissing
from dispatcher.domain.jobs import Resources
from dispatcher.domain.launches import Launch
from dispatcher.domain.pacing import LaunchPacer, RateExceeded, providers_for
from dispatcher.domain.waiting import NO_CAPACITY
from dispatcher.ports.launcher import MAX_TASKS_PER_CALL, Launcher, LaunchRequest
from dispatcher.stages.policy import LaunchPolicy
from dispatcher.store import LaunchOutcome, StageStore

log = logging.getLogger(__name__)


def launch_slots(bundle: Bundle, concurrency: int, limits: Mapping[str, int]) -> int:
    """Jobs ``bundle`` may run at once on its next launch, decided when it launches (the limits
    and concurrency of now, not those it was recorded under): what it counts against its
    kind's limit while active, and what its runner keeps to. 1 stays 1 (a bundle set to run
    one job at a time after an ambiguous stop, or a retried job's own; one that launched with
    1 before keeps it too, as it cannot be told from those); 0 is no cap of its own (a kind
    without a limit). A paged bundle's job ids are not on its item: it counts as many as a
    task runs at once."""
    if bundle.slots == 1:
        return 1
    if bundle.kind is None or bundle.kind not in limits:
        return 0
    jobs = concurrency if bundle.pages else len(bundle.job_ids)
    return max(1, min(jobs, concurrency, limits[bundle.kind]))


@dataclass
class LaunchStats:
    bundles_launched: int = 0
    runtask_calls: int = 0
    recovered: int = 0
    left_for_recovery: int = 0
    conflicts: int = 0
    spot_fallbacks: int = 0  # bundles relaunched on on-demand FARGATE after Spot had none
    paced_seconds: float = 0.0  # waited for Fargate's launch limits before RunTask calls
    throttled: int = 0  # RunTask calls refused with ThrottlingException (left for recovery)
    failures: Counter[str] = field(default_factory=Counter)


def request_for(launch: Launch) -> LaunchRequest:
    """Everything in the request derives from the Launch record, so a retry is byte-identical
    (ECS rejects a reused clientToken whose parameters changed)."""
    return LaunchRequest(
        task_definition=launch.task_definition,
        count=len(launch.bundle_ids),
        client_token=launch.client_token,
        started_by=f"longjobs/{launch.launch_id[:24]}",
        env={"LONGJOBS_LAUNCH_ID": launch.launch_id},
        tags={"longjobs:launch": launch.launch_id,
              **({"longjobs:kind": launch.kind} if launch.kind else {}),
              **({"longjobs:tenant": tenant} if (tenant := launch.tenant) else {}),
              **labels.tags(launch.labels)},
        on_demand=launch.on_demand,
        resources=launch.resources,
    )


def calls_for(bundles: list[Bundle]) -> list[list[Bundle]]:
    """The bundles cut into RunTask calls: grouped by ``resources`` (a call's task-level
    overrides apply to every task it starts), kind, tenant and shared labels (its tags too:
    ``longjobs:kind``, ``longjobs:tenant``, ``longjobs:label:<key>``), then
    <= MAX_TASKS_PER_CALL each. Groups keep the order of their first bundle, and bundles their
    order within a group. Every bundle's labels are known (:func:`labels_known`)."""
    by_size: dict[tuple[Resources, str | None, str | None, frozenset[tuple[str, str]]],
                  list[Bundle]] = {}
    for bundle in bundles:
        shared = frozenset((labels_known(bundle) or {}).items())
        by_size.setdefault((bundle.resources, bundle.kind, bundle.tenant, shared),
                           []).append(bundle)
    return [same[start:start + MAX_TASKS_PER_CALL] for same in by_size.values()
            for start in range(0, len(same), MAX_TASKS_PER_CALL)]


def pacer_for(policy: LaunchPolicy) -> LaunchPacer:
    """A pacer on the real (monotonic) clock with the policy's limits."""
    return LaunchPacer(runtask_per_second=policy.runtask_per_second,
                       task_launch_burst=policy.task_launch_burst,
                       task_launch_per_second=policy.task_launch_per_second)


class Launches:
    """Record, RunTask, assign: the one launch path of the tick and of immediate reruns.

    Each RunTask first waits on ``pacer`` (default: :func:`pacer_for` the policy) for one call
    token and ``count`` task tokens of every capacity provider the request may draw from: only
    FARGATE for an ``on_demand`` request, else each of ``policy.capacity_providers``. A
    strategy splits a call's tasks between its providers by base and weight, which the stage
    does not model: it charges the full count to each provider, which is conservative (never
    over a bucket, sometimes slower than needed for a mixed strategy).
    """

    def __init__(self, store: StageStore, launcher: Launcher, policy: LaunchPolicy,
                 clock: Callable[[], float], pacer: LaunchPacer | None = None) -> None:
        self._store = store
        self._launcher = launcher
        self._policy = policy
        self._clock = clock
        self._pacer = pacer if pacer is not None else pacer_for(policy)

    def launch(self, bundles: list[Bundle], task_definition: str, stats: LaunchStats, *,
               on_demand: bool = False) -> None:
        """One RunTask per <=10 bundles of the same resources (a call's overrides apply to
        all its tasks), in the order the bundles come (grouped by their first appearance)."""
        self._read_labels(bundles)
        for group in calls_for(bundles):
            launch = self._begin(group, task_definition, stats, on_demand)
            if launch is not None:
                self._run(launch, {b.bundle_id: b.launch_failures for b in group}, stats)

    def _read_labels(self, bundles: list[Bundle]) -> None:
        """The labels of the bundles read from the status index whose ids say they may have
        some (dispatcher.domain.bundles.labelled): their items, one read a 100, for their
        tasks' tags. A bundle gone since is given none (its launch's write refuses it)."""
        unread = [b for b in bundles if labels_known(b) is None]
        for i in range(0, len(unread), 100):
            chunk = unread[i:i + 100]
            full = {b.bundle_id: b for b in self._store.bundles_of([b.bundle_id for b in chunk])}
            for b in chunk:
                b.labels = (full[b.bundle_id].labels if b.bundle_id in full else None) or {}

    def recover(self, stats: LaunchStats, task_definition: str | None = None) -> None:
        """Repeat each orphaned launch with its original clientToken and revision (what may
        have started must be the same). Bundles Spot had no capacity for then fall back to a
        new launch on ``task_definition``, the revision deployed now (the orphan's if None):
        a new task runs the code deployed when it launches."""
        cutoff = self._clock() - self._policy.recovery_seconds
        for launch in self._store.orphaned_launches(older_than=cutoff):
            log.warning("retrying an unfinished launch with its original clientToken",
                           extra={"launch_id": launch.launch_id,
                                  "bundle_ids": launch.bundle_ids})
            stats.recovered += 1
            failures = {}
            for bundle_id in launch.bundle_ids:
                b = self._store.get_bundle(bundle_id)
                failures[bundle_id] = b.launch_failures if b else 0
            self._run(launch, failures, stats, fall_back_to=task_definition)

    def _begin(self, group: list[Bundle], task_definition: str, stats: LaunchStats,
               on_demand: bool = False) -> Launch | None:
        for _ in range(2):
            if not group:
                return None
            launch = Launch(Launch.make_id(group), [b.bundle_id for b in group], task_definition,
                            created_at=self._clock(), on_demand=on_demand,
                            resources=group[0].resources, kind=group[0].kind,
                            labels=labels_known(group[0]) or {})
            try:
                self._store.begin_launch(launch, group)
                return launch
            except ConflictError:
                # The status index is eventually consistent: drop bundles that moved on. The
                # ones read again keep the slots decided for this launch (launch_slots), which
                # their items do not hold yet; 1, set by a settle meanwhile, stays 1.
                stats.conflicts += 1
                decided = {b.bundle_id: b.slots for b in group}
                fresh = [self._store.get_bundle(b.bundle_id) for b in group]
                group = [b for b in fresh if b is not None and b.state == BundleState.PENDING]
                for b in group:
                    if b.slots != 1:
                        b.slots = decided[b.bundle_id]
        return None

    def _run(self, launch: Launch, launch_failures: dict[str, int], stats: LaunchStats,
             fall_back_to: str | None = None) -> None:
        request = request_for(launch)
        stats.paced_seconds += self._pacer.acquire(
            request.count, providers_for(request.on_demand, self._policy.capacity_providers))
        stats.runtask_calls += 1
        try:
            result = self._launcher.run(request)
            arns, reasons = result.task_arns, result.failures
        except (LaunchError, ResourceMissing) as exc:
            # A definite refusal: nothing started. Back to PENDING with the reason.
            arns, reasons = [], [exc.reason]
        except RateExceeded as exc:
            # Throttled despite the pacing (another process of the account launched too):
            # AWS does not promise that nothing started, so as for any unknown outcome the
            # launch stays STARTING and recovery repeats it with the same clientToken.
            stats.throttled += 1
            stats.left_for_recovery += 1
            log.warning("RunTask throttled; left for recovery",
                        extra={"launch_id": launch.launch_id, "error": exc.reason})
            return
        except Exception as exc:
            # Unknown outcome (timeout, crash, 5xx after retries): tasks may have started.
            # Leave the launch STARTING; recovery repeats the call with the same clientToken.
            stats.left_for_recovery += 1
            log.error("RunTask outcome unknown; left for recovery",
                      extra={"launch_id": launch.launch_id, "error": repr(exc)})
            return
        outcome = LaunchOutcome()
        for index, bundle_id in enumerate(launch.bundle_ids):
            if index < len(arns):
                outcome.assigned.append((bundle_id, arns[index]))
            else:
                failed = index - len(arns)
                reason = reasons[failed] if failed < len(reasons) else (
                    reasons[0] if reasons else "RunTask returned no task for this bundle")
                outcome.failed.append((bundle_id, reason))
                stats.failures[reason.split(" ", 1)[0]] += 1
        retry_at = {bid: self._backoff(launch_failures.get(bid, 0)) for bid, _ in outcome.failed}
        try:
            self._store.finish_launch(launch, outcome, retry_at)
        except ConflictError:
            stats.conflicts += 1
            return
        stats.bundles_launched += len(outcome.assigned)
        if outcome.failed:
            log.warning("tasks not started; bundles back to PENDING with backoff",
                        extra={"launch_id": launch.launch_id,
                               "failed": [{"bundle_id": b, "reason": r}
                                          for b, r in outcome.failed]})
            if self._policy.spot_fallback and not launch.on_demand:
                self._fall_back(launch, [b for b, r in outcome.failed
                                         if r.startswith(NO_CAPACITY)], stats,
                                fall_back_to or launch.task_definition)

    def _fall_back(self, launch: Launch, bundle_ids: list[str], stats: LaunchStats,
                   task_definition: str) -> None:
        """Bundles Spot had no capacity for are relaunched at once on on-demand FARGATE (a new
        attempt, so a new clientToken), instead of waiting for their backoff."""
        bundles = [b for b in (self._store.get_bundle(i) for i in bundle_ids)
                   if b is not None and b.state == BundleState.PENDING]
        if bundles:
            stats.spot_fallbacks += len(bundles)
            log.warning("no Spot capacity: relaunching on on-demand FARGATE",
                        extra={"bundle_ids": [b.bundle_id for b in bundles]})
            self.launch(bundles, task_definition, stats, on_demand=True)

    def _backoff(self, previous_failures: int) -> float:
        base = self._policy.backoff_seconds * (2 ** min(previous_failures, 16))
        delay = min(base, self._policy.backoff_max_seconds)
        return float(self._clock() + delay * random.uniform(0.5, 1.0))  # jitter spreads retries
