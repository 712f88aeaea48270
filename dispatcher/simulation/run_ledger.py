"""What ran, in virtual time: each job's runs (its task, its start, its end), kept by the model
as its tasks start and end jobs, so that a run of the model judges itself beyond its drain
time: no job lost (every job submitted ends SUCCEEDED or FAILED), none with two runs alive at
once, none run more often than its budgets allow (its ``max_attempts`` and the infrastructure
attempts, ``LONGJOBS_MAX_INFRA_ATTEMPTS``, together).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise

from dispatcher.domain.jobs import JobState

FINAL = (JobState.SUCCEEDED, JobState.FAILED)


@dataclass
class JobRun:
    """One run of a job on a task; ``end`` None while it runs (or if its task died with it)."""

    task_arn: str
    start: float
    end: float | None = None


@dataclass(frozen=True)
class Verdict:
    """What the ledger found at a run's end; :attr:`holds` when nothing broke a rule."""

    jobs: int
    runs: int
    succeeded: int
    failed: int
    lost: list[str] = field(default_factory=list)  # not SUCCEEDED or FAILED at the end
    overlapping: list[str] = field(default_factory=list)  # two runs alive at once
    over_budget: list[str] = field(default_factory=list)  # more runs than its budgets

    @property
    def holds(self) -> bool:
        return not (self.lost or self.overlapping or self.over_budget)

    def line(self) -> str:
        def some(ids: list[str]) -> str:
            return f" ({', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''})" if ids else ""

        return (f"{self.jobs:,} jobs, {self.runs:,} runs: {self.succeeded:,} SUCCEEDED, "
                f"{self.failed:,} FAILED; {len(self.lost)} lost{some(self.lost)}, "
                f"{len(self.overlapping)} with two runs alive at once{some(self.overlapping)}, "
                f"{len(self.over_budget)} run past their budget{some(self.over_budget)}")


class RunLedger:
    """Each job's runs, in the order they started."""

    def __init__(self) -> None:
        self.runs: dict[str, list[JobRun]] = {}

    def started(self, job_id: str, task_arn: str, at: float) -> None:
        self.runs.setdefault(job_id, []).append(JobRun(task_arn, at))

    def ended(self, job_id: str, task_arn: str, at: float) -> None:
        """The run of ``job_id`` on ``task_arn`` still alive ends (its job finished, or its
        task died under it)."""
        for run in reversed(self.runs.get(job_id, [])):
            if run.task_arn == task_arn and run.end is None:
                run.end = at
                return
        raise ValueError(f"{job_id}: no run alive on {task_arn} to end")

    def verdict(self, submitted: Iterable[str], states: Mapping[str, JobState | None],
                budget: Callable[[str], int]) -> Verdict:
        """``states``: each job's state at the end (None: no record of it); ``budget``: how
        many runs a job may have at most."""
        jobs = list(submitted)
        lost = [j for j in jobs if states.get(j) not in FINAL]
        overlapping = [j for j, runs in self.runs.items() if _overlap(runs)]
        over = [j for j, runs in self.runs.items() if len(runs) > budget(j)]
        return Verdict(jobs=len(jobs), runs=sum(map(len, self.runs.values())),
                       succeeded=sum(states.get(j) == JobState.SUCCEEDED for j in jobs),
                       failed=sum(states.get(j) == JobState.FAILED for j in jobs),
                       lost=lost, overlapping=overlapping, over_budget=over)


def _overlap(runs: list[JobRun]) -> bool:
    """Two of the runs alive at once: one started before the one before it ended (or while
    it had not ended)."""
    ordered = sorted(runs, key=lambda r: r.start)
    return any(a.end is None or b.start < a.end for a, b in pairwise(ordered))
