"""A dependency's end releases its dependents through their links, without reading the jobs
that wait: what one end costs does not grow with how many wait, a tick reads none of them,
and what a link cannot see (a dependency recorded after its dependent) the look at every held
dependent finds within its period."""

from __future__ import annotations

from collections import Counter
from typing import Any

from dispatcher.domain.job_events import TableChange
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.lifecycle import DEPENDENTS_HELD_AT
from dispatcher.ports.record import Record
from dispatcher.ports.table import Put, TableUnavailable
from dispatcher.stages.dependents import SWEEP_RETRY_SECONDS, SWEEP_SECONDS, Dependents
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.testing.ended_jobs_feed import EndedJobsFeed
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins
from tests.twins.test_array_jobs import run_launched

FAR = 4_000_000_000.0  # a not_before no test reaches: recorded, never launched


class ReadCountingTable(MemoryTable):
    """Counts the items read (gets, batch gets) and the index partitions queried."""

    def __init__(self) -> None:
        super().__init__()
        self.items_read: Counter[str] = Counter()  # by key prefix
        self.queried: list[str] = []
        self.ranges: list[tuple[str, str | None, str | None]] = []  # key, at_least, at_most

    def get(self, pk: str) -> Record | None:
        self.items_read[pk.split("#", 1)[0]] += 1
        return super().get(pk)

    def get_many(self, pks: list[str]) -> list[Record]:
        self.items_read.update(pk.split("#", 1)[0] for pk in pks)
        return super().get_many(pks)

    def query(self, status_key: str, **kwargs: Any) -> list[Record]:
        self.queried.append(status_key)
        self.ranges.append((status_key, kwargs.get("at_least"), kwargs.get("at_most")))
        return super().query(status_key, **kwargs)

    def read_held_dependents(self) -> bool:
        """Whether a query reached the held dependents' bundles."""
        held = r.iso(DEPENDENTS_HELD_AT)
        return any(key == r.bundle_status("PENDING") and (low is None or low <= held)
                   and (high is None or high >= held) for key, low, high in self.ranges)

    def reset(self) -> None:
        self.items_read.clear()
        self.queried.clear()
        self.ranges.clear()


def counting_twins() -> tuple[Twins, ReadCountingTable]:
    tw = Twins()
    table = ReadCountingTable()
    tw.table, tw.store = table, Store(table, clock=tw.clock)
    tw.feed = EndedJobsFeed(table)
    return tw, table


def record_all(tw: Twins, **env: str) -> None:
    for _ in range(60):
        tw.stages(**env).tick.tick()
        if tw.queue_counts() == (0, 0):
            return
    raise AssertionError("the queue never drained")


def test_an_end_releases_its_dependent_at_a_cost_that_ignores_how_many_wait() -> None:
    """1,000 jobs wait, each for a job of its own (kind ``a``, one running at a time). A tick
    reads none of them (no held dependent's item, no query of the held bundles); one
    dependency's end releases its one dependent with a query of its links and a read of the
    dependent, its bundle and its dependency, and the next tick launches it."""
    tw, table = counting_twins()
    n = 1000
    env = {"LONGJOBS_KIND_LIMITS": "a=1"}
    client = tw.client()
    client.submit_many([{"kind": "a", "payload": {}, "job_id": f"a{i}",
                         "estimated_seconds": 3000} for i in range(n)])
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"d{i}", "estimated_seconds": 1,
                         "depends_on": [f"a{i}"]} for i in range(n)])
    record_all(tw, **env)
    a7 = tw.job("a7")
    assert a7 is not None and a7.waiters == 1
    held = [j for j in tw.jobs() if j.job_id.startswith("d") and j.state == JobState.PENDING]
    assert len(held) == n

    tw.clock.advance(60)  # within the look's period: a tick as most are
    table.reset()
    tw.stages(**env).tick.tick()
    assert table.items_read["JOB"] == 0
    assert not table.read_held_dependents()

    # One dependency ends (an operator cancels it): its dependent is cancelled with the reason.
    client.cancel("a3")
    table.reset()
    stats = tw.flow()
    assert stats.dependents_cancelled_ids == ["d3"]
    d3 = tw.job("d3")
    assert d3 is not None and d3.state == JobState.CANCELLED
    assert d3.reason == "its dependency a3 ended CANCELLED; it needed succeeded"
    assert table.queried == [r.waiters_status("a3")]
    assert sum(table.items_read.values()) <= 4  # the dependent, its bundle, its dependency

    # The one running succeeds: its dependent is due at once, launched by the next tick.
    ran: Counter[str] = Counter()
    run_launched(tw, lambda job: JobState.SUCCEEDED, ran)  # delivers the stream after it
    (first,) = ran
    dependent = "d" + first[1:]
    job = tw.job(dependent)
    assert job is not None and job.depends_on is None  # released: due now
    ran.clear()
    tw.stages(**env).tick.tick()
    run_launched(tw, lambda job: JobState.SUCCEEDED, ran)
    assert ran[dependent] == 1
    assert len([j for j in tw.jobs() if j.job_id.startswith("d")
                and j.state == JobState.PENDING]) == n - 2


def _put(rec: Record) -> Put:
    return Put(rec)


def test_a_dependency_that_ended_before_its_dependent_was_recorded_releases_it_at_once(
        twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", estimated_seconds=1)
    twins.stages().tick.tick()
    run_launched(twins)
    client.submit("k", {}, job_id="b", depends_on=["a"], estimated_seconds=1)
    report = twins.stages().tick.tick()
    assert report.intake.dependents_released == 1
    b = twins.job("b")
    assert b is not None and b.depends_on is None  # due: launched by the next tick
    twins.stages().tick.tick()
    ran: Counter[str] = Counter()
    run_launched(twins, ran=ran)
    assert ran == Counter({"b": 1})


def test_a_chain_is_cancelled_link_by_link_with_each_reason(twins: Twins) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="a", estimated_seconds=1, max_attempts=1)
    client.submit("k", {}, job_id="b", depends_on=["a"], estimated_seconds=1)
    client.submit("k", {}, job_id="c", depends_on=["b"], estimated_seconds=1)
    twins.stages().tick.tick()
    ran: Counter[str] = Counter()
    run_launched(twins, lambda job: JobState.FAILED, ran)  # a fails; its end cancels b
    twins.flow()  # b's cancel is an end too: c follows
    b, c = twins.job("b"), twins.job("c")
    assert b is not None and b.state == JobState.CANCELLED
    assert b.reason == "its dependency a ended FAILED; it needed succeeded"
    assert c is not None and c.state == JobState.CANCELLED
    assert c.reason == "its dependency b ended CANCELLED; it needed succeeded"
    assert ran == Counter({"a": 1})


def test_a_dependency_recorded_after_its_dependent_is_found_by_the_next_look(
        twins: Twins) -> None:
    """SQS keeps no order between two messages: the dependent may be recorded first, when its
    dependency cannot be linked yet. The look at every held dependent links it once the
    dependency exists; its end then releases the dependent."""
    client = twins.client()
    client.cfg = client.cfg.__class__(**{**vars(client.cfg), "table": ""})  # sends only
    client.submit("k", {}, job_id="b", depends_on=["a"], estimated_seconds=1)
    stages = twins.stages()
    stages.tick.tick()  # b recorded, held; a unknown: no link
    client.submit("k", {}, job_id="a", estimated_seconds=1)
    stages.tick.tick()
    a = twins.job("a")
    assert a is not None and a.waiters == 0
    twins.clock.advance(SWEEP_SECONDS + 1)
    report = stages.tick.tick()  # the look: b linked to a now (a launched by this tick too)
    assert report.reconcile.swept == 1
    a = twins.job("a")
    assert a is not None and a.waiters == 1
    run_launched(twins)  # a succeeds; its end releases b
    b = twins.job("b")
    assert b is not None and b.depends_on is None and b.state == JobState.PENDING


def test_a_redelivered_dependent_is_linked_once() -> None:
    tw, _ = counting_twins()
    client = tw.client()
    client.submit("k", {}, job_id="a", estimated_seconds=1, not_before=FAR)
    tw.stages().tick.tick()
    for _ in range(2):
        tw.store.link("b", ["a"])
    a: Job | None = tw.job("a")
    assert a is not None and a.waiters == 1
    assert tw.store.waiting_for("a") == ["b"]


def test_an_end_whose_links_the_index_does_not_show_yet_is_left_to_the_look(
        twins: Twins) -> None:
    """The index is eventually consistent: an end read with fewer links than its waiters
    says is counted, and the look at every held dependent releases what it missed."""
    change = TableChange("1", {"pk": "JOB#a", "state": "PENDING", "waiters": 2},
                         {"pk": "JOB#a", "state": "SUCCEEDED", "waiters": 2})
    twins.table.write(_put(Record("WAIT#a#x", status_key=r.waiters_status("a"),
                                  status_at=r.iso(twins.clock()), job_id="x")))
    stats = Dependents(twins.store, twins.clock).on_changes([change])
    assert stats.links_missing == 1 and stats.released == []


def test_a_table_that_refuses_the_look_fails_no_tick(twins: Twins) -> None:
    """The look at every held dependent is the backstop: when the table refuses it, the tick
    goes on (its other work done) and a later tick looks."""
    client = twins.client()
    client.submit("k", {}, job_id="a", estimated_seconds=1, not_before=FAR)
    client.submit("k", {}, job_id="b", depends_on=["a"], estimated_seconds=1)
    twins.stages().tick.tick()

    def refused(every: float) -> float | None:
        raise TableUnavailable("PutItem", "ProvisionedThroughputExceededException")

    twins.store.claim_sweep = refused  # type: ignore[method-assign]
    twins.clock.advance(SWEEP_SECONDS + 1)
    client.submit("k", {}, job_id="c", estimated_seconds=1)
    report = twins.stages().tick.tick()
    assert report.intake.admitted == 1 and report.reconcile.swept == 0
    c = twins.job("c")
    assert c is not None and c.bundle_id  # the tick did the rest of its work


def test_a_dependency_at_the_item_limit_is_waited_for_without_a_link(twins: Twins) -> None:
    """The job waited for is a hair under DynamoDB's 400 KB (a large checkpoint): its count of
    waiters cannot grow, so no link is made, at the record or at the look. No tick fails for
    it; the look at every held dependent judges the dependent once that job has ended."""
    from dispatcher.ports.table import Remove, Set, Update
    from tests.model_checks import checkpoint_near_limit

    client = twins.client()
    client.submit("k", {}, job_id="a", estimated_seconds=1, not_before=FAR)
    twins.stages().tick.tick()
    twins.table.write(Update(r.job_key("a"), [Set("checkpoint", checkpoint_near_limit(
        twins.table, "a", 2))]))
    client.submit("k", {}, job_id="b", depends_on=["a"], estimated_seconds=1)
    twins.stages().tick.tick()  # b recorded and held; linking it to a is refused
    twins.clock.advance(SWEEP_SECONDS + 1)
    report = twins.stages().tick.tick()  # the look links again: refused again, tick goes on
    assert report.reconcile.swept == 1
    a, b = twins.job("a"), twins.job("b")
    assert a is not None and a.waiters == 0 and twins.store.waiting_for("a") == []
    assert b is not None and b.state == JobState.PENDING and b.depends_on
    twins.table.write(Update(r.job_key("a"), [Remove("checkpoint")]))  # room for its end
    client.cancel("a")
    assert twins.flow().dependents_cancelled == 0  # no link: the stream's reader finds nobody
    twins.clock.advance(SWEEP_SECONDS + 1)
    report = twins.stages().tick.tick()  # the next look: b judged, a CANCELLED against it
    assert report.reconcile.dependents_cancelled_ids == ["b"]


class SweepWritesTable(MemoryTable):
    """Counts the writes made to the look's claim (SWEEP#dependents), refused ones too."""

    def __init__(self) -> None:
        super().__init__()
        self.sweep_writes = 0

    def write(self, op: Any) -> Record | None:
        if op.pk == r.SWEEP_KEY:
            self.sweep_writes += 1
        return super().write(op)


def test_the_ticks_between_two_looks_make_no_claim_the_table_would_refuse() -> None:
    """Each tick used to try the claim of the look at every held dependent, refused all but
    once a period: the lease now carries the claim's time from tick to tick, so the ticks in
    between write nothing for it; a look given back (the table failed it) comes again a
    minute on, as the claim's item says."""
    tw = Twins()
    table = SweepWritesTable()
    tw.table, tw.store = table, Store(table, clock=tw.clock)
    first = tw.stages().tick.tick()
    assert table.sweep_writes == 1 and first.reconcile.sweep_at == tw.clock()
    for _ in range(4):
        tw.clock.advance(60)
        assert tw.stages().tick.tick().reconcile.sweep_at == first.reconcile.sweep_at
    assert table.sweep_writes == 1
    tw.clock.advance(SWEEP_SECONDS - 4 * 60 + 1)
    stages = tw.stages()
    real = tw.store.held_dependents
    calls = 0

    def fails_once(among: list[str] | None = None) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TableUnavailable("Query", "ProvisionedThroughputExceededException")
        return real(among)

    tw.store.held_dependents = fails_once  # type: ignore[method-assign]
    claimed = tw.clock()
    assert stages.tick.tick().reconcile.sweep_at == claimed - SWEEP_SECONDS + SWEEP_RETRY_SECONDS
    assert table.sweep_writes == 3  # the claim, and its give-back
    tw.clock.advance(SWEEP_RETRY_SECONDS + 1)
    assert tw.stages().tick.tick().reconcile.sweep_at == tw.clock()  # looked again
    assert table.sweep_writes == 4 and calls == 2
