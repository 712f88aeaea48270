"""A normal finish: a task that ended its bundle (DONE) reports its jobs' outcomes, once.

The runner writes the bundle DONE with its last results; its task then stops, and the stop's
event (or reconciliation's look) arrives at the observe-stop stage
(:meth:`dispatcher.stages.rerun.Reruns.on_stop`), which hands a bundle that is DONE on that task
here. Nothing is rerun: the jobs' outcomes are read for the stop's metrics, once (a redelivered
event, or one whose settle already ended the bundle, reports nothing), and the runs abandoned
on that task are over now that it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import JobState
from dispatcher.store import StageStore


@dataclass(frozen=True)
class Finished:
    """The outcomes a finished bundle's task reports: job ids by how they ended."""

    succeeded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


class Finishes:
    """The finish stage: reads a finished bundle's jobs once its task's stop arrives."""

    def __init__(self, store: StageStore) -> None:
        self._store = store

    def report(self, bundle: Bundle, task_arn: str) -> Finished | None:
        """The outcomes of ``bundle``, DONE on ``task_arn`` that stopped; None when this
        stop was reported already (a duplicate event: nothing is reported twice)."""
        if not self._store.first_report(bundle, task_arn):
            return None
        everyone = self._store.get_jobs(bundle.job_ids)
        self._store.end_live_runs(task_arn, everyone)  # a run abandoned there is over now
        jobs = [j for j in everyone if j.bundle_id == bundle.bundle_id]
        return Finished(succeeded=[j.job_id for j in jobs if j.state == JobState.SUCCEEDED],
                        failed=[j.job_id for j in jobs if j.state == JobState.FAILED])
