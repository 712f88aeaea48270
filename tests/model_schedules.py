"""Schedules in the model of the whole system: fires of two schedules, one that skips a fire
while its last run is live and one that allows it, sent as EventBridge Scheduler sends them
(the fire's job message, with its time in the job id), some more than once and some late.

Their jobs join every other check (nothing lost, budgets, live runs, events); the schedule's
own promise is :meth:`ScheduleRules.overlaps`: a ``skip`` schedule never has two of its fires'
jobs pending or running at once, but for one an operator retried (an operator may run a
skipped fire on purpose)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule

from dispatcher.domain import arrays, schedules
from dispatcher.domain.jobs import JobState
from dispatcher.domain.schedules import JobSchedule, Overlap
from tests import model_checks as checks
from tests.model_runner import NATURES

# The model's schedules: their names, overlap rules, and the jobs each fire makes.
SCHEDULES = {
    "sync": JobSchedule(name="sync", expression="rate(1 hour)", overlap=Overlap.SKIP,
                     job={"kind": "plain", "payload": {}, "estimated_seconds": 600.0}),
    "report": JobSchedule(name="report", expression="rate(1 hour)", overlap=Overlap.ALLOW,
                          job={"kind": "plain", "payload": {}, "estimated_seconds": 0.5}),
    # An array fire's parent is recorded apart from the drain's bundles.
    "fan": JobSchedule(name="fan", expression="rate(1 hour)", overlap=Overlap.SKIP,
                       job={"kind": "k", "payload": {}, "array_size": 3,
                            "estimated_seconds": 1.0, "max_attempts": 2}),
}
_LIVE = (JobState.PENDING, JobState.RUNNING)


class ScheduleRules:
    """Mixed into the model (tests/twins/test_system_model.py), which provides ``twins``,
    ``submitted``, ``nature``, ``budget``, ``sizes`` (arrays') and :meth:`fire_budget`."""

    twins: Any
    submitted: dict[str, str]
    nature: dict[str, str]
    budget: dict[str, int]
    sizes: dict[str, int]
    fire_budget: Any  # SystemModel.fire_budget(max_attempts): the runs a fire's job may take

    def schedules_begin(self) -> None:
        self.fired: dict[str, list[str]] = {name: [] for name in SCHEDULES}
        self.retried_fires: set[str] = set()  # an operator retried these: run on purpose


    @rule(name=st.sampled_from(sorted(SCHEDULES)), late=st.booleans(),
          copies=st.sampled_from([1, 1, 2, 3]), nature=st.sampled_from(NATURES))
    def fire(self, name: str, late: bool, copies: int, nature: str) -> None:
        """A fire of ``name`` now, or (``late``) one made before, delivered again; each sent
        ``copies`` times (Scheduler's retries, SQS's at-least-once)."""
        made = self.fired[name]
        if late and made:
            at = made[len(made) // 2]
        else:
            now = int(self.twins.clock())
            last = schedules.fire_epoch(made[-1]) if made else now - 1
            at = schedules.fire_time(max(now, last + 1))
            made.append(at)
        body = SCHEDULES[name].message(at)
        self.twins.client().submit_many([body] * copies)
        job_id = body["job_id"]
        self.submitted.setdefault(job_id, "valid")
        tries = self.fire_budget(int(body.get("max_attempts", 3)))
        size = body.get("array_size")
        if size is None:
            self.nature.setdefault(job_id, nature)
            self.budget.setdefault(job_id, tries)
            return
        self.sizes[job_id] = size
        self.budget[job_id] = 0  # the parent itself never runs
        for i in range(size):
            child = arrays.child_id(job_id, i)
            self.nature.setdefault(child, nature if i == 0 else "succeed")
            self.budget.setdefault(child, tries)

    def overlaps(self, view: checks.View) -> list[str]:
        """A skip schedule's fires' jobs live at once (pending or running), operators'
        retries aside."""
        problems = []
        for name, schedule in SCHEDULES.items():
            if schedule.overlap != Overlap.SKIP:
                continue
            live = sorted(job_id for at in self.fired[name]
                          if (job_id := schedules.fire_id(name, at)) not in self.retried_fires
                          and (job := view.job(job_id)) is not None and job.state in _LIVE)
            if len(live) > 1:
                problems.append(f"schedule {name} skips overlapping fires, yet these run at "
                                f"once: " + "; ".join(checks.describe(view.job(j))
                                                      for j in live))
        return problems
