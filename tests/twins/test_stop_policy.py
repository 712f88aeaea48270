"""The stop policy as a pure function: what a task's early stop does to each job of its bundle,
given only the stop, the bundle and its jobs as read (no table, no clock, no launcher)."""

from __future__ import annotations

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.stop_policy import JobFate, Settlement, decide
from dispatcher.domain.stops import RUNNER_FAILED_EXIT, StopClass, StopCode, TaskStop

ARN = "arn:aws:ecs:eu-west-1:1:task/c/t2"
AT = 1_000.0
MAX_INFRA = 3


def bundle(*jobs: Job, attempt: int = 2, state: BundleState = BundleState.RUNNING) -> Bundle:
    """A bundle on its ``attempt``-th launch (the second by default: it writes through)."""
    return Bundle("b1", [j.job_id for j in jobs], state, attempt=attempt, task_arn=ARN)


def job(job_id: str, state: JobState = JobState.PENDING, *, attempts: int = 0,
        max_attempts: int = 3, infra: int = 0, ran_here: bool = False) -> Job:
    history = [{"attempt": attempts, "task_arn": ARN, "started_at": AT - 10}] if ran_here \
        else []
    return Job(job_id=job_id, kind="k", payload={}, state=state, bundle_id="b1",
               attempts=attempts, max_attempts=max_attempts, infra_attempts=infra,
               history=history)


def crash(exit_code: int | None = 137) -> TaskStop:
    return TaskStop(ARN, StopCode.ESSENTIAL_CONTAINER_EXITED, "Essential container exited",
                    exit_code, stopped_at=AT)


def settle(stop: TaskStop, b: Bundle, *jobs: Job) -> Settlement:
    return decide(stop, b, list(jobs), max_infra_attempts=MAX_INFRA, at=AT)


def fate(s: Settlement, job_id: str) -> JobFate:
    return next(f for f in s.fates if f.job_id == job_id)


def test_a_crash_with_attempts_left_charges_the_running_job_and_reruns_the_bundle() -> None:
    killer = job("killer", JobState.RUNNING, attempts=1, ran_here=True)
    mate = job("mate")
    s = settle(crash(), bundle(killer, mate), killer, mate)
    assert s.stop_class == StopClass.APPLICATION
    assert s.rerun == ["killer", "mate"] and not s.serial
    f = fate(s, "killer")
    assert (f.source, f.target, f.attempts_delta, f.infra_delta) == \
        (JobState.RUNNING, JobState.PENDING, 0, 0)  # the attempt its start counted stands
    assert f.history is not None and f.history[-1]["stop_class"] == "application"
    assert f.history[-1]["exit_code"] == 137
    assert [f.job_id for f in s.fates] == ["killer"]  # the untouched mate just reruns


def test_a_crash_on_the_last_attempt_fails_the_job_with_the_stop_as_its_reason() -> None:
    killer = job("killer", JobState.RUNNING, attempts=3, max_attempts=3, ran_here=True)
    mate = job("mate")
    s = settle(crash(), bundle(killer, mate), killer, mate)
    f = fate(s, "killer")
    assert f.target == JobState.FAILED
    assert f.reason is not None and f.reason.startswith("out of attempts; last task stopped")
    assert "EssentialContainerExited" in f.reason
    assert f.error == {"type": "TaskStopped", "message": crash().describe()}
    assert s.rerun == ["mate"]


def test_a_spot_interruption_gives_the_attempt_back_and_charges_the_infrastructure() -> None:
    running = job("running", JobState.RUNNING, attempts=1, ran_here=True)
    waiting = job("waiting")
    spot = TaskStop(ARN, StopCode.SPOT_INTERRUPTION, "Spot interruption", None)
    s = settle(spot, bundle(running, waiting), running, waiting)
    assert s.stop_class == StopClass.INFRASTRUCTURE
    f = fate(s, "running")
    assert (f.target, f.attempts_delta, f.infra_delta) == (JobState.PENDING, -1, 1)
    assert s.rerun == ["running", "waiting"]  # the waiting job was not charged: untouched


def test_an_infrastructure_stop_past_the_budget_fails_the_job() -> None:
    spent = job("spent", JobState.RUNNING, attempts=1, infra=MAX_INFRA, ran_here=True)
    spot = TaskStop(ARN, StopCode.SPOT_INTERRUPTION, "Spot interruption", None)
    s = settle(spot, bundle(spent), spent)
    f = fate(s, "spent")
    assert f.target == JobState.FAILED
    assert f.reason is not None and f.reason.startswith("infrastructure budget spent; ")
    assert s.rerun == []


def test_a_normal_exit_after_progress_charges_nobody_and_reruns_the_rest() -> None:
    """Exit 0 with no job recorded running: the task stopped between jobs (it recorded one
    finished), which is no job's doing."""
    done = job("done", JobState.SUCCEEDED, attempts=1, ran_here=True)
    left = job("left")
    s = settle(crash(exit_code=0), bundle(done, left), done, left)
    assert s.stop_class == StopClass.INFRASTRUCTURE
    assert s.fates == [] and s.rerun == ["left"] and not s.serial


def test_a_runner_failed_exit_is_not_the_running_jobs_doing() -> None:
    """The runner exits with RUNNER_FAILED_EXIT when it failed itself (a write it could not
    make): the job recorded running gets its attempt back and the infrastructure pays."""
    running = job("running", JobState.RUNNING, attempts=1, ran_here=True)
    s = settle(crash(exit_code=RUNNER_FAILED_EXIT), bundle(running), running)
    assert s.stop_class == StopClass.INFRASTRUCTURE
    f = fate(s, "running")
    assert (f.target, f.attempts_delta, f.infra_delta) == (JobState.PENDING, -1, 1)
    assert s.rerun == ["running"]


def test_a_crash_with_several_jobs_running_charges_no_attempt_and_serializes() -> None:
    a = job("a", JobState.RUNNING, attempts=1, ran_here=True)
    b = job("b", JobState.RUNNING, attempts=1, ran_here=True)
    s = settle(crash(), bundle(a, b), a, b)
    assert s.stop_class == StopClass.APPLICATION and s.serial
    assert [(f.job_id, f.attempts_delta, f.infra_delta) for f in s.fates] == \
        [("a", -1, 1), ("b", -1, 1)]


def test_a_first_launch_that_recorded_nothing_charges_nobody() -> None:
    """A bundle's first task buffers its writes: a stop that recorded nothing names nobody."""
    a, b = job("a"), job("b")
    s = settle(crash(), bundle(a, b, attempt=1), a, b)
    assert s.fates == [] and s.rerun == ["a", "b"]


def test_a_stop_longjobs_asked_for_cancels_and_reruns_nothing() -> None:
    running = job("running", JobState.RUNNING, attempts=1, ran_here=True)
    user = TaskStop(ARN, StopCode.USER_INITIATED, "longjobs: job running timed out", 143)
    s = settle(user, bundle(running), running)
    assert s.stop_class == StopClass.USER
    assert fate(s, "running").target == JobState.CANCELLED and s.rerun == []
