"""A claim whose first write the table applied but whose answer never came (a lost
connection, a timeout: the SDK sends it again on its own, and that second write finds its
condition refused by the first). The task claimed its bundle: it must run it, not take the
refusal for another task's claim and exit, leaving its bundle to be stopped and rerun and its
bill to no job. A second claim of the same bundle is still refused."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.ports.table import Set, Update
from dispatcher.store import Fence
from dispatcher.store import codec as r
from tests.twins import Twins


def answer_lost_once(twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundle's next claim: applied, then sent again (the SDK's retry), which is refused."""
    table = twins.store.table
    write = table.write
    lost = [False]

    def writing(op: Any) -> Any:
        claiming = isinstance(op, Update) and op.pk.startswith("BUNDLE#") and any(
            isinstance(a, Set) and a.attr == "state" and a.value == str(BundleState.RUNNING)
            for a in op.actions)
        if claiming and not lost[0]:
            lost[0] = True
            write(op)  # applied; its answer is lost, and the same request goes again
        return write(op)

    monkeypatch.setattr(table, "write", writing)


def test_a_claim_whose_answer_was_lost_is_the_tasks_own(twins: Twins,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _, task_arn = twins.launched("j1")
    answer_lost_once(twins, monkeypatch)
    claim = twins.store.claim_assigned(task_arn)
    assert claim is not None and claim.bundle.state == BundleState.RUNNING
    assert claim.bundle.job_ids == ["j1"]
    assert twins.store.claim_assigned(task_arn) is None  # claimed once only


def test_a_fenced_claim_whose_answer_was_lost_is_the_tasks_own(
        twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    bundle_id, task_arn = twins.launched("j1")
    rec = twins.store.table.get(r.bundle_key(bundle_id))
    assert rec is not None
    fence = Fence(bundle_id, int(rec.attempt or 0), task_arn)
    answer_lost_once(twins, monkeypatch)
    assert twins.store.claim(fence).bundle.state == BundleState.RUNNING
    with pytest.raises(ConflictError):  # claimed once only
        twins.store.claim(fence)
