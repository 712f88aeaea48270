"""The dispatcher tick: lease, recover, admit, drain, record, delete, launch, report.

One tick is one Lambda invocation (``dispatcher.handlers.dispatch``). It owns no state between
invocations: everything it needs to resume after a crash is in the table.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from dispatcher.ports.launcher import Launcher
from dispatcher.ports.store import DispatchStore
from dispatcher.stages.admit import Intake, IntakeStats
from dispatcher.stages.launch import Launches, LaunchStats
from dispatcher.stages.policy import TickPolicy
from dispatcher.stages.reconcile import Reconciler, ReconcileStats

log = logging.getLogger(__name__)

# Time kept back from the drain for recording and launching.
LAUNCH_RESERVE_SECONDS = 5.0


@dataclass
class Decision:
    """The one structured record a tick logs: what it saw and what it decided."""

    tick_id: str
    skipped: str | None = None
    task_definition: str | None = None
    max_running_tasks: int = 0
    active_bundles: int = 0
    capacity: int = 0
    due_bundles: int = 0
    new_bundles: int = 0
    capacity_left: int = 0
    intake: IntakeStats = field(default_factory=IntakeStats)
    launch: LaunchStats = field(default_factory=LaunchStats)
    reconcile: ReconcileStats = field(default_factory=ReconcileStats)
    elapsed_ms: int = 0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["launch"]["failures"] = dict(self.launch.failures)
        out["reconcile"]["outcomes"] = [o.as_dict() for o in self.reconcile.outcomes]
        return out


class Dispatcher:
    """One tick: lease, recover, reconcile, admit, launch. Each collaborator is passed in."""

    def __init__(self, store: DispatchStore, launcher: Launcher, intake: Intake,
                 launches: Launches, reconciler: Reconciler, policy: TickPolicy, *,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._launcher = launcher
        self._intake = intake
        self._launches = launches
        self._reconciler = reconciler
        self._policy = policy
        self._clock = clock

    def tick(self, remaining_ms: Callable[[], int] | None = None) -> Decision:
        started = time.monotonic()
        budget = float(self._policy.tick_seconds)
        if remaining_ms is not None:
            budget = min(budget, remaining_ms() / 1000 - LAUNCH_RESERVE_SECONDS)
        decision = Decision(tick_id=uuid.uuid4().hex[:12],
                            max_running_tasks=self._policy.max_running_tasks)
        owner = f"tick-{decision.tick_id}"
        if not self._store.acquire_lease(owner, self._policy.lease_seconds):
            decision.skipped = "another tick holds the lease"
            log.info("tick skipped", extra=decision.as_dict())
            return decision
        try:
            self._run(decision, started + budget - LAUNCH_RESERVE_SECONDS)
        finally:
            self._store.release_lease(owner)
            decision.elapsed_ms = int((time.monotonic() - started) * 1000)
            log.info("tick", extra=decision.as_dict())
        return decision

    def _run(self, d: Decision, drain_deadline: float) -> None:
        # Resolve once and pin: every launch of this tick uses the same revision, and the
        # revision is recorded on the bundle, which is how a deploy shows up per job.
        d.task_definition = self._launcher.resolve_task_definition()
        self._launches.recover(d.launch)
        active = self._store.active_bundles()
        self._reconciler.run(active, d.reconcile)
        self._reconciler.timeouts(active, d.reconcile)
        # Reruns started by reconciliation are active again; settled bundles are not.
        d.active_bundles = len(active) - d.reconcile.freed
        d.capacity = max(0, self._policy.max_running_tasks - d.active_bundles)
        due = self._store.due_bundles(d.capacity, self._clock())
        d.due_bundles = len(due)
        new = self._intake.drain(d.capacity - len(due), drain_deadline, d.intake)
        d.new_bundles = len(new)
        self._launches.launch(due + new, d.task_definition, d.launch)
        d.capacity_left = d.capacity - d.launch.bundles_launched
