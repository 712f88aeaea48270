"""Tenants' shares of the task slots: weights, caps and reserves set in the table
(``longjobs tenants set``), the targets each tick sets from them, the caps every launch keeps,
and the slots a tenant past its share gives up at its tasks' bundle ends for the others."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import JobState, Priority
from dispatcher.domain.tenant_shares import (
    TenantLoad,
    TenantPolicy,
    policy_problem,
    sheds,
    targets,
)
from dispatcher.domain.waiting import FAIR_SHARE, FOLLOW_ON, BundleFacts, TickSummary, waiting_for
from dispatcher.ops.queries import Queries
from dispatcher.stages.due_work import DUE_LOOKAHEAD, DueWork, taking_tenants
from dispatcher.stages.policy import TickPolicy
from dispatcher.stages.tenant_slots import TenantSlots
from dispatcher.store import Store, codec
from dispatcher.store.tenant_policies import TenantPolicyError
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins
from tests.twins.test_array_jobs import run_bundle
from tests.twins.test_follow_ons import ENV, backlog, run

BUSY = TenantLoad(running=0, more=True)


def test_saturating_tenants_get_slots_by_weight() -> None:
    policies = {"a": TenantPolicy(weight=3), "b": TenantPolicy(weight=2)}
    assert targets(60, {"a": BUSY, "b": BUSY, "c": BUSY}, policies) == {"a": 30, "b": 20, "c": 10}


def test_a_cap_and_a_short_demand_leave_their_slots_to_the_others() -> None:
    policies = {"a": TenantPolicy(max_running=5), "b": TenantPolicy(weight=2)}
    short = TenantLoad(running=1, waiting=2)  # three slots of work, no more
    got = targets(60, {"a": BUSY, "b": BUSY, "c": short, "d": BUSY}, policies)
    assert got["a"] == 5 and got["c"] == 3 and sum(got.values()) == 60
    assert got["b"] == 2 * got["d"] or abs(got["b"] - 2 * got["d"]) <= 2


def test_a_reserve_comes_first_and_weight_zero_only_takes_what_is_left() -> None:
    policies = {"r": TenantPolicy(reserve=15), "w": TenantPolicy(weight=5),
                "z": TenantPolicy(weight=0)}
    got = targets(20, {"r": BUSY, "w": BUSY, "z": BUSY}, policies)
    assert got == {"r": 15, "w": 5, "z": 0}
    got = targets(20, {"w": TenantLoad(waiting=4), "z": BUSY}, policies)
    assert got == {"w": 4, "z": 16}  # work-conserving: the rest to weight 0


@given(slots=st.integers(0, 80), loads=st.dictionaries(
    st.sampled_from("abcdefgh"),
    st.tuples(st.integers(0, 30), st.integers(0, 30), st.booleans(),
              st.floats(0, 1000), st.floats(0, 5), st.none() | st.integers(0, 20),
              st.integers(0, 10)), max_size=8))
def test_targets_keep_every_promise(slots: int, loads: dict[str, tuple]) -> None:  # type: ignore[type-arg]
    """The slots targeted are all the slots the demands can fill (work-conserving); no
    tenant past its demand or cap; reserves held when they fit; every tenant with work and a
    weight above 0 gets a slot when the slots left by the reserves are at least those
    tenants."""
    policies = {t: TenantPolicy(weight=round(w, 2), max_running=cap,
                                reserve=min(r, cap) if cap is not None else r)
                for t, (_, _, _, _, w, cap, r) in loads.items()}
    tl = {t: TenantLoad(run, wait, more, use) for t, (run, wait, more, use, *_) in loads.items()}
    got = targets(slots, tl, policies)

    def want(t: str) -> int:
        d = slots if tl[t].more else tl[t].running + tl[t].waiting
        cap = policies[t].max_running
        return min(d, slots, cap if cap is not None else slots)

    assert sum(got.values()) == min(slots, sum(want(t) for t in tl))
    assert all(got[t] <= want(t) for t in tl)
    reserves = {t: min(policies[t].reserve, want(t)) for t in tl}
    if sum(reserves.values()) <= slots:
        assert all(got[t] >= reserves[t] for t in tl)
    eager = [t for t in tl if want(t) > 0 and policies[t].weight > 0]
    if len(eager) + sum(reserves.values()) <= slots:
        assert all(got[t] >= 1 for t in eager)


def test_sheds_free_what_runs_past_a_cap_and_what_others_want() -> None:
    assert sheds({"a": 40, "b": 20}, {"a": 30, "b": 30}, {}, 10) == {"a": 10}
    assert sheds({"a": 40, "b": 20}, {"a": 30, "b": 30}, {}, 0) == {}
    capped = {"a": TenantPolicy(max_running=35)}
    assert sheds({"a": 40, "b": 20}, {"a": 35, "b": 25}, capped, 0) == {"a": 5}
    assert sheds({"a": 30, "b": 25, "c": 5}, {"a": 25, "b": 20, "c": 15}, {}, 10) == \
        {"a": 5, "b": 5}


@pytest.mark.parametrize(("settings", "why"), [
    ({"weight": -1.0}, "weight"), ({"weight": 1e9}, "weight"),
    ({"max_running": -1}, "max_running"), ({"reserve": 5, "max_running": 2}, "reserve")])
def test_a_bad_policy_is_refused_with_its_reason(settings: dict[str, float], why: str) -> None:
    problem = policy_problem(settings.get("weight"), settings.get("max_running"),  # type: ignore[arg-type]
                             settings.get("reserve"))  # type: ignore[arg-type]
    assert problem is not None and why in problem
    tw = Twins()
    with pytest.raises(TenantPolicyError, match=why):
        tw.store.set_tenant_policy("acme", **settings)  # type: ignore[arg-type]


def test_a_policy_changes_only_what_is_given_and_resets() -> None:
    tw = Twins()
    tw.store.set_tenant_policy("acme", weight=3, max_running=20, reserve=5)
    assert tw.store.set_tenant_policy("acme", reserve=2) == TenantPolicy(3, 20, 2)
    assert tw.store.set_tenant_policy("acme", no_cap=True) == TenantPolicy(3, None, 2)
    tw.store.set_tenant_policy("acme", reset=True)
    assert tw.store.tenant_policies() == {}


def test_a_tenants_cap_holds_on_every_launch_and_its_jobs_say_why_they_wait() -> None:
    """Jobs of hours, each its own task: acme's cap of 2 holds at the drain's launches and
    the due work's; the other tenant gets the slots acme may not take, and acme's jobs past
    its cap wait for it (``fair_share``), not for a slot."""
    tw = Twins()
    tw.store.set_tenant_policy("acme", max_running=2)
    client = tw.client()
    for i in range(5):
        client.submit("k", {}, job_id=f"a{i}", tenant="acme", estimated_seconds=3600)
    for i in range(2):
        client.submit("k", {}, job_id=f"o{i}", tenant="other", estimated_seconds=3600)
    stages = tw.stages(LONGJOBS_MAX_RUNNING_TASKS="6")
    for _ in range(3):
        stages.tick.tick()
        running = Counter(b.tenant for b in tw.store.active_bundles())
        assert running["acme"] <= 2
        tw.clock.advance(60)
    assert running == {"acme": 2, "other": 2}
    shown = Queries(tw.store, clock=tw.clock)
    waits = [shown.show(f"a{i}").summary.waiting_for for i in range(5)]
    held = [w for w in waits if w is not None and w.reason != "starting"]  # launched: 2
    assert len(held) == 3 and all(w.reason == FAIR_SHARE and w.tenant == "acme"
                                  and w.limit == 2 for w in held)
    tw.store.set_tenant_policy("acme", max_running=3)  # a change applies at the next tick
    stages.tick.tick()
    assert Counter(b.tenant for b in tw.store.active_bundles())["acme"] == 3


def test_a_paused_tenants_follow_ons_say_so_though_the_tick_read_none_of_them() -> None:
    """A tenant paused (cap 0) whose backlog was cut into follow-ons: a tick whose due read
    held none of them (others' work filled it) still names the tenant at its cap in its
    summary, so its follow-ons say ``fair_share``, not that a free slot takes them."""
    shares = TenantSlots(6, {"t2": TenantPolicy(max_running=0)}, {}, running=[])
    shares.plan([])
    summary = TickSummary(at=0.0, active=5, max_running=6, tenants=shares.view())
    follow_on = BundleFacts(state="PENDING", next_attempt_at=0.0, follow_on=True, tenant="t2")
    said = waiting_for("PENDING", not_before=None, runs=0, reason=None, bundle=follow_on,
                       summary=summary, now=1.0)
    assert said is not None and said.reason == FAIR_SHARE and said.tenant == "t2" \
        and said.limit == 0
    # The rule it keeps: with the tenant left out of the summary, the job says a free slot
    # takes it in turn.
    summary.tenants.clear()
    said = waiting_for("PENDING", not_before=None, runs=0, reason=None, bundle=follow_on,
                       summary=summary, now=1.0)
    assert said is not None and said.reason == FOLLOW_ON


def test_a_tenant_past_its_share_gives_up_slots_at_its_bundle_ends() -> None:
    """Both tenants' backlogs come together (interleaved) and share the three slots evenly (2
    and 1); then
    b's weight goes to 3: the tick asks a to give up a slot (one conditional add a task that
    does), the first of a's tasks to end a bundle ends rather than take a follow-on, and the
    next tick launches b's follow-on there. Every job still runs once."""
    tw = Twins()
    a_ids, b_ids = [f"a{i:04d}" for i in range(600)], [f"b{i:04d}" for i in range(600)]
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": j, "tenant": j[0],
                              "estimated_seconds": 1.0}
                             for pair in zip(a_ids, b_ids, strict=True) for j in pair])
    stages = tw.stages(**ENV)
    stages.tick.tick()
    first = Counter(b.tenant for b in tw.store.active_bundles())
    assert sorted(first.values()) == [1, 2], first  # the drain's slots by weight, 1:1
    tw.store.set_tenant_policy("b", weight=3)
    tw.clock.advance(60)
    stages.tick.tick()
    summary = tw.store.tick_summary()
    assert summary is not None and summary.tenants["b"].target == 2
    assert summary.shed == {"a": first["a"] - 1}
    arn = next(b.task_arn for b in tw.store.active_bundles() if b.tenant == "a")
    assert arn is not None
    ran = run(tw, arn)
    assert len(ran) <= 40, "a's task went on with its batch although asked to give up"
    assert tw.table.snapshot()[codec.shed_key("a", summary.at)].shed == 1
    tw.clock.advance(60)
    stages.tick.tick()
    assert Counter(b.tenant for b in tw.store.active_bundles()) == {"a": 1, "b": 2}
    for _ in range(8):
        for task in tw.task_arns():
            ran += run(tw, task)
        tw.clock.advance(60)
        stages.tick.tick()
    assert sorted(ran) == sorted(a_ids + b_ids)


def test_a_tenant_with_no_task_running_gets_a_slot_for_its_first_work() -> None:
    """Every slot runs tenant a's batch when b's backlog comes: b's batch opens with a
    foothold of due work, the first of a's tasks to end a bundle leaves its slot for it, and
    the next tick launches it."""
    tw = Twins()
    backlog(tw, 600, prefix="a", tenant="a")
    stages = tw.stages(**ENV)
    stages.tick.tick()
    backlog(tw, 600, prefix="b", tenant="b")
    tw.clock.advance(60)
    stages.tick.tick()
    ran = run(tw, tw.task_arns()[0])
    assert len(ran) <= 40, "a's task went on with its batch, b's work waiting"
    tw.clock.advance(60)
    stages.tick.tick()
    assert Counter(b.tenant for b in tw.store.active_bundles()).get("b", 0) == 1


def test_each_priority_counts_against_a_tenant_only_what_launches_above_it() -> None:
    """a's two urgent bundles come first; the priorities share the slots before the tenants
    do. Given none to the urgent level, a (of the lower usage) goes first at the normal level
    as it would alone; given one, that one counts: b, below its target, goes first there."""
    shares = TenantSlots(2, {}, {"a": 0.0, "b": 10.0}, [])
    shares.goal = {"a": 1, "b": 1}
    bundles = [Bundle(f"{t}@{n}", [], priority=p) for t, n, p in [
        ("b", "1", Priority.NORMAL), ("a", "2", Priority.NORMAL), ("a", "3", Priority.HIGH),
        ("a", "4", Priority.HIGH)]]

    def order(high: int) -> list[str]:
        slots = {Priority.HIGH: high, Priority.NORMAL: 2 - high, Priority.LOW: 0}
        return [b.bundle_id for b in shares.order(bundles, slots)]

    assert order(0) == ["a@3", "a@4", "a@2", "b@1"]
    assert order(1) == ["a@3", "a@4", "b@1", "a@2"]
    assert [b.bundle_id for b in shares.order(bundles)] == order(2)  # all before count


def test_a_tenant_whose_tasks_all_ended_gets_its_turn_for_its_follow_ons() -> None:
    """Tenant a's tasks all end their bundles without taking the next (as after a deploy),
    leaving its batch's follow-ons that no task of its takes; other due work of no tenant
    would fill every slot. The tick reads the untaken follow-ons too (one read more, only with
    tenants to share among), and a gets its share of the slots."""
    tw = Twins()
    backlog(tw, 600, prefix="a", tenant="a")
    stages = tw.stages(**ENV)
    stages.tick.tick()
    for i in range(3):  # a bundle each (a tick each), due in a minute; every slot busy
        tw.client().submit("k", {}, job_id=f"long{i}", estimated_seconds=3600.0,
                           not_before=tw.clock() + 60)
        tw.clock.advance(1)
        stages.tick.tick()
    for b in tw.store.active_bundles():
        assert b.tenant == "a" and b.task_arn is not None
        run_bundle(tw, b, b.task_arn, lambda job: JobState.SUCCEEDED, None)  # DONE, no take
    assert tw.store.active_bundles() == []
    tw.clock.advance(60)
    stages.tick.tick()
    launched = Counter(b.tenant for b in tw.store.active_bundles())
    assert launched["a"] >= 1 and sum(launched.values()) == 3, launched


class CallCountingTable(MemoryTable):
    """Counts the calls made of the table port (reads and writes alike)."""

    CALLS = ("get", "get_many", "query", "write", "transact", "count")

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __getattribute__(self, name: str) -> Any:
        if name in CallCountingTable.CALLS:
            object.__setattr__(self, "calls", object.__getattribute__(self, "calls") + 1)
        return object.__getattribute__(self, name)


def tick_calls_with_tenants_waiting(n: int) -> int:
    """Table calls of one tick with every slot busy and ``n`` tenants' work due beside it."""
    tw = Twins()
    table = CallCountingTable()
    tw.table, tw.store = table, Store(table, clock=tw.clock)
    client = tw.client()
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"w{i}", "tenant": f"t{i}",
                         "estimated_seconds": 3600, "not_before": tw.clock() + 30}
                        for i in range(n)])
    tw.stages(LONGJOBS_MAX_RUNNING_TASKS="100000").tick.tick()  # recorded, due in 30 s
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"big{i}", "tenant": "big",
                         "estimated_seconds": 3600} for i in range(3)])
    stages = tw.stages(LONGJOBS_MAX_RUNNING_TASKS="3")
    stages.tick.tick()  # every slot busy
    assert tw.queue_counts() == (0, 0)
    tw.clock.advance(60)
    stages.tick.tick()  # every tenant's work due now
    tw.clock.advance(60)
    table.calls = 0
    stages.tick.tick()
    return table.calls


def test_a_ticks_cost_does_not_grow_with_the_tenants_waiting() -> None:
    """1,000 tenants with work due beside busy slots cost a tick no more than twice what 10
    do: it reads the oldest due work, its tenants' policies in one item, and the cursors of
    at most a hundred batches."""
    few, many = tick_calls_with_tenants_waiting(10), tick_calls_with_tenants_waiting(1000)
    assert many <= 2 * few, (few, many)


def test_usage_is_counted_on_and_halves_every_half_life() -> None:
    """Each tenant's vCPU-seconds: its counted usage halved over the half-life, plus its
    running tasks' vCPUs (a task of the definition's size as 1) times the time between."""
    from dispatcher.domain.bundles import Bundle
    from dispatcher.domain.jobs import Resources
    from dispatcher.stages.tenant_slots import TenantSlots

    running = [Bundle(bundle_id="a@x", job_ids=["j"]),
               Bundle(bundle_id="b@y", job_ids=["k"], resources=Resources(cpu=2048))]
    shares = TenantSlots(10, {}, {"a": 1000.0, "c": 8.0}, running)
    now = shares.usage_now(running, since=0.0, now=600.0, half_life=600.0)
    assert now == {"a": 500.0 + 600.0, "b": 1200.0, "c": 4.0}


def test_the_tenants_report_shows_policies_and_the_last_ticks_targets() -> None:
    tw = Twins()
    tw.store.set_tenant_policy("acme", weight=3, max_running=2, reserve=1)
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"{t}{i}", "tenant": t,
                              "estimated_seconds": 3600} for t in ("acme", "beta")
                             for i in range(3)])
    tw.stages(LONGJOBS_MAX_RUNNING_TASKS="4").tick.tick()
    tw.clock.advance(60)
    tw.stages(LONGJOBS_MAX_RUNNING_TASKS="4").tick.tick()
    rows = {r["tenant"]: r for r in Queries(tw.store, clock=tw.clock).tenants().to_json()[
        "tenants"]}
    assert (rows["acme"]["weight"], rows["acme"]["max_running"], rows["acme"]["reserve"]) == \
        (3.0, 2, 1)
    assert rows["acme"]["running_tasks"] == rows["acme"]["target"] == 2
    assert rows["beta"]["running_tasks"] == rows["beta"]["target"] == 2


def test_a_tenant_without_tasks_gets_its_turn_for_follow_ons_younger_than_the_others() -> None:
    """Tenant b's backlog is cut into more follow-ons than a read of the oldest returns, and
    its tasks run on; tenant a's later drain is cut into follow-ons behind all of them, and
    a's tasks have all ended without taking them (as after a shed). A slot freed: the tick
    reads the untaken follow-ons past the tenants whose tasks take their own first, so a's
    are seen, and a, below its share, gets the slot."""
    tw = Twins()
    env = {**ENV, "LONGJOBS_FOLLOW_ON_SECONDS": "1"}  # follow-ons of 4 jobs: many of them
    stages = tw.stages(**env)
    backlog(tw, 4 * (DUE_LOOKAHEAD + 20), prefix="b", tenant="b")
    stages.tick.tick()
    tw.clock.advance(1)
    backlog(tw, 40, prefix="a", tenant="a")
    stages.tick.tick()
    turns = []
    for _ in range(4):  # a's tasks end without taking what their tenant has left; a b task
        # ends too, leaving a slot free
        active = tw.store.active_bundles()
        for b in active:
            if b.tenant == "a" or b is active[-1]:
                assert b.task_arn is not None
                run_bundle(tw, b, b.task_arn, lambda job: JobState.SUCCEEDED, None)
        tw.clock.advance(60)
        stages.tick.tick()
        turns.append(sum(b.tenant == "a" for b in tw.store.active_bundles()))
    left = [b for b in tw.bundles() if b.tenant == "a" and b.state == BundleState.PENDING]
    assert left, "a's follow-ons ran out: the scenario is not the one meant"
    assert all(turns), f"a, with follow-ons and no task, got no slot at some tick: {turns}"


def test_with_no_slot_free_a_tenant_without_tasks_behind_older_due_work_is_seen() -> None:
    """Every slot runs work of no tenant, and more of it is due, older than the first due
    work of tenant t1 (reserve 2), which has no task: the tick's look at the due work pages
    past the running tenants' and sees t1's, so its summary gives t1 its reserve (and asks
    the others' tasks to give up slots for it)."""
    tw = Twins()
    stages = tw.stages(**ENV)
    tw.store.set_tenant_policy("t1", reserve=2)
    client = tw.client()
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"n{i}",
                         "estimated_seconds": 3600.0, "not_before": tw.clock() + 60}
                        for i in range(20)])
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"t{i}", "tenant": "t1",
                         "estimated_seconds": 3600.0, "not_before": tw.clock() + 90}
                        for i in range(2)])
    stages.tick.tick()  # recorded, due later
    client.submit_many([{"kind": "k", "payload": {}, "job_id": f"long{i}",
                         "estimated_seconds": 3600.0} for i in range(3)])
    stages.tick.tick()  # every slot busy
    assert {b.tenant for b in tw.store.active_bundles()} == {None}
    tw.clock.advance(120)
    stages.tick.tick()
    rec = tw.table.get(codec.TICK_KEY)
    summary = TickSummary.from_json(rec.summary if rec is not None else None)
    assert summary is not None and "t1" in summary.tenants, "t1's due work went unseen"
    assert summary.tenants["t1"].target == 2


def test_the_follow_ons_filter_keeps_within_dynamodbs_operators_beside_full_kinds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tenants read past are as many as the filter has room for beside the limited kinds
    with no room (each a clause of the same filter), those of the most tasks first."""
    tw = Twins()
    asked: list[tuple[int, tuple[str, ...]]] = []
    real = tw.store.due_bundles

    def seen(limit: int, at: float, full_kinds: Any = (), *args: Any,
             apart: Any = (), **kwargs: Any) -> Any:
        asked.append((len(full_kinds), tuple(apart)))
        return real(limit, at, full_kinds, *args, apart=apart, **kwargs)

    monkeypatch.setattr(tw.store, "due_bundles", seen)
    live = [Bundle(f"t{i:02d}@b{n}", [], task_definition="fam:1")
            for i in range(50) for n in range(50 - i)]
    work = DueWork(tw.store, TickPolicy(), tw.clock)
    work.begin(taking_tenants(live, "fam:1"))
    assert work.apart[:2] == ("t00", "t01") and len(work.apart) == 40
    work.spare(1, [], {f"k{i}": 0 for i in range(50)}, set(), True)
    work.spare(1, [], {}, set(), True)
    assert [(kinds, len(apart)) for kinds, apart in asked if apart] == [(50, 10), (0, 40)]
    assert all(apart == work.apart[:len(apart)] for _, apart in asked)
