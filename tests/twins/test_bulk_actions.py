"""Operator actions on many jobs (``dispatcher.ops.bulk``): each selected job acted on once,
with the single-job operations' writes and fences, a page of jobs in a few calls, one page of
the status index held at a time, resumable; a job that moves on meanwhile is reported and its
neighbours still acted on."""

from __future__ import annotations

import os
import weakref
from collections import Counter
from typing import Any

import pytest
from typer.testing import CliRunner

from dispatcher.cli import bulk_commands
from dispatcher.cli.app import app
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ops.bulk import BulkAction, BulkFilter, BulkVerb
from dispatcher.ports.table import Op, Put, Record, Set, Update
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.store.index import PAGE
from dispatcher.testing.memory_table import MemoryTable

T0 = 1_800_000_000.0
# The bulk cancel's size: enough that every shard of the index is walked past its first page
# (9 partitions of 100-row pages); its bounds are per job or counts of rows held, so they hold
# at any size (LONGJOBS_BULK_JOBS runs another). The 10,000-job cancel on moto, with its peak
# RSS and calls per job, is a benchmark: bench/bulk.py.
BULK_JOBS = int(os.environ.get("LONGJOBS_BULK_JOBS", "2000"))
NOW = T0 + 10 * 3600


class Counting(MemoryTable):
    """The twin, counting the calls the store makes (each one request to DynamoDB) and the
    index rows its caller holds: each row a query returns counts until it is freed."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.rows_held = 0
        self.most_rows_held = 0

    def get(self, pk: str) -> Record | None:
        self.calls["GetItem"] += 1
        return super().get(pk)

    def get_many(self, pks: list[str]) -> list[Record]:
        self.calls["BatchGetItem"] += max(1, -(-len(pks) // 100))
        return super().get_many(pks)

    def query(self, status_key: str, **kw: Any) -> list[Record]:
        self.calls["Query"] += 1
        rows = super().query(status_key, **kw)
        for row in rows:
            weakref.finalize(row, self._freed)
        self.rows_held += len(rows)
        self.most_rows_held = max(self.most_rows_held, self.rows_held)
        return rows

    def _freed(self) -> None:
        self.rows_held -= 1

    def count(self, status_key: str, **kw: Any) -> int:
        self.calls["Query(COUNT)"] += 1
        return super().count(status_key, **kw)

    def _transact(self, ops: list[Op]) -> None:
        self.calls["TransactWriteItems"] += 1
        super()._transact(ops)


def pending(store: Store, n: int, *, kind: str = "k", at: float = T0, prefix: str = "j",
            per_bundle: int = 10, same_time: int = 1000) -> list[str]:
    """``n`` PENDING jobs in PENDING bundles, as the tick records them: ``same_time`` jobs
    share one creation time (a tick's batch), so the index holds long runs of equal keys."""
    ids = [f"{prefix}{i:06}" for i in range(n)]
    for start in range(0, n, per_bundle):
        chunk = ids[start:start + per_bundle]
        bid = f"b-{prefix}{start}"
        jobs = [Job(job_id=j, kind=kind, payload={"n": j}, estimated_seconds=1.0,
                    bundle_id=bid, created_at=at + (start + i) // same_time)
                for i, j in enumerate(chunk)]
        store.record([Bundle(bid, chunk, created_at=at)], jobs)
    return ids


def failed(store: Store, n: int, *, kind: str = "k", at: float = T0, prefix: str = "f",
           state: JobState = JobState.FAILED) -> list[str]:
    ids = [f"{prefix}{i:05}" for i in range(n)]
    for i, j in enumerate(ids):
        job = Job(job_id=j, kind=kind, payload={}, estimated_seconds=1.0, state=state,
                  bundle_id=f"old-{j}", created_at=at + i // 100, attempts=3,
                  history=[{"attempt": 3, "task_arn": "arn:t", "outcome": "error"}])
        store.table.write(Put(r.job_record(job)))
    return ids


def states(store: Store, ids: list[str]) -> Counter[str]:
    return Counter(str(j.state) for j in store.get_jobs(ids))


def test_a_bulk_cancel_of_every_pending_job_holds_one_page_at_a_time() -> None:
    table = Counting()
    store = Store(table, clock=lambda: NOW)
    ids = pending(store, BULK_JOBS, per_bundle=4)
    keys = r.job_statuses(JobState.PENDING)
    # Holding every index row at once: what the count below shows the walk does not do.
    rows = [row for k in keys for row in table.query(k)]
    assert len(rows) == BULK_JOBS == table.most_rows_held
    # Every shard (all but the last, unsharded, key) holds more than one page: each is paged.
    per_key = Counter(row.status_key for row in rows)
    assert min(per_key[k] for k in keys[:-1]) > PAGE and per_key[keys[-1]] == 0
    del rows
    assert table.rows_held == 0
    table.calls.clear()
    table.most_rows_held = 0

    action = BulkAction(store, clock=lambda: NOW)
    report = action.run(BulkFilter(BulkVerb.CANCEL, "PENDING"), bulk_id="bulk-a",
                        reason="wrong input")
    calls = Counter(table.calls)

    assert (report.matched, report.acted, report.requested, report.skipped,
            report.errors) == (BULK_JOBS, BULK_JOBS, 0, 0, 0)
    assert states(store, ids) == {"CANCELLED": BULK_JOBS}
    # The walk holds one page of index rows at a time: two for a moment, while the next
    # query's answer is built and the page before is still named; never more, whatever the
    # number of jobs (rows held through the run would count all of them, as above).
    assert PAGE < table.most_rows_held <= 2 * PAGE < BULK_JOBS, table.most_rows_held
    assert table.rows_held == 0
    # A page of 100 jobs at once: the jobs, their bundles and the bundles' other jobs read
    # in a few BatchGetItem calls (100 keys each), the cancels written in transactions of up
    # to 100 actions (each bundle's jobs and its close in one); no GetItem at all. One job at
    # a time cost 5 calls a job (3 GetItem, 1 BatchGetItem, 1 TransactWriteItems).
    assert calls["GetItem"] == 0, calls
    assert calls["TransactWriteItems"] <= BULK_JOBS / PAGE * 3, calls
    assert calls["BatchGetItem"] <= BULK_JOBS / PAGE * 6, calls
    assert sum(calls.values()) / BULK_JOBS <= 0.1, calls
    # The walk: one query per 100 rows (and one past each shard).
    assert BULK_JOBS / PAGE <= calls["Query"] <= BULK_JOBS / PAGE + len(keys)
    assert calls["Query(COUNT)"] == len(keys)
    job = store.get_job(ids[0])
    assert job is not None and job.reason is not None and "wrong input" in job.reason
    assert job.history[-1]["by"] == "bulk-a" and "status=PENDING" in job.history[-1]["reason"]
    # Every bundle closed with its last job.
    assert table.count(r.bundle_status("DONE")) == BULK_JOBS // 4


class Interrupting(MemoryTable):
    """A table that stops (as a killed process would) at its transaction number ``stop``,
    counting the jobs the transactions before it retried (each retry updates its job)."""

    stop = 10**9
    made = 0
    retried = 0

    def _transact(self, ops: list[Op]) -> None:
        self.made += 1
        if self.made == self.stop:
            raise KeyboardInterrupt
        super()._transact(ops)
        self.retried += sum(1 for op in ops if isinstance(op, Update)
                            and op.pk.startswith("JOB#"))


def test_an_interrupted_bulk_retry_resumed_acts_on_each_remaining_job_once() -> None:
    table = Interrupting()
    store = Store(table, clock=lambda: NOW)
    ids = failed(store, 1_000)
    # Pages of 196 jobs (200 rounded down to whole retry bundles): two bundles of 98, each
    # a transaction with its jobs, so the stop falls in the middle of a page.
    action = BulkAction(store, clock=lambda: NOW, page=200)
    f = BulkFilter(BulkVerb.RETRY, "FAILED")
    table.stop = table.made + 8
    with pytest.raises(KeyboardInterrupt):
        action.run(f, bulk_id="bulk-r", reason="fixed the bug")
    first = table.retried
    assert 0 < first < 1_000
    assert states(store, ids) == {"PENDING": first, "FAILED": 1_000 - first}
    # Some retried jobs failed again before the resumed run: in FAILED again, selected
    # again, and skipped (this bulk id's mark), not retried a second time.
    again = [j.job_id for j in store.get_jobs(ids) if j.state == JobState.PENDING][:40]
    for j in again:
        store.table.write(Update(r.job_key(j), [
            Set("state", "FAILED"), Set("status_key", r.job_status(JobState.FAILED, j))]))
    table.stop = 10**9
    report = action.run(f, bulk_id="bulk-r", reason="fixed the bug")
    assert (report.acted, report.skipped, report.errors) == (1_000 - first, 40, 0)
    assert table.retried == 1_000
    marks = Counter(sum(1 for h in j.history if h.get("by") == "bulk-r")
                    for j in store.get_jobs(ids))
    assert marks == {1: 1_000}  # every job retried by this action exactly once
    # A new action (another id) may retry them again: the mark is per action.
    assert action.run(f, bulk_id="bulk-s").acted == 40


def test_the_filters_select_exactly_the_matching_jobs() -> None:
    store = Store(MemoryTable(), clock=lambda: NOW)
    old_a = pending(store, 30, kind="a", at=T0, prefix="oa")
    new_a = pending(store, 40, kind="a", at=NOW - 600, prefix="na")
    new_b = pending(store, 20, kind="b", at=NOW - 600, prefix="nb")
    failed_a = failed(store, 25, kind="a", at=NOW - 600, prefix="fa")
    action = BulkAction(store, clock=lambda: NOW, page=7)
    pick = BulkFilter(BulkVerb.CANCEL, "pending", kind="a", since_seconds=3600)
    assert action.count(pick) == 40
    report = action.run(pick, bulk_id="bulk-f")
    assert (report.matched, report.acted) == (40, 40)
    assert states(store, new_a) == {"CANCELLED": 40}
    assert states(store, old_a + new_b) == {"PENDING": 50}
    assert states(store, failed_a) == {"FAILED": 25}
    by_kind = action.run(BulkFilter(BulkVerb.CANCEL, "PENDING", kind="b"), bulk_id="bulk-g")
    assert by_kind.acted == 20 and states(store, old_a) == {"PENDING": 30}
    with pytest.raises(Exception, match="one of FAILED, CANCELLED"):
        BulkFilter(BulkVerb.RETRY, "PENDING")


class Racing(Counting):
    """Another writer moves jobs on between the bulk action's reads and its writes:
    ``move_on`` is called once, with the jobs the first transaction writes, just before it."""

    def __init__(self, move_on: Any) -> None:
        super().__init__()
        self.move_on = move_on

    def _transact(self, ops: list[Op]) -> None:
        move_on, self.move_on = self.move_on, None
        if move_on is not None:
            move_on(sorted(op.pk.split("#", 1)[1] for op in ops if op.pk.startswith("JOB#")))
        super()._transact(ops)


def test_jobs_that_move_on_in_the_middle_of_a_batch_are_skipped_and_reported() -> None:
    moved: dict[str, list[str]] = {}

    def move_on(batch: list[str]) -> None:
        """In the middle of the batch: a job of every third bundle cancelled by another
        operator, one finished (its item rewritten as SUCCEEDED by another writer), and one
        bundle launched (its fence moves on, its jobs stay PENDING until they start)."""
        bundles = sorted({bundle_of[j] for j in batch})
        launched = bundles[1]
        cancelled = [next(j for j in batch if bundle_of[j] == b) for b in bundles[2::3]]
        finished = next(j for j in batch if bundle_of[j] not in (launched, bundle_of[
            cancelled[0]]))
        for j in cancelled:
            other.cancel(j)
        table.write(Update(r.job_key(finished), [
            Set("state", "SUCCEEDED"), Set("status_key",
                                           r.job_status(JobState.SUCCEEDED, finished))]))
        table.write(Update(r.bundle_key(launched), [Set("state", "LAUNCHED")]))
        moved.update(batch=batch, cancelled=cancelled, finished=[finished],
                     launched=[j for j in batch if bundle_of[j] == launched])

    table = Racing(None)
    store = Store(table, clock=lambda: NOW)
    ids = pending(store, 100)  # ten bundles of ten
    bundle_of = {j: f"b-j{i // 10 * 10}" for i, j in enumerate(ids)}
    other = Store(table, clock=lambda: NOW)  # another operator, on the same table
    table.move_on = move_on
    table.calls.clear()
    report = BulkAction(store, clock=lambda: NOW).run(
        BulkFilter(BulkVerb.CANCEL, "PENDING"), bulk_id="bulk-x", reason="bad input")
    gone = {*moved["cancelled"], *moved["finished"]}
    assert len(moved["batch"]) > 5 and len(gone) >= 2 and moved["launched"]
    # Each one that moved on is reported, never written over: the other operator's cancel
    # keeps its own reason and history, the finished job stays SUCCEEDED.
    assert report.errors == len(gone), report
    assert sorted(e.split(":")[0] for e in report.error_samples) == sorted(gone)
    assert all("no longer PENDING" in e for e in report.error_samples), report.error_samples
    jobs = {j.job_id: j for j in store.get_jobs(ids)}
    assert not any(h.get("by") == "bulk-x" for j in gone for h in jobs[j].history)
    assert str(jobs[moved["finished"][0]].state) == "SUCCEEDED"
    assert all(str(jobs[j].state) == "CANCELLED" for j in moved["cancelled"])
    # Their neighbours, in the same transactions, were acted on all the same: cancelled,
    # with this action's mark, their bundles closed; those of the launched bundle (whose
    # fence moved on) were asked of its task, as a single cancel does.
    asked = [j for j in moved["launched"] if j not in gone]
    rest = [j for j in ids if j not in gone and bundle_of[j] != bundle_of[asked[0]]]
    assert (report.acted, report.requested) == (len(rest), 10), report
    assert all(str(jobs[j].state) == "CANCELLED" and jobs[j].history[-1]["by"] == "bulk-x"
               for j in rest)
    bundle = table.get(r.bundle_key(bundle_of[asked[0]]))
    assert bundle is not None and str(bundle.state) == "LAUNCHED"
    assert sorted(bundle.cancel_jobs or []) == sorted(
        j for j in ids if bundle_of[j] == bundle_of[asked[0]])
    assert table.count(r.bundle_status("DONE")) == 9
    # The refused transaction was made again without the refused bundles, not given up: a
    # few transactions a page, and the single cancels of the refused bundles' jobs.
    assert table.calls["TransactWriteItems"] <= 2 * len(gone) + 3 * 10, table.calls


def snapshot(table: MemoryTable) -> dict[str, Any]:
    return {pk: rec.present() for pk, rec in table._items.items()}


def test_a_dry_run_changes_nothing_and_reports_the_count() -> None:
    table = MemoryTable()
    store = Store(table, clock=lambda: NOW)
    pending(store, 120, kind="a")
    pending(store, 30, kind="b", prefix="x")
    before = snapshot(table)
    report = BulkAction(store, clock=lambda: NOW).run(
        BulkFilter(BulkVerb.CANCEL, "PENDING", kind="a"), dry_run=True)
    assert (report.matched, report.acted, report.dry_run) == (120, 0, True)
    assert snapshot(table) == before


class FakeClient:
    def __init__(self, store: Store) -> None:
        self.store = store

    def bulk(self, verb: str, *, status: str, kind: str | None = None,
             since_seconds: float | None = None,
             label: str | None = None,
             tenant: str | None = None) -> tuple[BulkAction, BulkFilter]:
        return (BulkAction(self.store, clock=lambda: NOW),
                BulkFilter(BulkVerb(verb), status, kind, since_seconds, label, tenant))


def test_the_cli_without_yes_and_without_a_terminal_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(MemoryTable(), clock=lambda: NOW)
    ids = pending(store, 20)
    monkeypatch.setattr(bulk_commands, "client", lambda: FakeClient(store))
    out = CliRunner().invoke(app, ["jobs", "cancel", "--status", "PENDING"])  # stdin: no TTY
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        "error: refusing to cancel many jobs without confirmation: stdin is not a terminal; "
        "pass --yes (or --dry-run to count them)"]
    assert states(store, ids) == {"PENDING": 20}
    dry = CliRunner().invoke(app, ["jobs", "cancel", "--status", "PENDING", "--dry-run"])
    assert dry.exit_code == 0 and "20 job(s) match" in dry.output
    assert states(store, ids) == {"PENDING": 20}
    both = CliRunner().invoke(app, ["jobs", "cancel", "j000001", "--status", "PENDING"])
    assert both.exit_code == 2 and "not both" in both.output
    one_dry = CliRunner().invoke(app, ["jobs", "cancel", "j000001", "--dry-run"])
    assert one_dry.exit_code == 2 and "not both" in one_dry.output
    done = CliRunner().invoke(app, ["jobs", "cancel", "--status", "PENDING", "--yes",
                                    "--reason", "load test"])
    assert done.exit_code == 0, done.output
    assert "cancelled 20, errors 0" in done.output
    assert states(store, ids) == {"CANCELLED": 20}


def test_a_bundle_with_more_jobs_in_a_page_than_a_transaction_holds_is_closed_once() -> None:
    table = Counting()
    store = Store(table, clock=lambda: NOW)
    ids = pending(store, 2_000, per_bundle=2_000)  # one bundle, recorded in pages
    rec = table.get(r.bundle_key("b-j0"))
    assert rec is not None and (rec.pages or 0) > 1
    table.calls.clear()
    # Pages of up to 1,000 index rows: over 200 of the bundle's jobs in each, cancelled in
    # parts of 99 (and the bundle's write): only the last part of the last page closes it.
    report = BulkAction(store, clock=lambda: NOW, page=1_000).run(
        BulkFilter(BulkVerb.CANCEL, "PENDING"), bulk_id="bulk-p")
    assert (report.acted, report.errors) == (2_000, 0), report
    assert states(store, ids) == {"CANCELLED": 2_000}
    bundle = table.get(r.bundle_key("b-j0"))
    assert bundle is not None and str(bundle.state) == "DONE"
    assert all(p.expires_at for p in table.get_many(
        [r.page_key("b-j0", n) for n in range(rec.pages or 0)]))
    assert table.calls["TransactWriteItems"] <= 2_000 / 99 + 9 + 1, table.calls


def test_a_bulk_retry_leaves_out_the_jobs_another_operator_retried_meanwhile() -> None:
    table = Racing(None)
    store = Store(table, clock=lambda: NOW)
    ids = failed(store, 300)
    other = Store(table, clock=lambda: NOW)
    taken: list[str] = []

    def move_on(batch: list[str]) -> None:
        taken.extend(batch[::7])
        for j in taken:
            other.retry(j, reason="by hand")

    table.move_on = move_on
    report = BulkAction(store, clock=lambda: NOW).run(
        BulkFilter(BulkVerb.RETRY, "FAILED"), bulk_id="bulk-y")
    assert len(taken) >= 3
    assert (report.acted, report.errors) == (300 - len(taken), len(taken)), report
    jobs = {j.job_id: j for j in store.get_jobs(ids)}
    assert all(str(j.state) == "PENDING" for j in jobs.values())
    # Each retried once: by the other operator (its words kept) or by this action.
    assert all("by hand" in (jobs[j].reason or "") and not any(
        h.get("by") == "bulk-y" for h in jobs[j].history) for j in taken)
    assert all(jobs[j].history[-1]["by"] == "bulk-y" for j in ids if j not in taken)
    # No bundle names a job another retry took: each lists exactly the jobs that are in it.
    members: dict[str, set[str]] = {}
    for j in jobs.values():
        members.setdefault(r.bundle_key(j.bundle_id or ""), set()).add(j.job_id)
    bundles = store.bundle_records([j.bundle_id or "" for j in jobs.values()])
    assert {b.pk: set(b.job_ids or ()) for b in bundles} == members
