"""The dispatcher tick: lease, recover, admit, drain, record, delete, launch, report.

One tick is one Lambda invocation (``dispatcher.handlers.dispatch``). It owns no state between
invocations: everything it needs to resume after a crash is in the table.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from dispatcher.logs import logger
from dispatcher.ports.launcher import Launcher
from dispatcher.ports.queue import Queue
from dispatcher.ports.store import DispatchStore
from dispatcher.settings import Config
from dispatcher.stages.admit import Intake, IntakeStats
from dispatcher.stages.launch import Launches, LaunchStats
from dispatcher.stages.reconcile import Reconciler, ReconcileStats
from dispatcher.stages.rerun import Reruns

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
        return out


class Dispatcher:
    def __init__(self, cfg: Config, queue: Queue, store: DispatchStore, launcher: Launcher, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.queue = queue
        self.store = store
        self.launcher = launcher
        self._clock = clock
        self.intake = Intake(cfg, queue, store, clock)
        self.launches = Launches(cfg, store, launcher, clock)
        self.reconciler = Reconciler(Reruns(self.launches))

    def tick(self, remaining_ms: Callable[[], int] | None = None) -> Decision:
        started = time.monotonic()
        budget = float(self.cfg.tick_seconds)
        if remaining_ms is not None:
            budget = min(budget, remaining_ms() / 1000 - LAUNCH_RESERVE_SECONDS)
        decision = Decision(tick_id=uuid.uuid4().hex[:12],
                            max_running_tasks=self.cfg.max_running_tasks)
        owner = f"tick-{decision.tick_id}"
        if not self.store.acquire_lease(owner, self.cfg.lease_seconds):
            decision.skipped = "another tick holds the lease"
            logger.info("tick skipped", extra=decision.as_dict())
            return decision
        try:
            self._run(decision, started + budget - LAUNCH_RESERVE_SECONDS)
        finally:
            self.store.release_lease(owner)
            decision.elapsed_ms = int((time.monotonic() - started) * 1000)
            logger.info("tick", extra=decision.as_dict())
        return decision

    def _run(self, d: Decision, drain_deadline: float) -> None:
        # Resolve once and pin: every launch of this tick uses the same revision, and the
        # revision is recorded on the bundle, which is how a deploy shows up per job.
        d.task_definition = self.launcher.resolve_task_definition()
        self.launches.recover(d.launch)
        active = self.store.active_bundles()
        self.reconciler.run(active, d.reconcile)
        self.reconciler.timeouts(active, d.reconcile)
        # Reruns started by reconciliation are active again; settled bundles are not.
        d.active_bundles = len(active) - d.reconcile.stopped_found \
            + sum(1 for o in d.reconcile.outcomes if o.get("relaunched"))
        d.capacity = max(0, self.cfg.max_running_tasks - d.active_bundles)
        due = self.store.due_bundles(d.capacity, self._clock())
        d.due_bundles = len(due)
        new = self.intake.drain(d.capacity - len(due), drain_deadline, d.intake)
        d.new_bundles = len(new)
        self.launches.launch(due + new, d.task_definition, d.launch)
        d.capacity_left = d.capacity - d.launch.bundles_launched
