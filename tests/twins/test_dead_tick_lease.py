"""A tick whose Lambda died holds the lease until its term (the longest tick and a margin:
16 minutes on the stack) and nothing is launched meanwhile, unless the platform runs one tick
at a time (LONGJOBS_TICK_ONE_AT_A_TIME, the stack's tick function with a reserved concurrency
of 1): then the next tick that runs knows the holder is gone and takes the lease at once."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from dispatcher.stages.tick import TickReport
from tests.twins import Twins

TAKEN_OVER = "lease taken over from a tick that did not give it back"

# A Lambda tick's lease: its 870 s of drain, its 30 s reserve and the 60 s margin.
DEAD_TICKS_TERM = 960.0


def _warnings(caplog: pytest.LogCaptureFixture, tick: Callable[[], TickReport]) -> list[str]:
    tick_log = logging.getLogger("dispatcher.stages.tick")  # its tree does not propagate
    tick_log.addHandler(caplog.handler)
    caplog.clear()
    try:
        with caplog.at_level(logging.WARNING, logger="dispatcher.stages.tick"):
            assert not tick().skipped
    finally:
        tick_log.removeHandler(caplog.handler)
    return [r.getMessage() for r in caplog.records]


def test_a_tick_run_one_at_a_time_takes_a_dead_ones_lease_at_once(
        caplog: pytest.LogCaptureFixture) -> None:
    twins = Twins()
    twins.client().submit("k", {}, job_id="after-a-dead-tick")
    assert twins.store.acquire_lease("dead-tick", DEAD_TICKS_TERM, one_at_a_time=True)
    twins.clock.advance(60)  # the next scheduled tick
    stages = twins.stages(LONGJOBS_TICK_ONE_AT_A_TIME="true")
    assert TAKEN_OVER in _warnings(caplog, stages.tick.tick)  # the dead tick shows
    assert twins.task_arns()  # launched at once
    twins.clock.advance(60)
    # The tick after a live one that gave it back says nothing.
    assert TAKEN_OVER not in _warnings(caplog, stages.tick.tick)


def test_a_tick_that_may_run_beside_another_waits_out_the_dead_ones_term() -> None:
    twins = Twins()
    twins.client().submit("k", {}, job_id="after-a-dead-tick")
    assert twins.store.acquire_lease("dead-tick", DEAD_TICKS_TERM, one_at_a_time=True)
    twins.clock.advance(60)
    assert twins.stages().tick.tick().skipped  # local mode, a tick by hand: it may be alive
    twins.clock.advance(DEAD_TICKS_TERM)
    assert twins.stages().tick.tick().launch.bundles_launched == 1


def test_a_lease_held_by_a_tick_that_may_run_beside_others_is_never_taken_early() -> None:
    twins = Twins()
    twins.client().submit("k", {}, job_id="beside-a-tick-by-hand")
    assert twins.store.acquire_lease("tick-by-hand", 300)  # not one at a time: may be alive
    twins.clock.advance(60)
    assert twins.stages(LONGJOBS_TICK_ONE_AT_A_TIME="true").tick.tick().skipped
