"""A normal finish: a task that ended its bundle (DONE) reports its jobs' outcomes, once.

The runner writes the bundle DONE with its last results; its task then stops, and the stop's
event (or reconciliation's look) arrives at the observe-stop stage
(:meth:`dispatcher.stages.rerun.Reruns.on_stop`), which hands a bundle that is DONE on that task
here. Nothing is rerun: the jobs' outcomes are reported for the stop's metrics, once (a
redelivered event, or one whose settle already ended the bundle, reports nothing).

Usually the runner counted them on the task's pointer with its move to DONE
(:class:`~dispatcher.store.values.TaskPointer`): the finish then reads no job. Otherwise (a job
it abandoned still running, a result the table refused, or a runner of an older release) the
jobs are read: their outcomes are counted, and the runs abandoned on that task are over now
that it stopped.
"""

from __future__ import annotations

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.costs import TaskCost
from dispatcher.domain.jobs import JobState
from dispatcher.store import StageStore
from dispatcher.store.values import JobOutcomes


class Finishes:
    """The finish stage: reports a finished bundle's outcomes once its task's stop arrives."""

    def __init__(self, store: StageStore) -> None:
        self._store = store

    def counted(self, bundle_id: str, task_arn: str, ended: JobOutcomes,
                bill: TaskCost | None = None) -> tuple[JobOutcomes | None, bool]:
        """``ended``, the runner's count for ``bundle_id`` (DONE on ``task_arn``, none of its
        runs left going on there); None when this stop was reported already (a duplicate
        event: nothing is reported twice). And whether the task's ``bill`` was written by
        this call. One conditional write (with the bill, one transaction), no read."""
        first, billed = self._store.first_report(bundle_id, task_arn, bill)
        return (ended if first else None), billed

    def report(self, bundle: Bundle, task_arn: str) -> JobOutcomes | None:
        """The outcomes of ``bundle``, DONE on ``task_arn`` that stopped, read from its jobs;
        None when this stop was reported already."""
        if not self._store.first_report(bundle.bundle_id, task_arn)[0]:
            return None
        everyone = self._store.get_jobs(bundle.job_ids)
        self._store.end_live_runs(task_arn, everyone)  # a run abandoned there is over now
        states = [j.state for j in everyone if j.bundle_id == bundle.bundle_id]
        return JobOutcomes(states.count(JobState.SUCCEEDED), states.count(JobState.FAILED))
