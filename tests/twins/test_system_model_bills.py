"""The system model's checks of bills, counters and labels, each shown able to fail
(tests/model_costs.py): ``task_bills`` (a task's jobs add up to the task), ``usage_counters``
(``stats --by`` holds each bill once) and ``label_lists`` (a label lists the jobs that carry
it). The bills' sequence: small jobs in bundles that running tasks take one after another
(follow-ons), one task's Spot reclaimed while its jobs run (its bundle rerun elsewhere), time
passing while jobs run, every stop delivered with its bill. Today's counts agree; with a rule
broken (a run counted twice, a bill's shares doubled in the counters, a label never indexed),
the check sees it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.domain.costs import TaskCost, Usage
from dispatcher.ops.bulk import BulkAction
from dispatcher.store.label_index import LabelIndex
from job_runner import writes as writes_module
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import deliver_all, machines, seen_by, spec, task

__all__ = ["machines"]  # the fixture, used by name


def tasks_run_bill_and_stop(m: model.SystemModel) -> None:
    m.burst(40, "succeed")
    m.tick(1)
    for sim in list(m.tasks.values()):
        sim.claim()
        sim.start_next()
    m.advance(30.0)
    task(m, 0).stop("SpotInterruption", "Your Spot Task was interrupted.", None)
    m.sync()
    m.runners_pass("succeed")
    m.advance(30.0)
    run_out(m, 6, "succeed")


def run_out(m: model.SystemModel, rounds: int, behaviour: str) -> None:
    """``rounds`` of the runners' passes and ticks, then every task ended and its stop
    delivered with its bill."""
    for _ in range(rounds):
        m.runners_pass(behaviour)
        m.advance(1.0)
        m.tick(1)
    while any(t.alive for t in m.tasks.values()):
        for sim in m.tasks.values():
            if sim.alive and sim.phase != "ended":
                sim.end()
        m.sync()
    deliver_all(m)


def settled(m: model.SystemModel) -> dict[str, tuple[float, float]]:
    return {pk: (float(rec.cost or 0), float(rec.job_seconds or 0))
            for pk, rec in m.view().items.items() if pk.startswith("TASK#") and rec.cost}


def test_every_settled_task_adds_up(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "task_bills", tasks_run_bill_and_stop) == []
    bills = settled(m)
    assert len(bills) >= 2 and any(seconds > 0 for _, seconds in bills.values()), bills


def test_the_bill_check_sees_a_run_counted_twice(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: the runner counts each run of its own twice."""
    real = writes_module.Writes._usage

    def doubled(self: writes_module.Writes) -> Usage:
        mine = real(self)
        return mine.plus(mine)

    monkeypatch.setattr(writes_module.Writes, "_usage", doubled)
    seen = seen_by(machines(), "task_bills", tasks_run_bill_and_stop)
    assert seen and "their shares do not add up to its bill" in seen[0]


def test_the_counter_check_sees_a_bill_counted_twice(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: each group's share of a bill is added to its counter twice over."""
    real = TaskCost.group_costs

    def doubled(self: TaskCost) -> dict[str, tuple[int, float, float]]:
        return {g: (jobs, vcpu, 2 * dollars) for g, (jobs, vcpu, dollars) in real(self).items()}

    monkeypatch.setattr(TaskCost, "group_costs", doubled)
    seen = seen_by(machines(), "usage_counters", tasks_run_bill_and_stop)
    assert seen and "a bill counted twice, or not at all" in seen[0]


def some_fail(m: model.SystemModel) -> None:
    """Jobs that fail and jobs that succeed, on tasks that stop with their bills."""
    m.burst(6, "fail")
    m.burst(6, "succeed")
    m.tick(1)
    run_out(m, 4, "fail")


def test_the_counters_count_failed_jobs(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "usage_counters", some_fail) == []
    failed = sum(int(rec.failed or 0) for pk, rec in m.view().items.items()
                 if pk.startswith("USAGE#kind:"))
    assert failed > 0


def test_the_counter_check_sees_every_ended_run_counted_failed(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: every run that ended a job counts as failed."""
    real = Usage.add

    def all_failed(self: Usage, seconds: float, groups: Any, *, ended: bool = True,
                   failed: bool = False) -> None:
        real(self, seconds, groups, ended=ended, failed=True)

    monkeypatch.setattr(Usage, "add", all_failed)
    seen = seen_by(machines(), "usage_counters", tasks_run_bill_and_stop)
    assert seen and "counted as failed" in seen[0]


def labelled_jobs(m: model.SystemModel) -> None:
    m.submit(spec(labels={"team": "a"}), 3, False)
    m.submit(spec(labels={"team": "b", "tier": "gold"}), 2, False)
    m.tick(1)


def test_a_label_lists_its_jobs(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "label_lists", labelled_jobs) == []
    assert len([rec for pk, rec in m.view().items.items() if pk.startswith("LABEL#")]) == 7


def test_the_label_check_sees_a_job_its_label_misses(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: the tick records jobs without their label entries."""
    monkeypatch.setattr(LabelIndex, "index_labels", lambda self, jobs: None)
    seen = seen_by(machines(), "label_lists", labelled_jobs)
    assert seen and "label team=a lists [] that do not carry it and misses" in seen[0]


def labelled_job_sent_again_sooner(m: model.SystemModel) -> None:
    """A job for 180 days out, labelled; its producer sends its id again with no
    ``not_before``. The duplicate's label entry, written before the record finds it a
    duplicate, replaced the first one's with its own expiry (60 days from now): 100 days on,
    the waiting job was no longer listed by its label."""
    m.submit(spec(labels={"team": "a"}, priority="high", max_attempts=1,
                  not_before=180 * 86_400.0), 1, False)
    m.tick(1)
    m.submit(spec(labels={"team": "a"}, priority="high", max_attempts=1), 1, True)
    m.tick(1)
    m.advance(100 * 86_400.0)
    m.ttl()


def test_a_job_sent_again_keeps_its_labels_for_its_first_due_time(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "label_lists", labelled_job_sent_again_sooner) == []
    waiting = [j for j in m.twins.jobs() if (j.labels or {}).get("team") == "a"]
    assert [j.state for j in waiting] == ["PENDING"]  # the scenario's point: it still waits


def bulk_cancel_by_label(m: model.SystemModel) -> None:
    labelled_jobs(m)
    m.submit(spec(), 2, False)  # carrying no label
    m.tick(1)
    m.bulk_action(("cancel", "PENDING"), None, None, False, 100, None, "team=a")


def test_a_bulk_action_by_label_acts_on_its_jobs_only(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "bulk_label", bulk_cancel_by_label) == []
    touched = set(m.bulk_acts["bulk-000"]) | {j for _, j in m.bulk_requests["bulk-000"]}
    team_a = {j.job_id for j in m.twins.jobs() if (j.labels or {}).get("team") == "a"}
    assert len(team_a) == 3 and touched == team_a  # cancelled, or asked of their tasks


def select_by_status_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Break bulk actions' rule: they select by status (kind, window) alone, no label nor
    tenant read."""
    monkeypatch.setattr(BulkAction, "_pages", lambda self, f, state, where, page:
                        self.store.job_pages(state, page=page, **where))


def test_the_bulk_label_check_sees_a_job_the_label_does_not_name(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken rule: a bulk action selects by its status alone, its label ignored."""
    select_by_status_alone(monkeypatch)
    seen = seen_by(machines(), "bulk_label", bulk_cancel_by_label)
    assert seen and "it does not carry" in seen[0]
