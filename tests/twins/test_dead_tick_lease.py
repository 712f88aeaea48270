"""A tick whose Lambda died holds the lease until its term (the longest tick and a margin:
16 minutes on the stack) and nothing is launched meanwhile, unless the platform runs one tick
at a time (LONGJOBS_TICK_ONE_AT_A_TIME, the stack's tick function with a reserved concurrency
of 1): then the next tick that runs knows the holder is gone and takes the lease at once."""

from __future__ import annotations

from tests.twins import Twins

# A Lambda tick's lease: its 870 s of drain, its 30 s reserve and the 60 s margin.
DEAD_TICKS_TERM = 960.0


def test_a_tick_run_one_at_a_time_takes_a_dead_ones_lease_at_once() -> None:
    twins = Twins()
    twins.client().submit("k", {}, job_id="after-a-dead-tick")
    assert twins.store.acquire_lease("dead-tick", DEAD_TICKS_TERM, one_at_a_time=True)
    twins.clock.advance(60)  # the next scheduled tick
    decision = twins.stages(LONGJOBS_TICK_ONE_AT_A_TIME="true").tick.tick()
    assert not decision.skipped
    assert decision.launch.bundles_launched == 1


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
