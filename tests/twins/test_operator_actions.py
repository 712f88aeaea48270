"""Operator actions (cancel, retry, retention) leave no stale state behind, on the table twin."""

from __future__ import annotations

import pytest

from dispatcher.domain.errors import JobNotFound, LongjobsError
from dispatcher.domain.jobs import JobState, Rejection
from dispatcher.ports.table import Set, Update
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins.test_worker import ARN, CFG, launched, small


def test_a_success_clears_the_reason_an_earlier_attempt_left() -> None:
    table = MemoryTable()
    store = Store(table)
    launched(store, [small("a"), small("b")])
    table.write(Update(r.job_key("a"), [Set("reason", "interrupted: task stopping (SIGTERM)")]))
    Worker(CFG, store, HandlerRegistry({"ok": lambda p, ctx: "done"}), ARN).run()
    job = store.get_job("a")
    assert job is not None and job.state == JobState.SUCCEEDED and job.reason is None


@pytest.mark.parametrize("from_scratch", [False, True])
def test_retry_resumes_from_the_checkpoint_unless_from_scratch(from_scratch: bool) -> None:
    table = MemoryTable()
    store = Store(table)
    launched(store, [small("a")])
    table.write(Update(r.job_key("a"), [Set("state", "FAILED"),
                                        Set("status_key", r.job_status("FAILED", "a")),
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



def _expires(store: Store, pk: str) -> float | None:
    rec = store.table.get(pk)
    assert rec is not None
    return rec.expires_at


def test_finished_jobs_expire_after_the_retention_and_a_retry_keeps_them() -> None:
    """Terminal jobs, REJECTED records and DONE bundles get the TTL
    attribute (LONGJOBS_RETENTION_DAYS); a retried job loses it; 0 keeps everything."""
    t = 1_700_000_000.0
    store = Store(MemoryTable(), clock=lambda: t, retention_days=2)
    launched(store, [small("a"), small("b", "boom")])
    store.reject([Rejection(key="bad", message_id="m", reason="not JSON", body="{",
                            created_at=t)])

    def boom(payload: object, ctx: object) -> None:
        raise ValueError("no")

    store.table.write(Update(r.job_key("b"), [Set("max_attempts", 1)]))
    Worker(CFG, store, HandlerRegistry({"ok": lambda p, ctx: "done", "boom": boom}), ARN).run()
    two_days = int(t + 2 * 86400)
    assert _expires(store, r.job_key("a")) == two_days  # SUCCEEDED
    assert _expires(store, r.job_key("b")) == two_days  # FAILED
    assert _expires(store, r.bundle_key("b1")) == two_days  # DONE
    assert _expires(store, r.rejection_key("bad")) == two_days
    store.retry("b")
    assert _expires(store, r.job_key("b")) is None  # PENDING again: kept

    keep = Store(MemoryTable(), clock=lambda: t, retention_days=0)
    launched(keep, [small("c")])
    Worker(CFG, keep, HandlerRegistry({"ok": lambda p, ctx: "done"}), ARN).run()
    assert _expires(keep, r.job_key("c")) is None


def test_a_retry_keeps_the_jobs_size_priority_kind_limit_and_schedule() -> None:
    """The retry's bundle of one is launched as the job was admitted: its task size (an 8 GiB
    job must not rerun in the default 2 GiB), its priority, its kind's limit, its not_before."""
    from tests.twins import Twins

    tw = Twins()
    stages = tw.stages(LONGJOBS_KIND_LIMITS="report=1")
    later = tw.clock() + 3600
    client = tw.client()
    client.submit("report", {}, job_id="big", cpu=4096, memory=8192, priority="high")
    client.submit("report", {}, job_id="later", not_before=later)
    stages.tick.tick()
    for job_id in ("big", "later"):
        tw.table.write(Update(r.job_key(job_id), [Set("state", "FAILED"),
                                                  Set("status_key",
                                                      r.job_status("FAILED", job_id))]))
    first = next(b for b in tw.bundles() if "big" in b.job_ids)
    tw.table.write(Update(r.bundle_key(first.bundle_id),  # its task ended
                          [Set("state", "DONE"), Set("status_key", r.bundle_status("DONE"))]))
    big, scheduled = tw.store.retry("big"), tw.store.retry("later")
    retried = tw.bundle(big.bundle_id or "")
    assert retried is not None and retried.bundle_id != first.bundle_id
    assert (retried.resources.cpu, retried.resources.memory) == (4096, 8192)
    assert (str(retried.priority), retried.kind, retried.slots) == ("high", "report", 1)
    waiting = tw.bundle(scheduled.bundle_id or "")
    assert waiting is not None and waiting.next_attempt_at == later
    requests = len(tw.launcher.requests)
    stages.tick.tick()
    (request,) = tw.launcher.requests[requests:]  # the big one only: "later" is not due
    assert (request.resources.cpu, request.resources.memory) == (4096, 8192)
