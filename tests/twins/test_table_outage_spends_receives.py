"""A table that refuses a message's recording tick after tick spends one receive a tick.

A message is deleted only once its job is recorded (dispatcher/stages/recorder.py): when the
table fails a recording in more tries than the store makes, the message is given back for the
next tick, and that delivery counts toward the queue's maxReceiveCount. An array's message (its
parent, recorded by ``Recorder.record_parents``) costs the same receives as a plain job's, no
more; five such ticks send either to the dead-letter queue, as docs/design.md says of a failure
that persists. The system model's ``dead_letter`` check counts only the receives the dispatcher
spent of its own, not those a fault spent; these are the steps that showed it
(tests/twins/test_system_model.py, ``flaky_tick``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests import model_checks as checks
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines

__all__ = ["machines"]  # the fixture: fresh model worlds with every check on

# Transactions failing in a row: the store's five tries of one recording all fail.
OUTAGE = 5


@pytest.fixture
def world(machines: Callable[[], model.SystemModel]) -> model.SystemModel:
    """A fresh model world (as the model test sets it up), with every check on."""
    return machines()


def send(m: model.SystemModel, shape: str) -> str:
    """One message: an array of two children, or a plain job; its job id."""
    if shape == "array":
        m.submit_array(size=2, tolerated=0, nature="succeed", estimate=1.0)
        return "a001"
    m.submit({"kind": "plain", "priority": "normal", "estimated_seconds": 1.0,
              "not_before": None, "payload_bytes": 0, "max_attempts": 2,
              "timeout_seconds": None}, 1, False)
    return "j001"


def receives(m: model.SystemModel) -> list[int]:
    return sorted(checks.receive_counts(m.queues()).values())


@pytest.mark.parametrize("shape", ["array", "plain"])
def test_each_tick_whose_table_refuses_the_recording_spends_one_receive(
        world: model.SystemModel, shape: str) -> None:
    m = world
    m.flaky_tick(1, False)  # nothing to receive yet
    job_id = send(m, shape)
    seen = []
    for n in range(checks.MAX_RECEIVE_COUNT):
        if n == 2:
            m.change_settings("1", "", "1")
        m.flaky_tick(OUTAGE, False)
        seen.append(receives(m))
        m.holds()  # every receive was the outage's: dead_letter holds
    assert seen == [[1], [2], [3], [4], [5]]
    assert m.view().job(job_id) is None
    assert m.forced == {("normal", "m1"): checks.MAX_RECEIVE_COUNT}


@pytest.mark.parametrize("shape", ["array", "plain"])
def test_once_the_table_answers_the_message_is_recorded_and_deleted(
        world: model.SystemModel, shape: str) -> None:
    m = world
    job_id = send(m, shape)
    for _ in range(checks.MAX_RECEIVE_COUNT - 1):
        m.flaky_tick(OUTAGE, False)
    assert receives(m) == [checks.MAX_RECEIVE_COUNT - 1]
    m.tick(1)
    m.holds()
    assert receives(m) == []
    job = m.view().job(job_id)
    assert job is not None and job.array_size == (2 if shape == "array" else None)


def test_a_receive_the_dispatcher_spends_itself_still_counts(world: model.SystemModel) -> None:
    """Four receives spent by the outage, and a fifth given back without one (a stand-in for
    a dispatcher that bounces a message it could record): the queue would dead-letter it."""
    m = world
    send(m, "array")
    for _ in range(checks.MAX_RECEIVE_COUNT - 1):
        m.flaky_tick(OUTAGE, False)
    m.twins.queue.release(m.twins.queue.receive())
    assert receives(m) == [checks.MAX_RECEIVE_COUNT]
    with pytest.raises(AssertionError, match=r"\[dead_letter\].*received 5 times \(4 of them"):
        m.holds()
