"""Settle a stopped task's bill: what it cost, split among the jobs it ran.

Part of observing a stop (:mod:`dispatcher.stages.rerun`). The stop's event carries the bill
(:class:`dispatcher.domain.costs.TaskBill`); what it is split by is the task's job-seconds
(:class:`~dispatcher.domain.costs.Usage`). A runner that ended its last bundle DONE vouched
for every run on its task counted them on the task's pointer: the settlement is then written in
the transaction that marks the stop reported, and nothing is read for it. Otherwise (an early
stop, a result the table refused, a handler abandoned still running) the pointer holds the
count through the bundles before the last, and the last bundle's jobs are read, as the stop
left them, for their runs on the task (one BatchGetItem a hundred jobs, on those stops only).

A stop seen without its bill (reconciliation found the task after ECS had forgotten it, or
an event without the task's size) settles nothing: the jobs' costs on that task stay pending,
and say so; so does a stop whose settle of its jobs was refused for a moment (their histories
are not final: a later delivery or reconciliation's look settles both), and the stop of a task
whose runner, of an older release, took follow-ons without counting their job-seconds.
"""

from __future__ import annotations

import logging

from dispatcher.domain import costs
from dispatcher.domain.costs import Prices, TaskCost, Usage
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.store import StageStore
from dispatcher.store.values import TaskPointer

log = logging.getLogger(__name__)

# The group a task's cost goes to when it ran no job (it never started, or stopped before its
# runner began one): still the stack's spend.
NO_JOB = "kind:(no job ran)"


class Bills:
    """The bill-settling part of the observe-stop stage."""

    def __init__(self, store: StageStore, prices: Prices) -> None:
        self._store = store
        self._prices = prices

    def vouched(self, stop: TaskStop, pointer: TaskPointer) -> TaskCost | None:
        """The settlement of a task whose runner counted every run on it (``pointer.ended``),
        to be written with the stop's mark; None without a bill."""
        if stop.bill is None or pointer.ended is None or pointer.settled \
                or not pointer.ended_usage_known:
            return None
        return self._settlement(stop, pointer.ended.usage)

    def settle(self, stop: TaskStop, pointer: TaskPointer | None) -> TaskCost | None:
        """Settle the bill of a task whose stop was handled otherwise (an early stop, a finish
        its runner could not vouch for, a stop handled before without its bill), once: the
        last bundle's jobs are read. None if nothing was written (no bill, settled before)."""
        if stop.bill is None or pointer is None or pointer.settled:
            return None
        if pointer.ended is not None and pointer.ended_usage_known:
            usage = pointer.ended.usage
        elif not pointer.before_usage_known:
            return None  # a runner of an older release: its earlier bundles' runs uncounted
        else:
            bundle = self._store.get_bundle(pointer.bundle_id)
            jobs = self._store.get_jobs(bundle.job_ids) if bundle is not None else []
            usage = pointer.before.usage.plus(runs_on(stop.task_arn, jobs))
        settlement = self._settlement(stop, usage)
        try:
            written = self._store.settle_bill(settlement)
        except Exception as exc:
            log.warning("a task's bill was not settled", extra={
                "task_arn": stop.task_arn, "error": f"{type(exc).__name__}: {exc}"})
            return None
        return settlement if written else None

    def _settlement(self, stop: TaskStop, usage: Usage) -> TaskCost:
        assert stop.bill is not None
        if usage.seconds <= 0:
            usage = Usage(groups={NO_JOB: [0, 0.0]})
        return costs.settle(stop.task_arn, stop.bill, usage, self._prices)


def runs_on(task_arn: str, jobs: list[Job]) -> Usage:
    """The job-seconds ``jobs`` ran on ``task_arn``, as their histories say (the runner's own
    count, :class:`job_runner.writes.Writes`, adds up the same entries); a job counts as one
    that ended there when it ended SUCCEEDED or FAILED with its last run there."""
    usage = Usage()
    for job in jobs:
        last = job.history[-1] if job.history else {}
        for entry in job.history:
            seconds = costs.entry_seconds(entry, task_arn)
            if seconds > 0 or (entry.get("task_arn") == task_arn and "started_at" in entry):
                ended = entry is last and job.state in (JobState.SUCCEEDED, JobState.FAILED)
                usage.add(seconds, costs.groups_of(job.kind, job.labels, job.tenant),
                          ended=ended, failed=job.state == JobState.FAILED)
    return usage
