"""Tenants: whom a job's work is for. In the schema and on submit (a producer's default from
its settings), kept on the job and its events; bundles never mix tenants, nor does a task
taking follow-ons, another batch's work or urgent jobs; listed through the label index; its
tasks tagged with it; counted by ``stats --by tenant`` once they stop."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain import tenants
from dispatcher.domain.bundles import Bundle, BundleState, task_can_run
from dispatcher.domain.costs import TaskBill
from dispatcher.domain.errors import InvalidMessage, LongjobsError
from dispatcher.domain.jobs import JobState, Resources
from dispatcher.domain.stops import TaskStop
from dispatcher.ops.metrics import cost_blobs
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.store import Store, codec
from dispatcher.testing.memory_event_sink import MemoryEventSink, follow
from job_runner import writes as writes_module
from tests.twins import Twins, finish_as_runner
from tests.twins.test_follow_ons import ENV, backlog, run
from tests.twins.test_labels import TwinTime, run_every_bundle
from tests.twins.test_urgent_jobs import JOB_SECONDS, TICK_EVERY, backlogged


def test_a_tenant_is_kept_on_the_job_and_names_its_bundle() -> None:
    tw = Twins()
    client = tw.client()
    client.submit("k", {}, job_id="a", tenant="acme", estimated_seconds=1)
    client.submit("k", {}, job_id="n", estimated_seconds=1)
    tw.stages().tick.tick()
    a, n = tw.job("a"), tw.job("n")
    assert a is not None and a.tenant == "acme" and a.bundle_id is not None
    assert a.bundle_id.startswith("acme@") and tenants.of_bundle(a.bundle_id) == "acme"
    assert n is not None and n.tenant is None and tenants.of_bundle(n.bundle_id or "") is None
    # Shown where people look: a row of the status index has no tenant, its bundle's id does.
    q = Queries(tw.store, clock=tw.clock)
    assert {s.job_id: s.tenant for s in q.list_jobs()} == {"a": "acme", "n": None}
    assert q.show("a").summary.tenant == "acme"


def test_a_producer_names_its_tenant_once_in_its_settings() -> None:
    tw = Twins()
    client = tw.client(overrides={"LONGJOBS_TENANT": "team-7"})
    client.submit("k", {}, job_id="x")
    client.submit("k", {}, job_id="y", tenant="other")
    tw.stages().tick.tick()
    assert [tw.job(j).tenant for j in ("x", "y")] == ["team-7", "other"]  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", ["", "a b", "acme@x", "a:b", "x" * 65, "é"])
def test_a_bad_tenant_is_refused_with_its_form(bad: str) -> None:
    client = Twins().client()
    if bad == "":  # none: as if not given
        client.submit("k", {}, tenant=bad)
        return
    with pytest.raises(InvalidMessage, match=r"tenant"):
        client.submit("k", {}, tenant=bad)


def test_small_jobs_of_two_tenants_never_share_a_bundle() -> None:
    tw = Twins()
    tw.client().submit_many([{"kind": "k", "payload": {}, "job_id": f"j{n}",
                              "estimated_seconds": 1, "tenant": ["a", "b", None][n % 3]}
                             for n in range(30)])
    tw.stages().tick.tick()
    bundles = tw.bundles()
    assert {b.tenant for b in bundles} == {"a", "b", None}
    for b in bundles:
        owners = {tw.job(j).tenant for j in b.job_ids}  # type: ignore[union-attr]
        assert owners == {b.tenant}, b.bundle_id
    # Each RunTask call is of one tenant, and its tasks say which.
    launched = [b for b in bundles if b.task_arn]
    assert {b.tenant for b in launched} == {"a", "b", None}
    for b in launched:
        tags = tw.launcher.tasks[b.task_arn or ""].request.tags
        assert tags.get("longjobs:tenant") == b.tenant


def test_a_task_never_takes_another_tenants_follow_ons() -> None:
    """Two tenants' backlogs, each over what the free slots take at once: each is cut into
    follow-ons of its own batch, and every task runs one tenant's jobs only, however its
    batch runs out (it then takes another batch's follow-ons, of its own tenant only)."""
    tw = Twins()
    a_ids = backlog(tw, 400, prefix="a", tenant="a")
    b_ids = backlog(tw, 200, prefix="b", tenant="b")
    tw.stages(**ENV).tick.tick()
    ran: list[str] = []
    for arn in tw.task_arns():
        mine = run(tw, arn)
        assert len({j[0] for j in mine}) == 1, f"{arn} ran two tenants' jobs"
        ran += mine
    left = sorted(j for j in a_ids + b_ids if j not in ran)
    # What no running task could take waits for a task of its own tenant: the next ticks.
    for _ in range(10):
        if not left:
            break
        tw.clock.advance(60)
        tw.stages(**ENV).tick.tick()
        for arn in tw.task_arns():
            mine = run(tw, arn)
            assert len({j[0] for j in mine}) <= 1, f"{arn} ran two tenants' jobs"
            ran += mine
        left = sorted(j for j in a_ids + b_ids if j not in ran)
    assert sorted(ran) == sorted(a_ids + b_ids)  # every job once
    assert {b.state for b in tw.bundles()} == {BundleState.DONE}


def test_an_urgent_job_of_another_tenant_is_never_handed_to_a_running_task() -> None:
    """Behind a full backlog of jobs of no tenant, an urgent job of tenant ``bolt`` is not
    handed to their tasks: it waits in the table, and the next of the batch's tasks to end a
    bundle leaves its slot for it, so it runs on a task of its own well before the batch
    ends."""
    world = backlogged([100.0], tenant="bolt")
    world.run(900.0)
    job = world.tw.job("urgent-0")
    assert job is not None and job.state == JobState.SUCCEEDED
    bundle = world.tw.bundle(job.bundle_id or "")
    assert bundle is not None and bundle.job_ids == ["urgent-0"] and bundle.tenant == "bolt"
    launched = world.launched_at[bundle.task_arn or ""] - (world.t0 + 100.0)
    assert launched < JOB_SECONDS + 3 * TICK_EVERY, launched
    assert all(not b.handed_jobs or b.tenant is None for b in world.tw.bundles())


def test_the_rule_a_take_and_a_hand_off_keep() -> None:
    a, a2 = Bundle(tenants.bundle_id("a", "1"), []), Bundle(tenants.bundle_id("a", "2"), [])
    n, big = Bundle("3", []), Bundle(tenants.bundle_id("a", "4"), [], resources=Resources(
        cpu=4096, memory=8192))
    assert task_can_run(a, a2) and task_can_run(n, Bundle("5", []))
    assert not task_can_run(a, n) and not task_can_run(n, a) and not task_can_run(a, big)


def test_a_retry_keeps_its_tenant() -> None:
    tw = Twins()
    tw.client().submit("k", {}, job_id="r", tenant="acme")
    tw.stages().tick.tick()
    finish_as_runner(tw.store, "r", JobState.FAILED)
    tw.store.retry("r")
    job = tw.job("r")
    assert job is not None and job.state == JobState.PENDING
    assert tenants.of_bundle(job.bundle_id or "") == "acme"


def test_jobs_are_listed_by_tenant_through_the_label_index() -> None:
    tw = Twins()
    client = tw.client()
    for n in range(3):
        client.submit("k", {}, job_id=f"a{n}", tenant="acme", labels={"tier": "gold"})
    client.submit("k", {}, job_id="b0", tenant="bolt", labels={"tier": "gold"})
    client.submit("k", {}, job_id="plain", labels={"tier": "gold"})
    tw.stages().tick.tick()
    q = Queries(tw.store, clock=tw.clock)
    assert sorted(s.job_id for s in q.list_jobs(tenant="acme")) == ["a0", "a1", "a2"]
    assert [s.job_id for s in q.list_jobs(tenant="bolt", label="tier=gold")] == ["b0"]
    assert q.list_jobs(tenant="nobody") == []
    # A producer's label "@tenant" cannot exist, so it never meets a tenant's entry.
    with pytest.raises(LongjobsError, match="label key"):
        q.list_jobs(label="@tenant=acme")
    with pytest.raises(LongjobsError, match="tenant 'a b'"):
        q.list_jobs(tenant="a b")


def test_events_carry_the_tenant_and_stats_count_by_tenant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tw = Twins()
    sink = MemoryEventSink()
    follow(tw.table, sink)
    client = tw.client()
    for n in range(3):
        client.submit("k", {}, job_id=f"a{n}", tenant="acme")
    client.submit("k", {}, job_id="plain")
    tw.stages().tick.tick()
    assert {e.job_id: e.tenant for e in sink.events if e.state == "PENDING"} == {
        "a0": "acme", "a1": "acme", "a2": "acme", "plain": None}
    monkeypatch.setattr(writes_module, "time", TwinTime(tw))
    run_every_bundle(tw, seconds=10.0)
    blobs = stop_every_task(tw)
    # The daily spend per tenant is a metric too, beside the stack's, each kind's and label's.
    spent = [b for b in blobs if b.get("Tenant") == "acme"]
    assert spent and all(b["JobCost"][0] > 0 and "Label" not in b for b in spent)
    store = Store(tw.table, clock=tw.clock)
    usage = {g.group: g for g in store.group_usage("tenant", tw.clock() - 3600, tw.clock())}
    assert usage["tenant:acme"].jobs == 3 and usage[f"tenant:{tenants.NONE}"].jobs == 1
    kinds = {g.group: g for g in store.group_usage("kind", tw.clock() - 3600, tw.clock())}
    # The tenants add up to every job, as the kinds do.
    assert sum(g.dollars for g in usage.values()) == pytest.approx(kinds["kind:k"].dollars)
    report = Queries(tw.store, clock=tw.clock).usage("tenant", since_seconds=3600)
    assert {g.group for g in report.groups} == {"acme", tenants.NONE}
    assert report.total is not None and report.total.jobs == 4


def acme_twice_and_one_plain() -> Twins:
    """Two jobs of tenant acme and one of none, each launched on a task of its own."""
    tw = Twins()
    client = tw.client()
    client.submit("k", {}, job_id="a0", tenant="acme")
    client.submit("k", {}, job_id="a1", tenant="acme")
    client.submit("k", {}, job_id="plain")
    tw.stages().tick.tick()
    return tw


def stop_every_task(tw: Twins) -> list[dict[str, Any]]:
    """Each task's stop, with its bill, handled: the EMF objects of the costs it settled."""
    blobs: list[dict[str, Any]] = []
    for arn in tw.task_arns():
        task = tw.launcher.tasks[arn]
        blobs += cost_blobs(tw.stages().reruns.on_stop(TaskStop(
            arn, "EssentialContainerExited", "done", 0, tw.clock(),
            TaskBill(256, 512, task.started_at, tw.clock()))))
    return blobs


def test_top_counts_the_running_tasks_by_tenant() -> None:
    tw = acme_twice_and_one_plain()
    snap = Top(tw.store, queue=tw.queue, clock=tw.clock).snapshot()
    assert snap.tasks_by_tenant == {"acme": 2, tenants.NONE: 1}
    assert snap.to_json()["tasks_by_tenant"] == {"acme": 2, tenants.NONE: 1}
    plain = Twins()
    plain.client().submit("k", {}, job_id="p")
    plain.stages().tick.tick()
    assert Top(plain.store, queue=plain.queue, clock=plain.clock).snapshot().tasks_by_tenant == {}


def test_a_tenant_behind_anothers_backlog_starts_at_the_next_bundle_end_and_tick() -> None:
    """Every slot runs tenant a's batch, its backlog cut into follow-ons that a's tasks take
    for many minutes. Tenant b's one job comes: no running task may take it (a task runs one
    tenant's jobs), so its batch opens with a foothold, due work rather than a follow-on; the
    first of a's tasks to end a bundle leaves its slot for it (one task, not each), and the
    next tick launches it. a's backlog still runs whole, every job once."""
    tw = Twins()
    a_ids = backlog(tw, 600, prefix="a", tenant="a")
    stages = tw.stages(**ENV)
    stages.tick.tick()
    first, *others = tw.task_arns()
    b_ids = backlog(tw, 1, prefix="b", tenant="b")
    tw.clock.advance(60)
    busy = stages.tick.tick()
    assert busy.capacity == 0 and busy.intake.footholds == {"normal": 1}
    job = tw.job(b_ids[0])
    assert job is not None and job.bundle_id is not None
    held = tw.table.snapshot()[codec.bundle_key(job.bundle_id)]
    assert held.state == "PENDING" and held.status_key == codec.bundle_status(
        BundleState.PENDING)  # due work, not an untaken follow-on
    summary = tw.store.tick_summary()
    assert summary is not None and summary.others_waiting("normal")  # a's tasks look
    ran = run(tw, first)
    # Its bundle, and due work of its own older than b's (the oldest due goes first), then
    # it left its slot: not the batch's hundreds of follow-ons.
    assert len(ran) <= 80, "a's first task went on with its batch, b's job waiting"
    ran += [j for arn in others for j in run(tw, arn)]  # the others go on with the batch
    tw.clock.advance(60)
    stages.tick.tick()
    bundle = tw.bundle(job.bundle_id)
    assert bundle is not None and bundle.state == BundleState.LAUNCHED and bundle.task_arn
    assert run(tw, bundle.task_arn) == b_ids
    for _ in range(5):
        tw.clock.advance(60)
        stages.tick.tick()
        for arn in tw.task_arns():
            ran += run(tw, arn)
    assert sorted(ran) == a_ids  # every job of a's once
    assert {b.state for b in tw.bundles()} == {BundleState.DONE}


def test_a_bulk_cancel_by_tenant_acts_on_its_jobs_only() -> None:
    tw = Twins()
    client = tw.client()
    later = tw.clock() + 3600  # held in the table, PENDING
    for n in range(3):
        client.submit("k", {}, job_id=f"a{n}", tenant="acme", not_before=later,
                      labels={"tier": "gold" if n else "free"})
    client.submit("k", {}, job_id="b0", tenant="bolt", not_before=later, labels={"tier": "gold"})
    client.submit("k", {}, job_id="plain", not_before=later)
    tw.stages().tick.tick()
    action, gold = client.bulk("cancel", status="PENDING", tenant="acme", label="tier=gold")
    assert action.count(gold) == 2 and "tenant acme" in action.preview(gold)[0]
    action, every = client.bulk("cancel", status="PENDING", tenant="acme")
    assert action.count(every) == 3
    report = action.run(every, reason="acme left")
    assert report.acted == 3
    states = {j.job_id: j.state for j in tw.jobs()}
    assert [states[f"a{n}"] for n in range(3)] == [JobState.CANCELLED] * 3
    assert states["b0"] == states["plain"] == JobState.PENDING
    with pytest.raises(LongjobsError, match="tenant 'a b'"):
        client.bulk("cancel", status="PENDING", tenant="a b")


def test_the_tenants_report_counts_running_tasks_and_what_they_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tw = acme_twice_and_one_plain()
    client = tw.client()
    q = Queries(tw.store, clock=tw.clock)
    assert [(r.tenant, r.running, r.used.jobs) for r in q.tenants().rows] == [
        ("acme", 2, 0), (tenants.NONE, 1, 0)]
    monkeypatch.setattr(writes_module, "time", TwinTime(tw))
    run_every_bundle(tw, seconds=10.0)
    stop_every_task(tw)
    client.submit("k", {}, job_id="b0", tenant="bolt")
    tw.clock.advance(60)
    tw.stages().tick.tick()
    report = q.tenants()
    rows = {r.tenant: r for r in report.rows}
    assert report.rows[0].tenant == "bolt"  # the most tasks running first
    assert (rows["bolt"].running, rows["bolt"].used.jobs) == (1, 0)
    assert (rows["acme"].running, rows["acme"].used.jobs) == (0, 2)
    assert rows["acme"].used.dollars > 0 and rows[tenants.NONE].used.jobs == 1
    assert report.to_json()["tenants"][0]["tenant"] == "bolt"
