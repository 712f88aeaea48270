"""The system model's promise checks, each shown able to fail: a fixed sequence of the model's
steps that today's code passes, and the same sequence failing once the rule the check guards
is broken on purpose.

- ``task_limit``: the tasks running never pass ``LONGJOBS_MAX_RUNNING_TASKS`` after a step
  that adds one. Its sequence: a batch's tasks run, the limit is lowered to one, a task is
  killed; its stop's rerun waits for the tick instead of relaunching at once beside the
  others (dispatcher/stages/rerun.py).
- ``work_conservation``: no tick that met no fault ends with a slot free beside due work it
  could run, unless that work's ``waiting_for`` names what holds it other than the slots.
  Its sequence: a queue's share of the slots is more than its bundles; the slot left goes to
  the batch's follow-ons at the drain's end (dispatcher/stages/due_work.py, ``DueWork.spare``).
- ``waiting_promise``: a job told the next tick launches it is launched within two clean
  ticks (unless other work took the slot). Its sequence: a job retried after
  its backoff, told the next tick launches it, is launched by it.
- ``cancel_kept``: no job whose cancel (or its array's) returned starts again until it is
  retried, but one its task had read before (a bundle it claimed): that run is cancelled at
  the task's next heartbeat. Its sequence: a job cancelled before its task claims the bundle.
- ``retries_bundled``: a bulk retry of small jobs takes no more bundles than admission's rule
  packs them into, and each shared bundle's task goes on to other due work
  (tests/model_retry_bundles.py). Its sequence: six small jobs fail, a bulk retry retries them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.jobs import JobState
from dispatcher.ops.client import JobClient
from dispatcher.stages.due_work import DueWork
from dispatcher.store import job_ops
from dispatcher.store.base import Reads
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import _Draws as Draws
from tests.twins.test_system_model_gaps import _first_event as first_event
from tests.twins.test_system_model_gaps import deliver_all, machines, seen_by, spec, task

__all__ = ["machines"]  # the fixture, used by name


def limit_lowered_then_a_kill(m: model.SystemModel) -> None:
    """Forty small jobs on three tasks; the limit lowered to one; a task is killed."""
    m.burst(40, "succeed")
    m.tick(1)
    m.holds()
    m.change_settings("1", "", "1")
    task(m, 0).stop("EssentialContainerExited", "OutOfMemoryError", 137)
    m.sync()
    m.holds()
    deliver_all(m)


def test_a_rerun_at_a_lowered_limit_waits_for_the_tick(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "task_limit", limit_lowered_then_a_kill) == []


def test_the_task_limit_check_sees_a_relaunch_past_the_limit(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: a stop relaunches its rerun whatever the others run."""
    monkeypatch.setattr(Reads, "active_count", lambda self: 0)
    seen = seen_by(machines(), "task_limit", limit_lowered_then_a_kill)
    assert seen and "3 tasks run after this step (2 before it), over the limit of 1" in seen[0]


def unused_share(m: model.SystemModel) -> None:
    """A batch cut into follow-ons by a tick that met a fault, two urgent jobs sent (they
    share a bundle), six slots: the high queue's share of the slots is more than its bundles,
    and the slot it leaves goes to the batch's follow-ons at the drain's end."""
    m.burst(100, "succeed")
    m.flaky_tick(1, False)
    m.urgent(2)
    m.change_settings("2", "", "6")
    m.slow_drain_tick(None)


def test_a_share_a_queue_leaves_unused_goes_to_due_work(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "work_conservation", unused_share) == []


def test_the_work_conservation_check_sees_a_slot_left_free_beside_due_work(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: the slots the drain's shares left unused stay free until the next
    tick."""
    monkeypatch.setattr(DueWork, "spare", lambda self, *args: [])
    seen = seen_by(machines(), "work_conservation", unused_share)
    assert seen and "beside a free slot (5 of 6 tasks run)" in seen[0]


def retry_after_a_failure(m: model.SystemModel) -> None:
    """A job's handler raises once (a retryable error); after its backoff three ticks."""
    m.submit(spec(), 1, False)
    m.tick(1)
    task(m).pass_(lambda job_id: "raise")
    m.sync()
    deliver_all(m)
    m.advance(60.0)
    for _ in range(3):
        m.tick(1)


def test_a_retry_told_the_next_tick_launches_it_is_launched(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "waiting_promise", retry_after_a_failure) == []


def test_the_waiting_promise_check_sees_a_promise_the_ticks_do_not_keep(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: the tick launches none of the due bundles in the table (the other
    checks, which see the free slot too, are not asked here)."""
    monkeypatch.setattr(DueWork, "due", lambda self, capacity, room, keep=None: ([], set()))
    m = machines()
    seen: list[str] = []
    m.fail = lambda check, problems: seen.extend(  # type: ignore[method-assign]
        problems if check == "waiting_promise" else [])
    m.stop_event = first_event(m)  # type: ignore[method-assign]
    retry_after_a_failure(m)
    assert seen and "were told the next tick launches it" in seen[0]


def cancel_before_the_claim(m: model.SystemModel) -> None:
    """Two jobs share a launched bundle; one is cancelled before its task claims it; the task
    then runs what it may."""
    m.submit(spec(), 2, False)
    m.tick(1)
    m.operator(Draws("j001"), "cancel", False)  # type: ignore[arg-type]
    task(m).pass_(lambda job_id: "succeed")
    m.sync()


def test_a_cancel_that_returned_keeps_its_word(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "cancel_kept", cancel_before_the_claim) == []


def test_the_cancel_check_sees_a_cancel_that_did_not_do_what_it_said(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: a cancel returns as if done, and writes nothing."""
    monkeypatch.setattr(JobClient, "cancel", lambda self, job_id, **kwargs: None)
    seen = seen_by(machines(), "cancel_kept", cancel_before_the_claim)
    assert seen == ["j001 started after a cancel of it (or of its array) returned, with no "
                    "retry since"]


def deploy_during_a_batch(m: model.SystemModel) -> None:
    """A batch's tasks run their first bundles; a deploy ends their takes, so they all end at
    once; the next tick finds the follow-ons left and no task of their batch."""
    m.submit_array(2, 0, "succeed", 1.0)
    m.flaky_tick(1, False)
    m.burst(40, "succeed")
    m.tick(1)
    m.deploy_code(False, None)
    m.runners_pass("succeed")
    m.tick(1)


def test_follow_ons_whose_tasks_all_ended_get_the_free_slots(
        machines: Callable[[], model.SystemModel]) -> None:
    assert seen_by(machines(), "work_conservation", deploy_during_a_batch) == []


def retry_of_six_failed(m: model.SystemModel) -> None:
    """Six small jobs, each run once and failed; a bulk retry of every FAILED job."""
    m.submit(spec(max_attempts=1), 6, False)
    m.tick(1)
    m.runners_pass("fail")
    m.bulk_action(("retry", "FAILED"), None, None, False, 100, None)


def test_a_bulk_retry_of_small_jobs_shares_a_bundle(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "retries_bundled", retry_of_six_failed) == []
    retried = m.twins.store.get_jobs([f"j{i:03}" for i in range(1, 7)])
    assert len(retried) == 6 and len({j.bundle_id for j in retried}) == 1


def retry_of_two_taking_tokens(m: model.SystemModel) -> None:
    """Two small jobs that take a rate limit's tokens, due in a minute, cancelled, then
    retried together (a page of three)."""
    m.submit(spec(priority="high", max_attempts=1, not_before=60.0, uses={"api": 1}), 2, False)
    m.slow_drain_tick(urgent_at=None)
    m.bulk_action(("cancel", "PENDING"), None, None, False, 1, None)
    m.bulk_action(("retry", "CANCELLED"), None, None, False, 3, None)


def test_a_bulk_retry_of_jobs_taking_tokens_bundles_each_alone(
        machines: Callable[[], model.SystemModel]) -> None:
    """As admission sizes such bundles by the limits, which a retry does not read: one launch
    takes a whole bundle's tokens (the check bounded them as other small jobs, and said two
    bundles were more than the one they fit)."""
    m = machines()
    assert seen_by(m, "retries_bundled", retry_of_two_taking_tokens) == []
    retried = m.twins.store.get_jobs(["j001", "j002"])
    assert [j.state for j in retried] == ["PENDING", "PENDING"]
    assert len({j.bundle_id for j in retried}) == 2


def test_the_retries_check_sees_a_retry_of_a_bundle_a_job(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: a retry puts each job in a bundle of its own."""
    monkeypatch.setattr(job_ops, "RETRY_BUNDLE_JOBS", 1)
    seen = seen_by(machines(), "retries_bundled", retry_of_six_failed)
    assert seen and "are in 6 bundles, more than the 1 admission's rule packs them" in seen[0]


def test_the_retries_check_sees_a_shared_bundle_whose_task_takes_nothing_after(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: a retry's shared bundle is of a batch its task reads follow-ons of
    (none), so it would not go on to the retry's other due bundles."""
    monkeypatch.setattr(job_ops, "lone_batch", lambda bundle_id: bundle_id)
    seen = seen_by(machines(), "retries_bundled", retry_of_six_failed)
    assert seen and "its task would take no other due bundle of the retry" in seen[0]


def launch_recovered_mid_step(m: model.SystemModel) -> None:
    """A killed task's relaunch is begun by a tick that dies (the limit three then); the limit
    goes down to one; a step of twelve ticks: the one past the recovery time completes the
    relaunch (decided under the old limit), and the ticks after it launch nothing. (Ticks that
    may run beside others: the dead tick's lease holds them off until its term.)"""
    m.change_settings("2", "", "3", "false")
    m.submit(spec(priority="high", estimated_seconds=None, max_attempts=1), 2, False)
    m.tick(1)
    m.kill(Draws(0), ("EssentialContainerExited", 137))  # type: ignore[arg-type]
    m.advance(130.0)
    m.claim(Draws(0))  # type: ignore[arg-type]
    m.crashing_tick(2, False)
    m.change_settings("1", "", "1", "false")
    m.tick(12)


def test_a_relaunch_a_crashed_tick_decided_is_its_own_in_a_step_of_many_ticks(
        machines: Callable[[], model.SystemModel]) -> None:
    """(A sequence the model found: the check forgot the recovery when a later tick of the
    same step recovered nothing.)"""
    m = machines()
    assert seen_by(m, "task_limit", launch_recovered_mid_step) == []
    live = [t for t in m.twins.launcher.tasks.values() if not t.last_status.gone]
    assert len(live) == 2  # the relaunch did complete: the check had something to judge


def array_retried_between_a_cut_cancel_and_its_resume(m: model.SystemModel) -> None:
    """A bulk cancel of every RUNNING job is cut short inside an array (its children cancelled,
    not the parent); a tick settles the array FAILED; a bulk retry of every FAILED job retries
    it; the cancel is resumed."""
    m.submit_array(7, 0, "succeed", 1.0, None)
    m.urgent(1)
    m.urgent(2)
    m.submit_array(2, 0, "succeed", 1.0, None)
    m.slow_drain_tick(None)
    m.flaky_tick(1, False)
    m.bulk_action(("cancel", "RUNNING"), None, None, False, 1, ("flaky", 5, True))
    m.tick(1)
    m.bulk_action(("retry", "FAILED"), None, None, False, 1, None)
    m.resume_bulk(Draws("bulk-000"), None)  # type: ignore[arg-type]


def test_a_resumed_bulk_cancel_leaves_an_array_retried_since_as_it_is(
        machines: Callable[[], model.SystemModel]) -> None:
    """(A sequence the model found: the resume cancelled the retried children a second time.)
    Once per job across an action's runs, as for any job it acted on: the array stays as the
    retry left it."""
    m = machines()
    for check in ("bulk_once", "bulk_array"):
        assert seen_by(machines(), check, array_retried_between_a_cut_cancel_and_its_resume) \
            == [], check
    array_retried_between_a_cut_cancel_and_its_resume(m)
    parent = m.twins.job("a005")
    children = m.twins.store.get_jobs(["a005:0", "a005:1"])
    assert parent is not None and parent.state == JobState.RUNNING
    assert {j.state for j in children} == {JobState.PENDING}


def array_and_jobs_retried_together(m: model.SystemModel) -> None:
    """An array and a burst cancelled by one bulk cancel, retried by one bulk retry."""
    m.submit_array(2, 0, "succeed", 1.0, None)
    m.slow_drain_tick(None)
    m.burst(40, "succeed")
    m.flaky_tick(5, False)
    m.bulk_action(("cancel", "PENDING"), None, None, False, 1, None)
    m.bulk_action(("retry", "CANCELLED"), None, None, False, 100, None)


def test_an_arrays_children_retried_through_it_are_bundled_apart(
        machines: Callable[[], model.SystemModel]) -> None:
    """(A sequence the model found: the check counted them among the run's other jobs.)"""
    assert seen_by(machines(), "retries_bundled", array_and_jobs_retried_together) == []
