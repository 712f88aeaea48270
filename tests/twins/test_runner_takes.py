"""The runner's take of a follow-on when the table's answer is lost (job_runner/next_bundle.py,
``FollowOnTaker.take``): a take that committed but raised is found on the task's pointer and
run, not charged to its jobs as a task that never claimed it."""

from __future__ import annotations

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.ports.table import Op, TableUnavailable, Update
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.store.base import TableRetry
from dispatcher.testing.memory_table import MemoryTable
from tests.twins import Twins
from tests.twins.test_follow_ons import ENV, backlog, run


class LosesTake(MemoryTable):
    """Once armed, commits the first take of a follow-on (the transaction that moves a batch's
    cursor) and then fails it and every retry of it (its token replays it) as a 5xx: the
    take is written, its runner never hears so."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.lost: str | None = None  # the lost take's token
        self.taken: str | None = None  # the follow-on it took

    def _transact_once(self, ops: list[Op], token: str) -> None:
        super()._transact_once(ops, token)
        takes = any(isinstance(op, Update) and op.pk.startswith("BATCH#") for op in ops)
        if self.armed and takes and self.lost is None:
            self.lost = token
            self.taken = next(r.ident(op.pk) for op in ops if isinstance(op, Update)
                              and op.pk.startswith("BUNDLE#") and op is not ops[0])
        if token == self.lost:
            raise TableUnavailable("TransactWriteItems", "InternalServerError",
                                   "Internal server error", status=500)


def test_a_take_whose_answer_was_lost_is_run_by_its_task() -> None:
    tw = Twins()
    table = LosesTake()
    tw.table = table
    tw.store = Store(table, clock=tw.clock, table_retry=TableRetry(attempts=2, first_wait=0,
                                                                    max_wait=0))
    ids = backlog(tw, 600)
    tw.stages(**ENV).tick.tick()
    arn = tw.task_arns()[0]
    table.armed = True
    ran = run(tw, arn)
    assert table.lost is not None and table.taken is not None
    taken = tw.bundle(table.taken)
    assert taken is not None and taken.task_arn == arn and taken.state == BundleState.DONE
    assert set(tw.store.job_ids_of(taken)) <= set(ran)  # run by the task that took it
    assert not [b for b in tw.bundles() if b.task_arn == arn
                and b.state != BundleState.DONE]  # nothing of it left for its stop
    assert len(ran) == len(set(ran))
    done = {j.job_id for j in tw.jobs() if j.state == JobState.SUCCEEDED}
    assert set(ran) == done and set(ran) <= set(ids)
