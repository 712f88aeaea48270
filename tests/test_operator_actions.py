"""Operator actions leave no stale state behind (issue 10, defect 14), on the table twin."""

from __future__ import annotations

import pytest

from dispatcher.domain.errors import JobNotFound, LongjobsError
from dispatcher.domain.jobs import JobState, Rejection
from dispatcher.ports.store import Store
from dispatcher.ports.store import records as r
from dispatcher.ports.table import Set, Update
from dispatcher.testing.memory_table import MemoryTable
from job_runner.kinds import Registry
from job_runner.worker import Worker
from tests.test_worker import ARN, CFG, launched, small


def test_a_success_clears_the_reason_an_earlier_attempt_left() -> None:
    table = MemoryTable()
    store = Store(table)
    launched(store, [small("a"), small("b")])
    table.write(Update(r.job_key("a"), [Set("reason", "interrupted: task stopping (SIGTERM)")]))
    Worker(CFG, store, Registry({"ok": lambda p, ctx: "done"}), ARN).run()
    job = store.get_job("a")
    assert job is not None and job.state == JobState.SUCCEEDED and job.reason is None


@pytest.mark.parametrize("from_scratch", [False, True])
def test_retry_resumes_from_the_checkpoint_unless_from_scratch(from_scratch: bool) -> None:
    table = MemoryTable()
    store = Store(table)
    launched(store, [small("a")])
    table.write(Update(r.job_key("a"), [Set("state", "FAILED"),
                                        Set("status_key", r.job_status("FAILED")),
                                        Set("checkpoint", {"step": 7})]))
    job = store.retry("a", from_scratch=from_scratch)
    assert job.state == JobState.PENDING and job.attempts == 0
    assert job.checkpoint == (None if from_scratch else {"step": 7})


def test_cancel_and_retry_of_a_rejected_message_say_what_it_is() -> None:
    store = Store(MemoryTable())
    store.reject([Rejection(key="bad-1", message_id="m1", reason="not JSON: oops", body="{",
                            job_id="bad-1")])
    for action in (store.cancel, store.retry):
        with pytest.raises(LongjobsError, match=r"REJECTED.*not JSON") as caught:
            action("bad-1")
        assert not isinstance(caught.value, JobNotFound)
    with pytest.raises(JobNotFound):
        store.cancel("nope")

