"""Property: random interleavings of launches, claims, job writes and (duplicated, reordered,
stale) stop events never reach an illegal state, never lose a job, and never have two live
attempts of one job. Runs the real store policy and rerun logic in-process on the twins (a fresh
table, launcher and clock per example), so it runs many examples and shrinks what it finds.
``LONGJOBS_LIFECYCLE_EXAMPLES`` sets how many (``make test-fast`` runs fewer)."""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.stages.launch import LaunchStats
from dispatcher.store import Fence, JobUpdate
from tests.twins import Twins

STOP_CODES = ["EssentialContainerExited", "SpotInterruption", "TaskFailedToStart",
              "UserInitiated", None]


@pytest.fixture
def machine() -> type[RuleBasedStateMachine]:
    class Lifecycle(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            twins = Twins()  # a fresh world per example: replays (and shrinking) are exact
            stages = twins.stages(LONGJOBS_MAX_INFRA_ATTEMPTS="3")
            self.store = twins.store
            self.launcher = twins.launcher
            self.reruns = stages.reruns
            self.launches = stages.launches
            self.job_ids = ["p-a", "p-b"]
            self.bundle_id = "bundle-p"
            jobs = [Job(job_id=j, kind="k", payload={}, bundle_id=self.bundle_id,
                        max_attempts=2) for j in self.job_ids]
            self.store.record([Bundle(self.bundle_id, list(self.job_ids))], jobs)
            self.tasks: dict[str, int] = {}  # task ARN -> the attempt it was launched for
            self.order: list[str] = []  # launch order: draws index it, so replays are stable

        def current(self) -> Bundle:
            b = self.store.get_bundle(self.bundle_id)
            assert b is not None
            return b

        @rule()
        def launch(self) -> None:
            b = self.current()
            if b.state == BundleState.PENDING:
                self.launches.launch([b], self.launcher.resolve_task_definition(),
                                     LaunchStats())
                self._track()

        def _track(self) -> None:
            b = self.current()
            if b.task_arn and b.task_arn not in self.tasks:
                self.tasks[b.task_arn] = b.attempt
                self.order.append(b.task_arn)

        def pick(self, data: st.DataObject) -> str:
            return self.order[data.draw(st.integers(0, 7)) % len(self.order)]

        @precondition(lambda self: bool(self.tasks))
        @rule(data=st.data())
        def claim(self, data: st.DataObject) -> None:
            arn = self.pick(data)
            with contextlib.suppress(ConflictError):  # own fence; stale tasks must lose
                self.store.claim(Fence(self.bundle_id, self.tasks[arn], arn))

        @precondition(lambda self: bool(self.tasks))
        @rule(data=st.data(), outcome=st.sampled_from([JobState.SUCCEEDED, JobState.FAILED,
                                                        JobState.PENDING, JobState.RUNNING]))
        def job_write(self, data: st.DataObject, outcome: JobState) -> None:
            """A runner (possibly stale) starts or finishes a job."""
            arn = self.pick(data)
            job_id = data.draw(st.sampled_from(self.job_ids))
            job = self.store.get_job(job_id)
            assert job is not None
            fence = Fence(self.bundle_id, self.tasks[arn], arn)
            if job.state == JobState.PENDING and outcome == JobState.RUNNING:
                u = JobUpdate(job_id, JobState.PENDING, JobState.RUNNING, attempts_delta=1,
                              history=[*job.history, {"task_arn": arn}])
            elif job.state == JobState.RUNNING and outcome != JobState.RUNNING:
                if outcome == JobState.PENDING and job.attempts >= job.max_attempts:
                    outcome = JobState.FAILED
                u = JobUpdate(job_id, JobState.RUNNING, outcome)
            else:
                return
            with contextlib.suppress(ConflictError):
                self.store.apply(fence, [u])

        @precondition(lambda self: bool(self.tasks))
        @rule(data=st.data(), code=st.sampled_from(STOP_CODES),
              exit_code=st.sampled_from([None, 0, 1, 137]))
        def stop_event(self, data: st.DataObject, code: str | None, exit_code: int | None) -> None:
            arn = self.pick(data)  # old, repeated or current
            self.reruns.on_stop(TaskStop(arn, code, "test stop", exit_code))
            self._track()

        @invariant()
        def consistent(self) -> None:
            b = self.current()
            jobs = self.store.get_jobs(self.job_ids)
            assert len(jobs) == len(self.job_ids)  # never lost
            for job in jobs:
                assert job.state in JobState
                assert 0 <= job.attempts <= job.max_attempts
                assert 0 <= job.infra_attempts <= 4
                if job.state not in TERMINAL_JOB_STATES:
                    assert b.state != BundleState.DONE  # unfinished work is always launchable
                if job.state == JobState.RUNNING:  # the only live attempt is the bundle's own
                    assert b.state == BundleState.RUNNING
                    assert job.history and job.history[-1]["task_arn"] == b.task_arn
            if b.state == BundleState.DONE:
                assert all(j.state in TERMINAL_JOB_STATES for j in jobs)

    return Lifecycle


EXAMPLES = int(os.environ.get("LONGJOBS_LIFECYCLE_EXAMPLES", "300"))


def test_lifecycle_interleavings(machine: type[RuleBasedStateMachine]) -> None:
    # Each example starts from a fresh in-memory world, so a failure replays exactly and
    # shrinks to a minimal sequence of steps.
    runner = hyp_settings(max_examples=EXAMPLES, stateful_step_count=30, deadline=None,
                          phases=[Phase.explicit, Phase.generate, Phase.shrink],
                          suppress_health_check=list(HealthCheck),
                          print_blob=True)(machine).TestCase
    runner().runTest()
