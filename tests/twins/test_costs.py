"""What a job cost: a task's bill (Fargate's rules) split among the jobs it ran by their run
time, so that the jobs add up to the tasks (dispatcher/domain/costs.py,
dispatcher/stages/bills.py)."""

from __future__ import annotations

import pytest

from dispatcher import settings
from dispatcher.domain import costs
from dispatcher.domain.costs import Prices, TaskBill, Usage
from dispatcher.domain.errors import ConfigError, ConflictError
from dispatcher.domain.jobs import JobState
from dispatcher.domain.stops import TaskStop
from dispatcher.simulation.batch_model import BatchModel
from dispatcher.simulation.batch_shape import Shape
from dispatcher.simulation.faults import Faults
from dispatcher.stages.rerun import StopResult
from dispatcher.store import Fence, JobUpdate, Store
from dispatcher.store import codec as r
from tests.twins import ENV, Twins, finish_as_runner

SMALL = {"jobs": 3_000, "seconds": 2.0, "tasks": 4, "concurrency": 10, "start": (30.0, 30.0)}
# Spot and on demand alike: a RunTask of two tasks or more starts both.
HALVES = (("FARGATE_SPOT", 1, 0), ("FARGATE", 1, 0))


def test_a_bill_is_per_second_rounded_up_with_a_minute_at_least() -> None:
    p = Prices()
    short = TaskBill(1024, 2048, 100.0, 130.2)
    assert short.seconds == 60
    assert TaskBill(1024, 2048, 100.0, 200.2).seconds == 101
    # 1 vCPU and 2 GB for an hour on demand: the list prices.
    hour = TaskBill(1024, 2048, 0.0, 3600.0)
    assert hour.cost(p) == pytest.approx(0.04048 + 2 * 0.004445)
    spot = TaskBill(1024, 2048, 0.0, 3600.0, "FARGATE_SPOT")
    assert spot.cost(p) == pytest.approx(0.3 * hour.cost(p))
    arm = TaskBill(1024, 2048, 0.0, 3600.0, architecture=costs.ARM64)
    assert arm.cost(p) == pytest.approx(0.03238 + 2 * 0.00356)


def test_a_shared_task_is_split_by_run_time_and_adds_up() -> None:
    usage = Usage()
    usage.add(30.0, ["kind:a", "label:team=x"])
    usage.add(10.0, ["kind:b"])
    bill = TaskBill(512, 1024, 0.0, 45.0)  # billed a minute
    s = costs.settle("arn:t", bill, usage, Prices())
    assert s.cost == pytest.approx(60 * Prices().per_second(512, 1024, spot=False, arm=False))
    a = costs.job_cost([{"task_arn": "arn:t", "started_at": 1.0, "ended_at": 31.0}],
                       {"arn:t": s.rate})
    b = costs.job_cost([{"task_arn": "arn:t", "started_at": 31.0, "ended_at": 41.0}],
                       {"arn:t": s.rate})
    assert a.dollars + b.dollars == pytest.approx(s.cost)
    assert a.dollars == pytest.approx(3 * b.dollars) and a.final
    groups = s.group_costs()
    assert groups["kind:a"][2] + groups["kind:b"][2] == pytest.approx(s.cost)
    assert groups["label:team=x"][2] == pytest.approx(groups["kind:a"][2])
    pending = costs.job_cost([{"task_arn": "arn:u", "started_at": 0.0, "ended_at": 5.0}], {})
    assert not pending.final and pending.pending_seconds == 5.0 and pending.dollars == 0


def test_prices_are_a_setting_and_a_bad_one_says_what_it_takes() -> None:
    cfg = settings.load("dispatcher", {**ENV, "LONGJOBS_PRICES": "spot=0.25,vcpu=0.05"})
    assert cfg.prices == Prices(vcpu_hour=0.05, spot_factor=0.25)
    with pytest.raises(ConfigError, match=r"LONGJOBS_PRICES.*name=price"):
        settings.load("dispatcher", {**ENV, "LONGJOBS_PRICES": "cpu=1"})


def test_the_jobs_costs_add_up_to_the_tasks_bills() -> None:
    """A batch of small jobs in shared tasks that take follow-ons, on Spot and on demand, with
    Spot reclaims and kills rerunning jobs elsewhere: every stop's bill is settled, and the
    jobs' costs (their run seconds times their tasks' rates) add up to the bills, within 1 %
    (the tasks that ran no job apart: their cost is the stack's, under "no job ran")."""
    model = BatchModel(Shape(**SMALL, seed=5,  # type: ignore[arg-type]
                             faults=Faults(reclaimed=0.3, killed=0.2, kill_within=(20.0, 60.0)),
                             settings={"LONGJOBS_FOLLOW_ON_SECONDS": "15"}), capacity=HALVES)
    model.run()
    assert model.verdict().holds, model.verdict().line()
    out = model.outcome
    store = Store(model.table)
    prices = model.cfg.prices
    billed = sum(b.cost(prices) for b in out.bills.values())
    providers = {b.capacity_provider for b in out.bills.values()}
    assert providers == {"FARGATE", "FARGATE_SPOT"}
    assert any(t.follow_ons for t in out.tasks) and out.reclaimed > 0
    rates = store.task_rates(list(out.bills))
    assert set(rates) == set(out.bills)  # every stop settled its task's bill
    jobs = [r.record_job(rec) for pk, rec in model.table.snapshot().items()
            if pk.startswith("JOB#")]
    assert len(jobs) == SMALL["jobs"]
    reran = [j for j in jobs if len({h.get("task_arn") for h in j.history
                                     if costs.entry_seconds(h) > 0}) > 1]
    assert reran  # some ran on two tasks: a reclaim's rerun
    shares = [costs.job_cost(j.history, rates) for j in jobs]
    assert all(c.final for c in shares)
    unshared = sum(b.cost(prices) for arn, b in out.bills.items() if rates[arn] == 0)
    total = sum(c.dollars for c in shares) + unshared
    assert total == pytest.approx(billed, rel=0.01), (total, billed)


def test_a_task_tells_at_most_32_groups_apart_however_its_usage_is_added_up() -> None:
    """Ten jobs of ten labels of their own each: 101 groups, which a stop's transaction could
    not hold (DynamoDB's 100 items); added run by run as the runner adds them, they fold into
    ``label:(other)``, and nothing is lost of the seconds."""
    total = Usage()
    for n in range(10):
        run = Usage()
        run.add(1.0, costs.groups_of("k", {f"l{m}": f"v{n}" for m in range(10)}))
        total = total.plus(run)
    assert len(total.groups) <= costs.MAX_GROUPS + 2 and "label:(other)" in total.groups
    assert total.seconds == 10.0 and total.groups["kind:k"] == [10, 10.0, 0]
    assert len(Usage.of(total.as_dict()).groups) == len(total.groups)


def test_a_tasks_usage_counts_its_failed_jobs_and_reads_an_older_count_as_none_failed() -> None:
    usage = Usage()
    usage.add(2.0, ["kind:k"], failed=True)
    usage.add(1.0, ["kind:k"])
    usage.add(1.0, ["kind:k"], ended=False, failed=True)  # not ended: not a failed job
    assert usage.failed("kind:k") == 1 and usage.jobs == 2
    assert Usage.of(usage.as_dict()).plus(usage).failed("kind:k") == 2
    older = Usage.of({"seconds": 3.0, "jobs": 2, "groups": {"kind:k": [2, 3.0]}})
    assert older.failed("kind:k") == 0 and older.plus(usage).groups["kind:k"] == [4, 7.0, 1]


def test_a_stop_whose_settle_was_refused_leaves_its_bill_for_a_later_look(
        twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    """The jobs' histories on the task are not final until their settle is written: a bill
    split by them then would freeze too few seconds. The next delivery settles both."""
    bundle_id, arn = twins.launched("j1")
    fence = Fence(bundle_id, 1, arn)
    twins.store.claim(fence)
    twins.store.apply(fence, [JobUpdate("j1", JobState.PENDING, JobState.RUNNING,
                                        attempts_delta=1, history=[
                                            {"task_arn": arn, "started_at": twins.clock()}])])
    twins.clock.advance(30)
    bill = TaskBill(256, 512, twins.clock() - 40, twins.clock())
    stop = TaskStop(arn, "SpotInterruption", "reclaimed", 143, twins.clock(), bill)
    real = Store.settle

    def refused(*args: object, **kwargs: object) -> set[str]:
        raise ConflictError("moved meanwhile")

    monkeypatch.setattr(Store, "settle", refused)
    out = twins.stages().reruns.on_stop(stop)
    assert out.result == StopResult.IGNORED and out.settlement is None
    assert twins.store.task_rates([arn]) == {}
    monkeypatch.setattr(Store, "settle", real)
    again = twins.stages().reruns.on_stop(stop)
    assert again.result == StopResult.SETTLED and again.settlement is not None
    job = twins.job("j1")
    assert job is not None
    cost = costs.job_cost(job.history, twins.store.task_rates([arn]))
    assert cost.final and cost.dollars == pytest.approx(bill.cost(Prices()))


def test_a_stop_delivered_twice_reports_its_bill_once(twins: Twins) -> None:
    _, arn = twins.launched("j1")
    finish_as_runner(twins.store, "j1", JobState.SUCCEEDED)
    bill = TaskBill(256, 512, twins.clock() - 60, twins.clock())
    stop = TaskStop(arn, "EssentialContainerExited", "done", 0, twins.clock(), bill)
    first = twins.stages().reruns.on_stop(stop)
    second = twins.stages().reruns.on_stop(stop)
    assert first.settlement is not None and second.settlement is None
    assert sum(float(rec.cost or 0) for rec in twins.items("USAGE#kind:")) == pytest.approx(
        bill.cost(Prices()), rel=1e-6)
