"""The system model's known gaps, each replayed as one fixed sequence of the model's steps.

For every check in ``KNOWN_GAPS`` (tests/twins/test_system_model.py) a sequence that today's code
fails: while the gap is listed, the model must still see it (the switch hides a real defect,
not a broken check); once its fix is merged and the name removed from ``KNOWN_GAPS``, the same
sequence must hold. So this file says when a name can leave the list, and the model's checks
are shown able to fail.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.domain import dependencies
from dispatcher.stages import bundle as bundle_stage
from dispatcher.store import job_ops
from dispatcher.store import operator as operator_store
from job_runner import writes as writes_module
from tests.model_runner import SimTask
from tests.twins import test_system_model as model

DAY = 86_400.0


def spec(**given: Any) -> dict[str, Any]:
    return {"kind": "plain", "priority": "normal", "estimated_seconds": 0.5, "not_before": None,
            "payload_bytes": 0, "max_attempts": 3, "timeout_seconds": None, **given}


def rounds(m: model.SystemModel, n: int, behaviour: str, seconds: float) -> None:
    """``n`` rounds of a tick, a pass of every runner (handlers ending as ``behaviour``) and
    ``seconds`` of time, with the checks after every step, as the machine runs them."""
    for _ in range(n):
        m.tick(1)
        m.holds()
        m.runners_pass(behaviour)
        m.holds()
        m.advance(seconds)


def task(m: model.SystemModel, n: int = -1) -> SimTask:
    """The n-th task the launcher started (the last by default)."""
    return m.tasks[list(m.twins.launcher.tasks)[n]]


def deliver_all(m: model.SystemModel) -> None:
    while m.events:
        m.stop_event(data=None, again=False, old=False)  # type: ignore[arg-type]


def item_near_limit(m: model.SystemModel, then: Callable[[model.SystemModel], None]) -> None:
    """A job checkpoints to 64 bytes under DynamoDB's item limit, and its task is killed."""
    m.submit(spec(estimated_seconds=None), 1, False)
    m.tick(1)
    t = task(m)
    t.claim()
    t.start_next()
    t.checkpoint("j001", m.checkpoint_state("j001", 64))
    t.stop("EssentialContainerExited", "OutOfMemoryError", 137)
    m.sync()
    then(m)


def tick_raises(m: model.SystemModel) -> None:
    item_near_limit(m, lambda m: m.tick(12))  # reconcile finds the stopped task


def stop_event_raises(m: model.SystemModel) -> None:
    item_near_limit(m, deliver_all)


def pointer_expired(m: model.SystemModel) -> None:
    """A job runs for 31 days (the schema allows 116), heartbeating; TTL runs."""
    m.submit(spec(estimated_seconds=1e7), 1, False)
    m.tick(1)
    task(m).claim()
    task(m).start_next()
    m.advance(31 * DAY)
    m.ttl()


def pages_expired(m: model.SystemModel) -> None:
    """15 jobs of 250 KB (a bundle recorded in pages) scheduled 180 days ahead; TTL runs."""
    m.submit(spec(payload_bytes=250_000, not_before=180 * DAY), 15, False)
    m.tick(1)
    m.advance(181 * DAY)
    m.ttl()


def starvation(m: model.SystemModel) -> None:
    """report=4 at 2 jobs per task; five long reports, each a bundle of its own."""
    m.change_settings("2", "report=4", "3")
    m.submit(spec(kind="report", estimated_seconds=None), 5, False)
    m.tick(12)
    m.tick(12)


def starvation_after_lowering_a_limit(m: model.SystemModel) -> None:
    """Eight reports scheduled a minute ahead, recorded at report=4; then report=2."""
    m.change_settings("4", "report=4", "3")
    m.submit(spec(kind="report", not_before=60.0), 8, False)
    m.tick(1)
    m.change_settings("4", "report=2,resize=1", "3")
    m.advance(120.0)
    m.tick(12)
    m.tick(12)


def two_live_runs(m: model.SystemModel) -> None:
    """At 2 jobs per task a handler ignores its timeout; ``jobs retry`` launches it again."""
    m.change_settings("2", "", "1")
    m.submit(spec(timeout_seconds=30.0, max_attempts=1), 1, False)
    m.submit(spec(), 1, False)  # its bundle-mate: no timeout, runs on
    m.tick(1)
    t = task(m)
    t.claim()
    t.start_next()
    t.start_next()
    m.advance(130.0)
    t.finish("j001", "ignore_stop")  # recorded FAILED (timeout), still running
    t.flush()
    m.twins.client().retry("j001")
    m.change_settings("2", "", "3")
    m.tick(1)
    task(m).claim()
    task(m).start_next()


def budget(m: model.SystemModel) -> None:
    """A handler raises Interrupted by itself on every run (max_attempts 1, infra budget 2)."""
    m.submit(spec(estimated_seconds=None, max_attempts=1), 1, False)
    for _ in range(8):
        m.tick(1)
        t = task(m)
        if t.phase == "new":
            t.pass_(lambda job_id: "interrupt_itself")
        m.sync()
        deliver_all(m)


def blamed_innocent(m: model.SystemModel) -> None:
    """One job at a time (the default): quick, then innocent (its result buffered after a
    flush wrote its start), then poison, which kills the task."""
    m.change_settings("1", "", "1")
    m.submit(spec(max_attempts=1), 3, False)
    m.tick(1)
    t = task(m)
    t.claim()
    t.start_next()
    t.finish("j001", "succeed")
    t.start_next()
    t.flush()
    t.finish("j002", "succeed")
    t.start_next()
    t.stop("EssentialContainerExited", "OutOfMemoryError", 137)
    m.sync()
    deliver_all(m)


def dead_letter(m: model.SystemModel) -> None:
    """A 1 MiB message with a 500 KB unknown field, beside an ordinary malformed one."""
    m.submit_malformed("huge_unknown_field")
    m.submit_malformed("unknown_field")
    for _ in range(5):
        m.tick(1)
        m.advance(400.0)


def held_duplicate(m: model.SystemModel) -> None:
    """A long job (a bundle of its own) sent six times before one tick: the copies received
    after its recording began are neither deleted with it nor given back."""
    m.submit(spec(estimated_seconds=None), 1, False)
    m.submit(spec(estimated_seconds=None), 5, True)
    m.tick(1)


def bulk_array(m: model.SystemModel) -> None:
    """An array's parent is cancelled; a bulk retry of every CANCELLED job retries it."""
    m.submit_array(2, 0, "succeed", 1.0)
    m.tick(1)
    m.twins.client().cancel("a001")
    m.bulk_action(("retry", "CANCELLED"), None, None, False, 100, None)


def bulk_retry_cut_inside_an_array(m: model.SystemModel) -> None:
    """An array whose children each needed their dependency's child to fail: they are
    cancelled, the array FAILED. A bulk retry of every FAILED job dies right after its first
    write (the sequence the model found, when the children were retried before their parent
    was reopened)."""
    m.submit_array(2, 0, "succeed", 1.0)
    m.flaky_tick(1, False)
    m.submit_array(2, 0, "succeed", 1.0, element_wise=dependencies.Requires.FAILED)
    m.flaky_tick(1, False)
    m.runners_pass("succeed")
    m.flaky_tick(1, False)
    m.bulk_action(("retry", "FAILED"), None, None, False, 1, ("dies", 0))


def bulk_resumed(m: model.SystemModel) -> None:
    """A bulk retry of every FAILED job dies right after its first write (one job retried);
    that job fails again; the operator runs the bulk retry again with its id."""
    m.submit(spec(max_attempts=1), 3, False)
    m.tick(1)
    task(m).pass_(lambda job_id: "fail")
    m.bulk_action(("retry", "FAILED"), None, None, False, 1, ("dies", 0))
    m.tick(1)
    task(m).pass_(lambda job_id: "fail")
    m.sync()
    m.run_bulk(m.cut_short[0], None)


def deployed_revision(m: model.SystemModel) -> None:
    """A long job runs on the stack's revision; new job code is deployed; another long job
    launches while the first runs on, heartbeating, and ends."""
    m.submit(spec(estimated_seconds=None), 1, False)
    m.tick(1)
    first = task(m)
    first.claim()
    first.start_next()
    m.deploy_code(False, None)
    m.submit(spec(estimated_seconds=None), 1, False)
    m.tick(1)
    task(m).claim()
    task(m).start_next()
    m.advance(30.0)
    first.finish("j001", "succeed")
    first.flush()


def array_cancel_after_a_crashed_recording(m: model.SystemModel) -> None:
    """An array's children are recorded by a tick that dies before it counts them on the
    parent; the parent is cancelled (its cancel covers the children it counts: none); a tick
    launches the children and they run."""
    m.submit(spec(priority="high", estimated_seconds=None, max_attempts=1), 1, False)
    m.flaky_tick(1, False)
    m.submit_array(2, 0, "succeed", 1.0)
    m.advance(3600.0)
    m.tick(1)
    m.submit_array(2, 0, "succeed", 1.0)
    m.crashing_tick(5, False)
    m.advance(3600.0)
    m.operator(_Draws("a002"), "cancel", False)  # type: ignore[arg-type]
    m.slow_drain_tick(None)
    m.runners_pass("succeed")


Scenario = Callable[[model.SystemModel], None]
SCENARIOS: dict[str, list[Scenario]] = {
    f.__name__: [f] for f in (tick_raises, stop_event_raises, pointer_expired, pages_expired,
                              two_live_runs, budget, blamed_innocent, dead_letter,
                              held_duplicate)}
SCENARIOS["starvation"] = [starvation, starvation_after_lowering_a_limit]
SCENARIOS["bulk_array"] = [bulk_array]
SCENARIOS["cancel_kept"] = [array_cancel_after_a_crashed_recording]
SCENARIOS["bulk_array_retry_cut"] = [bulk_retry_cut_inside_an_array]
SCENARIOS["bulk_once"] = SCENARIOS["bulk_retry_budget"] = [bulk_resumed]
for check in ("launch_revision", "kept_revision", "attempt_revision"):
    SCENARIOS[check] = [deployed_revision]


@pytest.fixture
def machines(monkeypatch: pytest.MonkeyPatch) -> Callable[[], model.SystemModel]:
    """Fresh model worlds, with every check on."""
    monkeypatch.setattr(bundle_stage, "new_id", model.SystemModel.hooks_ids)
    monkeypatch.setattr(operator_store, "new_id", model.SystemModel.hooks_ids)
    monkeypatch.setattr(job_ops, "new_id", model.SystemModel.hooks_ids)
    monkeypatch.setattr(writes_module, "time", model.SystemModel.hooks_time)
    monkeypatch.setattr(model, "GAPS", frozenset())
    return model.SystemModel


def test_every_known_gap_has_a_scenario() -> None:
    assert set(model.KNOWN_GAPS) <= set(SCENARIOS)


def seen_by(m: model.SystemModel, gap: str, scenario: Scenario) -> list[str]:
    """What the ``gap`` check says on ``scenario`` (every other check must hold on it)."""
    seen: list[str] = []
    real_fail = m.fail

    def fail(check: str, problems: list[str]) -> None:
        if check == gap:
            seen.extend(problems)
        else:
            real_fail(check, problems)

    m.fail = fail  # type: ignore[method-assign]
    m.stop_event = _first_event(m)  # type: ignore[method-assign]
    scenario(m)
    m.holds()
    m.operators_hold()
    return seen


@pytest.mark.parametrize("gap", sorted(SCENARIOS))
def test_a_known_gap_is_seen_until_it_is_fixed(machines: Callable[[], model.SystemModel],
                                               gap: str) -> None:
    """A listed gap is seen by one of its sequences at least (a check covering several
    defects stays listed until each is fixed); a gap not listed, by none of them."""
    seen = {f.__name__: seen_by(machines(), gap, f) for f in SCENARIOS[gap]}
    if gap in model.KNOWN_GAPS:
        assert any(seen.values()), f"{gap} is in KNOWN_GAPS but no sequence shows it any " \
            "more: remove it"
    else:
        assert not any(seen.values()), seen


def test_copies_received_while_their_job_is_recorded_are_deleted(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    held_duplicate(m)


def _first_event(m: model.SystemModel) -> Callable[..., None]:
    """The model's stop-event step, delivering the oldest pending event."""
    def deliver(data: Any = None, again: bool = False, old: bool = False) -> None:
        stop = m.events.pop(0)
        m.delivered.append(stop)
        m.guarded("stop_event_raises", f"the stop event of {stop.task_arn}",
                  lambda: m.twins.stages(**m.env()).reruns.on_stop(stop))
        m.sync()
    return deliver


class _Draws:
    """Stands in for hypothesis's ``data``: the values to draw, in order."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any) -> Any:
        return self.values.pop(0)


def test_a_dependent_recorded_after_the_last_look_is_judged_by_the_next(
        machines: Callable[[], model.SystemModel]) -> None:
    """An urgent job succeeds before a clean tick looks at every held dependent; a dependent
    of it is sent after, and the tick recording it dies: it waits, and the next look decides
    it (the dependencies check must not count it as left waiting by the look before)."""
    m = machines()
    for step in (lambda: m.slow_drain_tick(urgent_at=1), lambda: m.slow_drain_tick(None),
                 lambda: m.submit_array(2, 0, "succeed", 1.0),
                 lambda: m.runners_pass("succeed"), lambda: m.advance(3600.0),
                 lambda: m.slow_drain_tick(None), lambda: m.crashing_tick(7, False),
                 lambda: m.submit_dependent(_Draws(["u001"]),  # type: ignore[arg-type]
                                            dependencies.Requires.SUCCEEDED, "succeed"),
                 lambda: m.crashing_tick(1, False), lambda: m.advance(3600.0),
                 lambda: m.tick(1)):
        step()
        m.holds()
    job = m.twins.job("d003")
    assert job is not None and not job.depends_on, job  # the next look released it


class _Picks:
    """A rule's draw that picks what it is told (the model's own draws replay a sequence)."""

    def __init__(self, picks: Any) -> None:
        self.picks = picks

    def draw(self, strategy: Any) -> Any:
        return self.picks


def test_a_look_at_held_dependents_that_the_table_cut_short_is_made_again_a_minute_on(
        machines: Callable[[], model.SystemModel]) -> None:
    """A dependent of an array is recorded in the drain before the array ends; a tick an hour
    later claims the look at every held dependent and fails to release it (the table fails
    past its retries): it gives the look back, and a tick a minute on looks again and
    releases it, not one five minutes on. (The sequence a random run found, when the look's
    claim stood for its period, and the model credited the next tick, at the same instant,
    with the faulty tick's look.)"""
    m = machines()
    m.submit(spec(priority="high", estimated_seconds=None, max_attempts=1), 1, False)
    m.submit_array(2, 0, "succeed", 1.0)
    m.tick(1)
    m.flaky_tick(1, False)
    m.submit_dependent(_Picks(["a002"]), dependencies.Requires.SUCCEEDED,  # type: ignore[arg-type]
                       "succeed")
    m.runners_pass("succeed")
    m.slow_drain_tick(None)
    m.advance(3600.0)
    m.flaky_tick(5, False)
    held = m.twins.job("d003")
    assert held is not None and held.depends_on  # the faulty look could not release it
    looked = m.clean_sweep
    m.slow_drain_tick(None)
    assert m.clean_sweep == looked  # the tick at the same instant makes no look
    m.advance(61.0)
    m.slow_drain_tick(None)
    released = m.twins.job("d003")
    assert released is not None and not released.depends_on
    m.holds()
