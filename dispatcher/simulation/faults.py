"""Faults in the model of AWS: what goes wrong with tasks and their stop events, drawn per task
from the model's seeded random numbers, so that a run under faults is the same run each time.

- **Reclaims and crashes**: a share of the tasks is killed at a random time while it runs its
  jobs (a Spot reclaim whose runner got no time to give its jobs back, or a crash): its running
  jobs end there, unwritten results with them, and ECS reports the task stopped with
  ``SpotInterruption`` (an infrastructure stop: the stop handler reruns the rest within the
  infrastructure budget).
- **Stop events**: EventBridge delivers a share of the stop events twice, a share late (after
  the tick's reconciliation may have found the stop itself), and a share not at all (the
  reconciliation must).

What they check is the model's run ledger (:mod:`dispatcher.simulation.run_ledger`): nothing
lost, no job with two runs alive at once, no job run past its budgets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from dispatcher.domain.stops import StopCode

KILLED = (str(StopCode.SPOT_INTERRUPTION), "Your Spot Task was interrupted.", None)


@dataclass(frozen=True)
class Faults:
    """Shares of the tasks (0 to 1) each fault befalls."""

    killed: float = 0.0  # killed while it runs (a Spot reclaim, a crash)
    kill_within: tuple[float, float] = (5.0, 120.0)  # seconds after the task's start
    event_twice: float = 0.0  # its stop event delivered twice
    event_late: float = 0.0  # its stop event delivered ``late_by`` seconds late
    late_by: float = 300.0
    event_lost: float = 0.0  # its stop event never delivered

    @property
    def any(self) -> bool:
        return bool(self.killed or self.event_twice or self.event_late or self.event_lost)

    @staticmethod
    def reference() -> Faults:
        """``bench/seed_scale.py --faults``: 5 % of the tasks killed, and 5 % of their stop
        events twice, 5 % late, 2 % lost."""
        return Faults(killed=0.05, event_twice=0.05, event_late=0.05, event_lost=0.02)


@dataclass(frozen=True)
class TaskFate:
    """What befalls one task: killed this long after it starts (None: not), and the delays
    after its exit at which its stop event is delivered (none: lost)."""

    killed_after: float | None
    deliveries: tuple[float, ...]


def fate(faults: Faults, rng: random.Random, exit_to_event: float) -> TaskFate:
    """One task's fate, from the faults' own random numbers (the model's others stay as they
    are without faults)."""
    kill, when, twice, late, lost = (rng.random() for _ in range(5))
    killed_after = (faults.kill_within[0] + when * (faults.kill_within[1]
                                                    - faults.kill_within[0])
                    if kill < faults.killed else None)
    if lost < faults.event_lost:
        return TaskFate(killed_after, ())
    first = exit_to_event + (faults.late_by if late < faults.event_late else 0.0)
    return TaskFate(killed_after, (first, first + 30.0) if twice < faults.event_twice
                    else (first,))
