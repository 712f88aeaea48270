"""The faults of the model of AWS (``bench/seed_scale.py --faults``) at a tiny scale: each does
what it says, and under each the run's ledger finds nothing lost, nothing run twice at once and
no job run past its budget. Counts and virtual seconds only, never this machine's time."""

from __future__ import annotations

import random
import statistics

from dispatcher.domain.jobs import JobState
from dispatcher.simulation.batch_model import BatchModel
from dispatcher.simulation.batch_shape import Shape
from dispatcher.simulation.call_faults import CallDraws, CallFaults
from dispatcher.simulation.faults import Faults, TickCrash
from dispatcher.store import Store

SMALL = {"jobs": 2_000, "seconds": 2.0, "tasks": 4, "concurrency": 10, "start": (30.0, 30.0)}


def run(faults: Faults, seed: int = 3, **settings: str) -> BatchModel:
    model = BatchModel(Shape(**SMALL, seed=seed, faults=faults, settings=settings))  # type: ignore[arg-type]
    model.run()
    verdict = model.verdict()
    assert verdict.holds, verdict.line()
    return model


def test_a_spot_reclaim_gives_the_running_jobs_back_and_they_run_again() -> None:
    model = run(Faults(reclaimed=0.5, kill_within=(20.0, 60.0)))
    out = model.outcome
    warned = [t for t in out.tasks if t.stopping]
    assert out.reclaimed == len(warned) > 0
    # Each runner gave its jobs back at SIGTERM and exited: none was still there to be killed.
    assert all(t.killed_at is None for t in warned)
    given_back = [j for j, runs in model.ledger.runs.items() if len(runs) > 1]
    assert given_back  # interrupted, then run again elsewhere, one run after the other
    job = Store(model.table).get_job(given_back[0])
    assert job is not None and job.state == JobState.SUCCEEDED and job.infra_attempts >= 1


def test_throttling_past_the_adapters_retries_costs_reruns_never_a_job() -> None:
    """A fifth of the calls throttled, their retries throttled again nine times in ten: calls
    give up in every component (a runner's claim and reads of its jobs are tried again for
    up to half a minute, its heartbeats at the next beat; a results write the store's tries could
    not make fails the runner, RUNNER_FAILED_EXIT), stop events fail in their handler and are
    delivered again, ticks raise; every job still ends, once at a time and within its budget:
    SUCCEEDED, or FAILED when its reruns spent the infrastructure budget (saying so). Which
    calls are throttled follows the order the tick's threads run in, so runs differ in how
    many."""
    model = run(Faults(calls=CallFaults(throttled=0.2, throttled_again=0.9)))
    gave_up = {c: calls.draws.failed for c, calls in model.calls.items()}
    assert gave_up["runner"] > 0 and gave_up["dispatcher"] > 0
    verdict = model.verdict()
    assert verdict.succeeded + verdict.failed == SMALL["jobs"] and verdict.succeeded > 0
    store = Store(model.table)
    for job_id in model.ledger.runs:
        job = store.get_job(job_id)
        assert job is not None
        assert job.state == JobState.SUCCEEDED or "infrastructure budget spent" in (
            job.reason or ""), (job_id, job.state, job.reason)


def test_a_tick_that_dies_mid_drain_costs_its_messages_hold_not_its_lease() -> None:
    """The first tick's Lambda dies after 30 of its writes (bundles recorded, none launched).
    Where the platform runs one tick at a time (the stack), the next tick takes its lease at
    once and commits what it left RECORDING; only the messages it held come back later, when
    their hold (LONGJOBS_HOLD_SECONDS, 120 s) ends. Elsewhere the next ticks wait out its
    lease's term (960 s), and the batch with them."""
    crash = Faults(tick_crash=TickCrash(tick=0, after_writes=30))
    at_once = run(crash)
    waited = run(crash, LONGJOBS_TICK_ONE_AT_A_TIME="false")
    for model in (at_once, waited):
        assert len(model.outcome.crashed_ticks) == 1
    assert at_once.outcome.drain < waited.outcome.drain - 600
    assert waited.outcome.drain > 960
    clean = BatchModel(Shape(**SMALL, seed=3))  # type: ignore[arg-type]
    clean.run()
    # Its messages back after the hold, and drained by the first tick after it (a minute
    # apart; the one at the hold's end may have just missed them): a minute or two.
    assert clean.outcome.drain < at_once.outcome.drain <= clean.outcome.drain + 120 + 2 * 60


def test_latency_tails_have_the_p99_they_are_given() -> None:
    draws = CallDraws(CallFaults(tail_p99=10.0), seed=7)
    seconds = sorted(draws.attempts("GetItem", 0.010).seconds for _ in range(20_000))
    median, p99 = statistics.median(seconds), seconds[int(0.99 * len(seconds))]
    assert 0.009 < median < 0.011 and 8.5 < p99 / median < 11.5


def test_a_throttled_call_is_tried_as_its_adapter_tries_it() -> None:
    """Always throttled: DynamoDB's single calls make botocore's 4 attempts, a transaction
    one (the store retries it), ECS's calls the adapter's 6; SQS's are never throttled."""
    draws = CallDraws(CallFaults(throttled=1.0, throttled_again=1.0), seed=1)
    tried = {api: draws.attempts(api, 0.01) for api in
             ("UpdateItem", "TransactWriteItems", "RunTask", "ReceiveMessage")}
    assert {api: (a.attempts, a.throttled_through) for api, a in tried.items()} == {
        "UpdateItem": (4, True), "TransactWriteItems": (1, True), "RunTask": (6, True),
        "ReceiveMessage": (1, False)}
    assert tried["UpdateItem"].seconds > 0.04  # its backoffs waited between the attempts
    rng = random.Random(0)
    assert all(CallDraws(CallFaults(throttled=0.01), seed=rng.randrange(99)).attempts(
        "ReceiveMessage", 0.02).attempts == 1 for _ in range(50))
