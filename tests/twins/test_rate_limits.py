"""Rate limits: token buckets every task shares (``longjobs limits set``), taken as a bundle
launches (no task starts to wait for a token) and by a running job's ``ctx.acquire``; in any
window no bucket grants more than rate x window + burst."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.domain import rate_limits
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.errors import Interrupted, InvalidMessage
from dispatcher.domain.jobs import Priority
from dispatcher.domain.rate_limits import RateLimit, RateLimitProblem
from dispatcher.domain.waiting import RATE_LIMIT
from dispatcher.ops.queries import Queries
from dispatcher.stages.tick_tokens import TickTokens
from dispatcher.store import Store, codec
from dispatcher.store.rate_buckets import RateLimitError
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from job_runner.tokens import Tokens, TokensNotGranted
from tests.twins import Twins
from tests.twins.test_follow_ons import run


class Grants:
    """Every grant a store's takes made: (time, bucket, tokens)."""

    def __init__(self, store: Store) -> None:
        self.seen: list[tuple[float, str, float]] = []
        take = store.take

        def spy(bucket: str, shard: int, n: float, limit: RateLimit, now: float,
                known: float | None) -> float | None:
            got = take(bucket, shard, n, limit, now, known)
            if got is not None:
                self.seen.append((now, bucket, n))
            return got

        store.take = spy  # type: ignore[method-assign]

    def most(self, bucket: str, window: float) -> float:
        return rate_limits.most_in_window(
            [(t, n) for t, b, n in self.seen if b == bucket], window)


def test_a_rate_reads_as_tokens_a_second_and_bad_ones_say_the_form() -> None:
    assert rate_limits.parse_rate("100/min") == (pytest.approx(100 / 60), "100/min")
    assert rate_limits.parse_rate("3/10s")[0] == pytest.approx(0.3)
    assert rate_limits.parse_rate("1000/hour")[0] == pytest.approx(1000 / 3600)
    for bad in ("100", "100/fortnight", "-1/s", "x/y"):
        with pytest.raises(RateLimitProblem, match="such as 100/min"):
            rate_limits.parse_rate(bad)
    with pytest.raises(RateLimitProblem, match="above 0"):
        rate_limits.parse_rate("0/s")


@settings(max_examples=200, deadline=None)
@given(rate=st.sampled_from([0.5, 1.0, 5.0, 100 / 60]), burst=st.integers(1, 20),
       shards=st.integers(1, 4),
       takes=st.lists(st.tuples(st.floats(0, 120), st.integers(1, 5)), min_size=1,
                      max_size=200),
       window=st.sampled_from([1.0, 10.0, 60.0]))
def test_no_window_ever_grants_more_than_rate_times_window_plus_burst(
        rate: float, burst: int, shards: int, takes: list[tuple[float, int]],
        window: float) -> None:
    """Any takes, at any times, on any shards, through the table's two conditional writes:
    the grants of any window stay within the bound; an idle bucket grants a whole burst at
    once."""
    if burst < shards:
        burst = shards
    limit = RateLimit(rate, float(burst), shards)
    table = MemoryTable()
    store = Store(table)
    grants = Grants(store)
    for i, (at, n) in enumerate(sorted(takes)):
        store.take("api", i % shards, n, limit, at, None)
    assert grants.most("api", window) <= limit.bound(window) + 1e-6
    fresh = Store(MemoryTable())
    assert all(fresh.take("b", s, limit.shard_burst, limit, 0.0, None) is not None
               for s in range(shards))


@pytest.mark.parametrize("burst", [2, 4, 7, 9, 12, 14, 20])
def test_a_whole_burst_is_granted_at_todays_epoch(burst: int) -> None:
    """At times near today's epoch (floats exact to about 2.4e-7 s), a take of exactly a
    burst from an idle bucket is granted, by the rule and by the table's writes alike, and
    the next token is refused."""
    now = 1.7e9 + 0.123
    limit = RateLimit(100 / 60, float(burst))
    assert rate_limits.grant(None, now, burst, limit) is not None
    assert rate_limits.ready_at(None, now, burst, limit) == now
    store = Store(MemoryTable())
    assert store.take("api", 0, burst, limit, now, None) is not None
    assert store.take("api", 0, 1, limit, now, now + burst * limit.interval) is None


def test_two_takers_racing_on_one_shard_never_pass_its_burst() -> None:
    """Each take's condition sees the other's write: twenty takers, each believing the bucket
    idle, at one instant: no more than the burst is granted."""
    limit = RateLimit(1.0, 5.0)
    store = Store(MemoryTable())
    granted = [store.take("api", 0, 1, limit, 100.0, None) for _ in range(20)]
    assert sum(g is not None for g in granted) == 5
    later = [store.take("api", 0, 1, limit, 102.0, 99.0) for _ in range(5)]
    assert sum(g is not None for g in later) == 2  # two seconds' worth came since


def test_limits_are_set_listed_changed_and_removed_with_clear_refusals() -> None:
    tw = Twins()
    client = tw.client()
    set_ = client.set_limit("openai", "100/min", burst=20)
    assert set_.rate == pytest.approx(100 / 60) and set_.burst == 20 and set_.shards == 1
    assert client.set_limit("fast", "1000/s").shards == 4  # one shard per 250 a second
    assert set(client.limits()) == {"openai", "fast"}
    wider = client.set_limit("openai", burst=40)  # what is not given stays
    assert wider.rate == pytest.approx(100 / 60) and wider.burst == 40 and wider.said == "100/min"
    with pytest.raises(RateLimitProblem, match="--rate 100/min"):
        client.set_limit("new")
    assert client.set_limit("huge", "100000/s").burst == rate_limits.MAX_BURST
    client.delete_limit("huge")
    client.delete_limit("fast")
    assert set(client.limits()) == {"openai"}
    with pytest.raises(RateLimitError, match="no limit 'fast'"):
        client.delete_limit("fast")
    with pytest.raises(RateLimitError, match="raise --burst"):
        client.set_limit("x", "10/s", burst=1, shards=2)
    with pytest.raises(RateLimitProblem, match="100/min"):
        client.set_limit("x", "lots")
    with pytest.raises(RateLimitError, match="limit key"):
        client.set_limit("bad key!", "1/s")


def test_a_job_names_what_it_uses_within_bounds() -> None:
    tw = Twins()
    client = tw.client()
    client.submit("k", {}, job_id="ok", uses={"openai:{tenant}": 2}, tenant="acme")
    for bad in ({"openai": 0}, {"bad key!": 1}, {f"k{i}": 1 for i in range(5)},
                {"openai": True}, {"openai": "1"}):
        with pytest.raises(InvalidMessage):
            client.submit("k", {}, job_id="bad", uses=bad)


def test_a_bundle_launches_only_once_its_tokens_are_granted_and_its_jobs_say_why() -> None:
    """Ten jobs of one token each on a limit of 6/min with a burst of 2, four slots: each tick
    launches what the bucket holds (two at first, then one every ten seconds), never a task to
    wait; the others say ``rate_limit`` with the bucket and when its tokens come. Another
    tenant's jobs on ``{tenant}`` keys have a bucket of their own; a key with no limit set
    holds nothing back. Every job runs once."""
    tw = Twins()
    client = tw.client()
    client.set_limit("api", "6/min", burst=2)
    client.set_limit("per:{tenant}", "1/min", burst=1)
    ids = [f"j{i}" for i in range(10)]
    for j in ids:
        client.submit("k", {}, job_id=j, uses={"api": 1}, estimated_seconds=1.0)
    client.submit("k", {}, job_id="free", uses={"unset": 5}, estimated_seconds=1.0)
    for t in ("a", "b"):
        client.submit("k", {}, job_id=f"t{t}", uses={"per:{tenant}": 1}, tenant=t,
                      estimated_seconds=1.0)
    grants = Grants(tw.store)
    stages = tw.stages(LONGJOBS_MAX_RUNNING_TASKS="20", LONGJOBS_TASK_CONCURRENCY="1")
    ran: list[str] = []
    stages.tick.tick()  # its drain launches what the buckets hold
    tw.clock.advance(1)
    stages.tick.tick()
    launched = {j for b in tw.store.active_bundles() for j in b.job_ids}
    assert {"free", "ta", "tb"} <= launched
    assert len([j for j in launched if j in ids]) == 2
    shown = Queries(tw.store, clock=tw.clock)
    waits = [shown.show(j).summary.waiting_for for j in ids if j not in launched]
    assert waits and all(w is not None and w.reason == RATE_LIMIT and w.key == "api"
                         and w.until is not None and w.until > tw.clock() for w in waits)
    # Once that time has passed (no tick since), the job no longer says its tokens hold it:
    # the next tick launches it as any due work.
    until = max(w.until for w in waits if w is not None and w.until is not None)
    later = Queries(tw.store, clock=lambda: until + 1.0)
    held = [j for j in ids if j not in launched]
    assert all(later.show(j).summary.waiting_for.reason != RATE_LIMIT  # type: ignore[union-attr]
               for j in held)
    for _ in range(12):
        for arn in tw.task_arns():
            ran += run(tw, arn)
        tw.clock.advance(10)
        stages.tick.tick()
    for arn in tw.task_arns():
        ran += run(tw, arn)
    assert sorted(set(ran)) == sorted([*ids, "free", "ta", "tb"]) and len(ran) == len(set(ran))
    assert {b for _, b, _ in grants.seen} == {"api", "per:{a}", "per:{b}"}
    limit = client.limits()["api"]
    for window in (1.0, 10.0, 60.0):
        assert grants.most("api", window) <= limit.bound(window)


def test_a_bundle_that_takes_tokens_holds_no_more_jobs_than_start_at_once() -> None:
    """Its launch takes its jobs' tokens at once: no more jobs than its task starts at once,
    nor than one take can have (the burst)."""
    tw = Twins()
    client = tw.client()
    client.set_limit("api", "100/s", burst=100)
    client.set_limit("narrow", "1/min", burst=5)
    for i in range(9):
        client.submit("k", {}, job_id=f"j{i}", uses={"api": 2}, estimated_seconds=1.0)
    for i in range(5):
        client.submit("k", {}, job_id=f"n{i}", uses={"narrow": 2}, estimated_seconds=1.0)
    stages = tw.stages(LONGJOBS_MAX_RUNNING_TASKS="20", LONGJOBS_TASK_CONCURRENCY="4")
    stages.tick.tick()
    tw.clock.advance(1)
    stages.tick.tick()
    bundles = tw.store.active_bundles()
    assert all(rate_limits.takes_tokens(b.bundle_id) for b in bundles)
    full = tw.store.bundles_of([b.bundle_id for b in bundles])
    assert sorted(len(b.job_ids) for b in full if "api" in (b.uses or {})) == [1, 4, 4]
    assert sorted((b.uses or {}).get("api", 0) for b in full if b.uses and "api" in b.uses) \
        == [2, 8, 8]  # four start at once: 8 tokens, within half the burst of 100
    # Half a burst of 5 holds one job of 2 tokens: the burst launches two such bundles (4
    # tokens); the rest wait for its tokens (one a minute).
    assert [len(b.job_ids) for b in full if "narrow" in (b.uses or {})] == [1, 1]


def test_a_take_larger_than_the_burst_waits_saying_what_to_change() -> None:
    tw = Twins()
    client = tw.client()
    client.set_limit("api", "10/s", burst=2)
    client.submit("k", {}, job_id="big", uses={"api": 5}, estimated_seconds=1.0)
    stages = tw.stages(LONGJOBS_TASK_CONCURRENCY="1")
    stages.tick.tick()
    tw.clock.advance(1)
    stages.tick.tick()
    assert not tw.store.active_bundles()
    said = Queries(tw.store, clock=tw.clock).show("big").summary.waiting_for
    assert said is not None and said.reason == RATE_LIMIT and said.until is None
    assert said.detail is not None and "longjobs limits set api --burst 5" in said.detail


def _tokens(store: Store, clock: list[float]) -> Tokens:
    return Tokens(store, clock=lambda: clock[0], pick=lambda n: 0)


def test_acquire_takes_waits_times_out_and_ends_on_cancel() -> None:
    """A running job's acquire: at once while the bucket holds tokens; a wait for the next
    when it does not; a typed error past its timeout; ``Interrupted`` as soon as the job is
    cancelled; nothing for a key with no limit; an error naming the fix for more than the
    burst."""
    store = Store(MemoryTable())
    store.set_rate_limit("api", RateLimit(rate=20.0, burst=2.0, said="20/s"))
    now = [1000.0]
    tokens = _tokens(store, now)
    store.set_rate_limit("slow", RateLimit(rate=1 / 60, burst=1.0, said="1/min"))
    never = threading.Event()

    def acquire(n: int = 1, timeout: float | None = 5.0, cancel: Any = never) -> bool:
        return tokens.acquire("api", n, tenant=None, job_id="j", timeout=timeout,
                              cancel=cancel)

    assert acquire() and acquire()  # the burst
    ticking = threading.Event()

    def advance() -> None:  # the clock moves while the acquire sleeps (real 50 ms)
        while not ticking.wait(0.01):
            now[0] += 0.01

    mover = threading.Thread(target=advance, daemon=True)
    mover.start()
    assert acquire()  # granted once the next token came (1/20 s later)
    ticking.set()
    mover.join()
    # A bucket of one token a minute, its token taken; the clock stands from here.
    assert tokens.acquire("slow", 1, tenant=None, job_id="j", timeout=0.0, cancel=never)
    with pytest.raises(TokensNotGranted, match="within 0 s"):
        tokens.acquire("slow", 1, tenant=None, job_id="j", timeout=0.0, cancel=never)
    stop = threading.Event()
    stop.set()
    with pytest.raises(Interrupted):
        tokens.acquire("slow", 1, tenant=None, job_id="j", timeout=None, cancel=stop)
    assert tokens.acquire("unset", 1, tenant=None, job_id="j", timeout=1.0,
                          cancel=never) is False
    with pytest.raises(TokensNotGranted, match="--burst 3"):
        acquire(3)


def test_a_handler_acquires_through_its_context_in_a_runner() -> None:
    """``ctx.acquire`` in a handler run by a task's runner takes from the bucket the launches
    take from (its tenant's, for a ``{tenant}`` key)."""
    tw = Twins()
    client = tw.client()
    client.set_limit("db:{tenant}", "10/s", burst=3)
    client.submit("k", {}, job_id="j", tenant="acme", estimated_seconds=1.0)
    stages = tw.stages(LONGJOBS_TASK_CONCURRENCY="1")
    stages.tick.tick()
    took: list[bool] = []

    def handler(payload: dict[str, object], ctx: Any) -> None:
        took.extend(ctx.acquire("db:{tenant}", 1) for _ in range(3))
        took.append(ctx.acquire("unset"))

    from job_runner.kinds import HandlerRegistry
    from job_runner.worker import Worker
    from tests.twins.test_follow_ons import RUNNER
    Worker(RUNNER, tw.store, HandlerRegistry({"k": handler}), tw.task_arns()[0]).run()
    assert took == [True, True, True, False]
    item = tw.table.snapshot()[codec.bucket_key("db:{acme}", 0)]
    assert item.bucket_at is not None and item.bucket_at > tw.clock()


def test_a_launch_costs_one_conditional_write_per_key_and_jobs_without_uses_none() -> None:
    """Counted: each launched bundle that takes tokens wrote its bucket once per key (the take
    the look chose the form of); a tick with no such bundle touches no limit or bucket."""
    tw = Twins()
    client = tw.client()
    client.set_limit("a", "100/s", burst=100)
    client.set_limit("b", "100/s", burst=100)
    for i in range(6):
        client.submit("k", {}, job_id=f"j{i}", uses={"a": 1, "b": 2}, estimated_seconds=1.0)
    for i in range(6):
        client.submit("k", {}, job_id=f"plain{i}", estimated_seconds=1.0)
    writes: list[str] = []
    write = tw.table.write

    def counted_write(op: Any) -> Any:
        writes.append(op.pk)
        return write(op)

    tw.table.write = counted_write  # type: ignore[method-assign]
    stages = tw.stages(LONGJOBS_MAX_RUNNING_TASKS="20", LONGJOBS_TASK_CONCURRENCY="2")
    stages.tick.tick()
    marked = [b for b in tw.store.active_bundles() if rate_limits.takes_tokens(b.bundle_id)]
    assert len(marked) == 3  # two jobs a bundle
    bucket_writes = [pk for pk in writes if pk.startswith("BUCKET#")]
    assert len(bucket_writes) == 2 * len(marked)  # one per key per launch
    # Jobs that take no tokens: a tick that launches only them reads no limit or bucket.
    tw2 = Twins()
    tw2.client().submit("k", {}, job_id="p", estimated_seconds=1.0)
    seen: list[str] = []
    get2, write2 = tw2.table.get, tw2.table.write
    tw2.table.get = lambda pk: (seen.append(pk), get2(pk))[1]  # type: ignore[method-assign]
    tw2.table.write = lambda op: (seen.append(op.pk), write2(op))[1]  # type: ignore
    tw2.stages().tick.tick()
    assert not [pk for pk in seen if pk.startswith(("LIMIT#", "BUCKET#"))]


def test_jobs_held_for_tokens_hide_no_other_work() -> None:
    """A key of one token an hour, and 300 jobs of it ahead of plain ones, due and queued:
    the held ones take no slot of the drain's and the due read pages past them, so the plain
    jobs launch at the next tick."""
    tw = Twins()
    client = tw.client()
    client.set_limit("slow", "1/hour", burst=1)
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"s{i:03d}",
                         "uses": {"slow": 1}, "estimated_seconds": 600.0}
                        for i in range(300)])
    stages = tw.stages(LONGJOBS_MAX_RUNNING_TASKS="10", LONGJOBS_TASK_CONCURRENCY="1")
    stages.tick.tick()  # records them all: one launches (the hour's token), the rest wait
    assert len(tw.store.active_bundles()) == 1
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"p{i}",
                         "estimated_seconds": 600.0} for i in range(5)])
    tw.clock.advance(60)
    stages.tick.tick()
    running = {j for b in tw.store.active_bundles() for j in b.job_ids}
    assert {f"p{i}" for i in range(5)} <= running and len(running) == 6
    said = Queries(tw.store, clock=tw.clock).show("s299").summary.waiting_for
    assert said is not None and said.reason == RATE_LIMIT and said.key == "slow"


def _token_bundle(n: int, tokens: int) -> Bundle:
    return Bundle(bundle_id=rate_limits.marked(f"b{n}"), job_ids=[f"j{n}"],
                  uses={"api": tokens}, created_at=0.0, next_attempt_at=0.0)


def test_the_tick_keeps_what_it_can_grant_in_order_and_holds_only_what_follows() -> None:
    """Three tokens in the bucket: of bundles needing 1, 1, 5 and 1 in that order, the look
    keeps the first two (the third is short, and the fourth waits behind it, in order), and
    any slice of what it kept is granted; the one held says when its tokens come. A bundle
    held does not hold those before it in a later look."""
    store = Store(MemoryTable())
    limit = RateLimit(rate=1.0, burst=10.0, said="1/s")
    store.set_rate_limit("api", limit)
    now = 1.7e9
    assert store.take("api", 0, 7, limit, now, None) is not None  # 3 of 10 left
    tokens = TickTokens(store, lambda: now)
    a, b, z, c = (_token_bundle(0, 1), _token_bundle(1, 1), _token_bundle(2, 5),
                  _token_bundle(3, 1))
    kept = tokens.admit([a, b, z, c])
    assert kept == [a, b]
    assert tokens.admit([a]) == [a]  # held in the look before, not ahead of z in this one
    assert tokens.take([a, b]) == [a, b]
    wait = tokens.waits()["api"]  # as the tick ends: z first held, its 5 tokens in 4 s
    assert wait.need == 5 and wait.at == pytest.approx(now + 4.0)
    assert tokens.take([c]) == [c]  # the third token: c was held behind z in that look only
    d = _token_bundle(4, 1)
    assert tokens.admit([d]) == [] and tokens.take([d]) == []  # none left


def test_a_look_keeps_no_more_than_the_bucket_can_grant_so_the_rest_goes_to_other_work() -> None:
    """One token left and two bundles of one token each, then a plain bundle: the look keeps
    one of the two and the plain one, so every slot it fills launches."""
    store = Store(MemoryTable())
    limit = RateLimit(rate=1 / 3600, burst=2.0, said="1/hour")
    store.set_rate_limit("api", limit)
    now = 1.7e9
    assert store.take("api", 0, 1, limit, now, None) is not None
    tokens = TickTokens(store, lambda: now)
    a, b = _token_bundle(0, 1), _token_bundle(1, 1)
    plain = Bundle(bundle_id="plain", job_ids=["p"], created_at=0.0, next_attempt_at=0.0)
    kept = tokens.admit([a, b, plain])
    assert kept == [a, plain]
    assert tokens.take(kept[:2]) == [a, plain]


def test_a_drain_of_token_jobs_on_several_queues_reads_the_limits_once() -> None:
    """Jobs that take tokens on the normal queue and on the low one's: the drain's levels
    share one read of the limits (the tick's own look at the buckets reads them once more)."""
    tw = Twins()
    low = MemoryQueue(clock=tw.clock)
    tw.priority_queues[Priority.LOW] = low
    tw.client().set_limit("api", "60/min", burst=60)
    client = tw.client(queues={Priority.NORMAL: tw.queue, Priority.LOW: low})
    for priority in ("normal", "low"):
        client.submit_many([{"kind": "k", "payload": {}, "job_id": f"{priority}{i}",
                                  "priority": priority, "uses": {"api": 1}}
                                 for i in range(3)])
    reads: list[int] = []
    real = tw.store.rate_limits

    def counted() -> dict[str, RateLimit]:
        reads.append(1)
        return real()

    tw.store.rate_limits = counted  # type: ignore[method-assign]
    tw.stages().tick.tick()
    assert tw.queue_counts() == (0, 0) and low.backlog().visible == 0
    assert len(reads) == 2, f"{len(reads)} reads of the limits in one tick"
    assert {j.job_id for j in tw.jobs()} >= {"normal0", "low0"}
