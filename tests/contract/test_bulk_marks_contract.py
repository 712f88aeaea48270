"""A bulk action's marks (``dispatcher.store.bulk_marks``) on both tables: the list attribute
that keeps them, the equality fence on it, and the store's page actions that write them."""

from __future__ import annotations

import pytest

from dispatcher.domain import sizes
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import (
    ConditionFailed,
    Eq,
    Lacks,
    Put,
    Record,
    Set,
    Table,
    TransactionCancelled,
    Update,
)
from dispatcher.store import Store, job_ops
from dispatcher.store import codec as r
from tests.contract.tables import BACKENDS, Clock, make_store, make_table

T0 = 1_700_000_000.0


@pytest.fixture(params=BACKENDS)
def table(request: pytest.FixtureRequest) -> Table:
    return make_table(request)


def test_a_list_of_strings_is_set_and_compared_whole(table: Table) -> None:
    table.write(Put(Record("J#1", state="FAILED")))
    with pytest.raises(ConditionFailed):  # a missing list equals no list
        table.write(Update("J#1", [Set("bulk_ids", ["a"])], Eq("bulk_ids", [])))
    table.write(Update("J#1", [Set("bulk_ids", ["a"])], Lacks("bulk_ids")))
    table.write(Update("J#1", [Set("bulk_ids", ["a", "b"])], Eq("bulk_ids", ["a"])))
    for other in (["a"], ["b", "a"], ["a", "b", "c"]):  # order and length both count
        with pytest.raises(ConditionFailed):
            table.write(Update("J#1", [Set("bulk_ids", ["x"])], Eq("bulk_ids", other)))
    after = table.write(Update("J#1", [Set("bulk_ids", ["b", "c"])], Eq("bulk_ids", ["a", "b"])))
    assert after is not None and after == table.get("J#1") and after.bulk_ids == ["b", "c"]
    # Not in the status index: the item's own, read whole.
    table.write(Update("J#1", [Set("status_key", "JOB#FAILED"), Set("status_at", "t")]))
    (row,) = table.query("JOB#FAILED")
    assert row.bulk_ids is None and row.state == "FAILED"


def _failed(store: Store, *ids: str) -> None:
    for j in ids:
        store.table.write(Put(r.job_record(Job(
            job_id=j, kind="k", payload={}, state=JobState.FAILED, created_at=T0,
            bundle_id=f"old-{j}", history=[{"attempt": 1, "outcome": "error"}]))))


def _fail_again(store: Store, job_id: str) -> None:
    store.table.write(Update(r.job_key(job_id), [
        Set("state", "FAILED"), Set("status_key", r.job_status(JobState.FAILED, job_id))]))


def test_page_actions_mark_their_jobs_and_a_resume_skips_them(table: Table) -> None:
    store = make_store(table, Clock(T0))
    _failed(store, "a", "b")
    assert [o.done for o in store.retry_page(["a"], by="bulk-1")] == ["acted"]
    job = store.get_job("a")
    assert job is not None and job.bulk_ids == ["bulk-1"]
    assert job.history[-1]["by"] == "bulk-1"
    # The history no longer holds the retry (bounded: a dozen attempts since), the list does.
    table.write(Update(r.job_key("a"), [Set("history", [{"attempt": n} for n in range(9)])]))
    _fail_again(store, "a")
    outcomes = store.retry_page(["a", "b"], by="bulk-1", only=JobState.FAILED, resume=True)
    assert [o.done for o in outcomes] == ["skipped", "acted"]
    # A bulk cancel marks the job it cancels alike.
    assert store.cancel_page(["b"], by="bulk-2")[0].done == "acted"
    assert store.cancel_page(["b"], by="bulk-2", resume=True)[0].done == "skipped"
    job = store.get_job("b")
    assert job is not None and job.state == JobState.CANCELLED
    assert job.bulk_ids == ["bulk-1", "bulk-2"] and job.history[-1]["by"] == "bulk-2"


def test_a_write_made_from_a_stale_read_cannot_drop_a_mark(table: Table) -> None:
    store = make_store(table, Clock(T0))
    _failed(store, "a")
    stale = store.get_job("a")
    assert stale is not None
    # Another action retries it; it runs and fails again: FAILED, as the stale read saw it.
    store.retry_page(["a"], by="bulk-b")
    _fail_again(store, "a")
    with pytest.raises(TransactionCancelled):  # its list is no longer the one read
        table.transact(job_ops.retry_ops(stale, "new", t=T0, by="bulk-c"))
    job = store.get_job("a")
    assert job is not None and job.bulk_ids == ["bulk-b"]
    # Read again, the job is retried, and both marks are kept.
    assert [o.done for o in store.retry_page(["a"], by="bulk-c")] == ["acted"]
    job = store.get_job("a")
    assert job is not None and job.bulk_ids == ["bulk-b", "bulk-c"]


def test_a_job_keeps_its_latest_marks_and_a_resume_it_cannot_tell_is_refused(
        table: Table) -> None:
    store = make_store(table, Clock(T0))
    _failed(store, "a")
    full = [f"bulk-{n:03}" for n in range(sizes.MAX_BULK_MARKS)]
    table.write(Update(r.job_key("a"), [Set("bulk_ids", full)]))
    # A resume whose id the full list lacks may have been let go: refused, the job untouched.
    (refused,) = store.retry_page(["a"], by="bulk-old", resume=True)
    assert refused.done == "error" and "cannot tell whether bulk-old" in str(refused.error)
    assert store.get_job("a").state == JobState.FAILED  # type: ignore[union-attr]
    # A resume whose id the list holds skips it; a new action acts, letting the oldest go.
    assert store.retry_page(["a"], by=full[-1], resume=True)[0].done == "skipped"
    assert store.retry_page(["a"], by="bulk-new")[0].done == "acted"
    job = store.get_job("a")
    assert job is not None and job.bulk_ids == [*full[1:], "bulk-new"]
