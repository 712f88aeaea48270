"""The system model's ``urgent_waits`` check (tests/twins/test_system_model.py) beside tenants
and a rerun host: an urgent job of no tenant waits for a slot, truly, when the only running task
of no tenant now runs one job at a time.

A task runs one tenant's jobs, so an urgent job of no tenant goes only to a host of no tenant
(dispatcher/stages/handoff.py); another tenant's task makes the tick take it in (the hosts'
room) but cannot take it. The host of no tenant was handed an urgent job, then died with both
running: its rerun runs them one at a time (``slots`` 1), behind its own job, which may be long,
so it is no host (``is_host``): the jobs handed to it say nothing of the size of its own. The
check counts the hosts on the model's view, whose bundles list their handed jobs among their
jobs (``Reads.job_ids_of``); these are its steps, replayed.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.stages import handoff
from dispatcher.stages.handoff import Handoffs, HandoffStats
from dispatcher.stages.policy import HandoffPolicy
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, seen_by
from tests.twins.test_urgent_jobs_share_a_hosts_room import FirstDraw

__all__ = ["machines"]  # the fixture, used by name


def a_host_of_no_tenant(m: model.SystemModel) -> None:
    """Two slots: an urgent job's task (no tenant) and one of t1's burst, both claimed; a second
    urgent job, sent with every slot busy, is handed to the first."""
    m.change_settings("2", "", "2")
    m.urgent(1)  # u001
    m.burst(40, "succeed", "t1")
    m.tick(1)
    m.claim(FirstDraw())  # the urgent job's task (its bundle's id sorts first)
    m.claim(FirstDraw())
    m.urgent(1)  # u042
    m.tick(1)


def its_rerun_runs_one_job_at_a_time(m: model.SystemModel) -> None:
    """The host learns of the handed job, runs both and is killed (OOM): which job killed it is
    not known, so its rerun runs them one at a time; a third urgent job comes."""
    a_host_of_no_tenant(m)
    m.advance(1.0)  # a heartbeat: the host learns of the handed job
    m.start_job(FirstDraw())
    m.start_job(FirstDraw())
    m.kill(FirstDraw(), ("EssentialContainerExited", 137))
    m.stop_event()  # settled, relaunched at once
    m.claim(FirstDraw())
    m.advance(1.0)
    m.urgent(1)  # u043
    m.tick(1)


def test_an_urgent_job_waits_for_a_slot_when_its_tenants_task_runs_one_job_at_a_time(
        machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "urgent_waits", its_rerun_runs_one_job_at_a_time) == []
    view = m.view()
    rerun = view.bundle("b000000")
    assert rerun is not None and rerun.state == BundleState.RUNNING and rerun.slots == 1
    assert rerun.handed_jobs == ["u042"] and rerun.job_ids == ["u001", "u042"]
    policy = HandoffPolicy(30.0, 2)
    assert not handoff.is_host(rerun, m.twins.clock(), policy)  # one own job, one at a time
    other = next(b for b in view.bundles() if b.tenant == "t1" and b.state == BundleState.RUNNING)
    assert handoff.is_host(other, m.twins.clock(), policy)  # t1's: it took the job in
    waiting = view.job("u043")
    assert waiting is not None and waiting.state == JobState.PENDING
    assert waiting.bundle_id not in {"b000000", other.bundle_id}  # in a bundle of its own


def test_the_check_sees_a_host_of_its_tenant_given_nothing(
        machines: Callable[[], model.SystemModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not lost: with the host of no tenant still taking jobs two at a time, a
    hand-off that hands nothing leaves the urgent job waiting beside its room."""
    def hands_nothing(self: Handoffs, sources: list[Bundle], hosts: list[Bundle],
                      stats: HandoffStats) -> None:
        return None

    def then_nothing_handed(m: model.SystemModel) -> None:
        a_host_of_no_tenant(m)
        monkeypatch.setattr(Handoffs, "hand", hands_nothing)
        m.urgent(1)  # u043
        m.tick(1)

    seen = seen_by(machines(), "urgent_waits", then_nothing_handed)
    assert seen and "['u043']" in seen[0] and "handed 0" in seen[0]
