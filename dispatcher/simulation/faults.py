"""Faults in the model of AWS: what goes wrong with tasks and their stop events, drawn per task
from the model's seeded random numbers (the calls' throttles and tails are drawn as the tick's
threads make them, so two runs under those may differ: :mod:`dispatcher.simulation.call_faults`).

- **Crashes**: a share of the tasks is killed at a random time while it runs its jobs (no
  warning: its runner gets no time to give its jobs back): its running jobs end there,
  unwritten results with them, and ECS reports the task stopped with ``SpotInterruption`` (an
  infrastructure stop: the stop handler reruns the rest within the infrastructure budget).
- **Spot reclaims**: a share of the tasks gets Fargate Spot's two-minute warning at a random
  time while it runs: SIGTERM, on which the runner cancels its running jobs, gives them back,
  writes what finished and exits, as :meth:`job_runner.worker.Worker.on_sigterm` does; a task
  still running two minutes later is killed. "When tasks using Fargate Spot capacity are
  stopped because of a Spot interruption, a two-minute warning is sent before a task is
  stopped. The warning is sent as a task state change event to Amazon EventBridge and as a
  SIGTERM signal to the running task." (https://docs.aws.amazon.com/AmazonECS/latest/
  developerguide/fargate-capacity-providers.html, "Handling Fargate Spot termination notices")
- **Calls**: throttling and latency tails (:mod:`dispatcher.simulation.call_faults`).
- **A tick that dies**: one tick's Lambda killed after a given number of its table writes
  (mid-drain): every call it makes from then on fails; its lease stays held (the next tick
  takes it over, one at a time as on the stack), its
  received messages come back after their visibility timeout, and the next tick's recovery
  finds what it left half done.
- **Stop events**: EventBridge delivers a share of the stop events twice, a share late (after
  the tick's reconciliation may have found the stop itself), and a share not at all (the
  reconciliation must).

What they check is the model's run ledger (:mod:`dispatcher.simulation.run_ledger`): nothing
lost, no job with two runs alive at once, no job run past its budgets.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from dispatcher.domain.stops import StopCode
from dispatcher.simulation.call_faults import CallFaults

KILLED = (str(StopCode.SPOT_INTERRUPTION), "Your Spot Task was interrupted.", None)
# Fargate sends SIGKILL this long after a Spot interruption's SIGTERM.
SPOT_WARNING_SECONDS = 120.0
# The reference batch's first tick makes about 2,600 table writes as it records the batch:
# its Lambda dies after this many, half way through its drain.
REFERENCE_CRASH_WRITES = 1_300


@dataclass(frozen=True)
class TickCrash:
    """The tick's Lambda numbered ``tick`` (0: the first to run) dies after ``after_writes``
    table writes of its own."""

    tick: int = 0
    after_writes: int = 100


@dataclass(frozen=True)
class Faults:
    """Shares of the tasks (0 to 1) each fault befalls."""

    killed: float = 0.0  # killed while it runs, without a warning (a crash)
    kill_within: tuple[float, float] = (5.0, 120.0)  # seconds after the task's start
    reclaimed: float = 0.0  # a Spot reclaim: SIGTERM within ``kill_within``, the kill later
    event_twice: float = 0.0  # its stop event delivered twice
    event_late: float = 0.0  # its stop event delivered ``late_by`` seconds late
    late_by: float = 300.0
    event_lost: float = 0.0  # its stop event never delivered
    calls: CallFaults = field(default_factory=CallFaults)
    tick_crash: TickCrash | None = None

    @property
    def any(self) -> bool:
        return bool(self.killed or self.reclaimed or self.event_twice or self.event_late
                    or self.event_lost or self.calls.any or self.tick_crash)

    @staticmethod
    def reference() -> Faults:
        """``bench/seed_scale.py --faults``: 5 % of the tasks reclaimed and 1 % crashed; 5 % of
        their stop events twice, 5 % late, 2 % lost; 1 % of the calls throttled, every call's
        latency with a p99 of ten times its median; the first tick's Lambda killed mid-drain."""
        return Faults(killed=0.01, reclaimed=0.05, event_twice=0.05, event_late=0.05,
                      event_lost=0.02, calls=CallFaults(throttled=0.01, tail_p99=10.0),
                      tick_crash=TickCrash(tick=0, after_writes=REFERENCE_CRASH_WRITES))


@dataclass(frozen=True)
class TaskFate:
    """What befalls one task: killed this long after it starts (None: not), SIGTERM this
    long after it starts (None: not), and the delays after its exit at which its stop event
    is delivered (none: lost)."""

    killed_after: float | None
    deliveries: tuple[float, ...]
    reclaimed_after: float | None = None


def fate(faults: Faults, rng: random.Random, exit_to_event: float) -> TaskFate:
    """One task's fate, from the faults' own random numbers (the model's others stay as they
    are without faults)."""
    kill, when, twice, late, lost, reclaim, warned = (rng.random() for _ in range(7))
    low, high = faults.kill_within
    killed_after = low + when * (high - low) if kill < faults.killed else None
    reclaimed_after = low + warned * (high - low) if reclaim < faults.reclaimed else None
    if lost < faults.event_lost:
        return TaskFate(killed_after, (), reclaimed_after)
    first = exit_to_event + (faults.late_by if late < faults.event_late else 0.0)
    return TaskFate(killed_after, (first, first + 30.0) if twice < faults.event_twice
                    else (first,), reclaimed_after)
