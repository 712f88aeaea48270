"""A bulk action's mark on the jobs it acted on (``dispatcher.store.bulk_marks``): kept in an
attribute of the job's own, not in its bounded history, so a resumed run (the same bulk id)
skips a job it acted on however many attempts the job ran since; the marks a job keeps are
bounded, and a resume that cannot tell whether it acted on a job refuses it, never acts twice;
a job marked the old way (in its history) is still recognised."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dispatcher.cli import bulk_commands
from dispatcher.cli.app import app
from dispatcher.domain import sizes
from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ops.bulk import BulkAction, BulkFilter, BulkVerb
from dispatcher.ports.table import Add, Put, Set, Update
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_table import MemoryTable
from tests.twins.test_bulk_actions import FakeClient, Interrupting

NOW = 1_800_000_000.0
RETRY_FAILED = BulkFilter(BulkVerb.RETRY, "FAILED")


def failed_jobs(store: Store, n: int, *, history: list[dict[str, object]] | None = None,
                prefix: str = "f") -> list[str]:
    ids = [f"{prefix}{i:04}" for i in range(n)]
    for i, j in enumerate(ids):
        store.table.write(Put(r.job_record(Job(
            job_id=j, kind="k", payload={}, estimated_seconds=1.0, state=JobState.FAILED,
            bundle_id=f"old-{j}", created_at=NOW - 3600 + i, attempts=3, max_attempts=20,
            history=history or [{"attempt": 3, "task_arn": "arn:t", "outcome": "error"}]))))
    return ids


def run_attempts(store: Store, job_id: str, n: int, *, end: JobState = JobState.FAILED) -> None:
    """``n`` attempts of the job, each recorded as the runner records one (its history entry
    appended and bounded, its attempts counted), then the job ends in ``end``."""
    for a in range(1, n + 1):
        job = store.get_job(job_id)
        assert job is not None
        entry = {"attempt": a, "task_arn": f"arn:task/{a}", "outcome": "error",
                 "started_at": NOW + a, "ended_at": NOW + a + 0.5}
        store.table.write(Update(r.job_key(job_id), [
            Set("state", str(JobState.RUNNING if a < n else end)),
            Set("status_key", r.job_status(JobState.RUNNING if a < n else end, job_id)),
            Add("attempts", 1), Set("history", sizes.bound_history([*job.history, entry]))]))


def test_a_resumed_bulk_retry_skips_a_job_that_ran_many_attempts_since_it_retried_it() -> None:
    table = Interrupting()
    store = Store(table, clock=lambda: NOW)
    ids = failed_jobs(store, 60)
    # Pages of 20 jobs (one transaction each, a retry being two actions): stopped in the
    # second page, after the first page's jobs were retried.
    action = BulkAction(store, clock=lambda: NOW, page=20)
    table.stop = table.made + 2
    with pytest.raises(KeyboardInterrupt):
        action.run(RETRY_FAILED, bulk_id="bulk-r", reason="fixed the bug")
    retried = [j.job_id for j in store.get_jobs(ids) if j.state == JobState.PENDING]
    assert 0 < len(retried) < 60
    # One retried job runs 11 more attempts and fails again: its history, bounded to its
    # first entry, an omitted count and the latest ones, no longer holds the retry.
    run_attempts(store, retried[0], 11)
    job = store.get_job(retried[0])
    assert job is not None and job.state == JobState.FAILED
    assert not any(h.get("by") == "bulk-r" for h in job.history)
    table.stop = 10**9
    report = action.run(RETRY_FAILED, bulk_id="bulk-r", reason="fixed the bug")
    # The resume retries the jobs the interrupted run did not reach, and skips the one it had
    # retried: selected again (FAILED again), not retried a second time.
    assert (report.acted, report.skipped, report.errors) == (60 - len(retried), 1, 0), report
    again = store.get_job(retried[0])
    assert again is not None and again.state == JobState.FAILED
    assert again.bundle_id == job.bundle_id
    # Another action (a new id) retries it: the mark is per action.
    assert action.run(RETRY_FAILED, bulk_id="bulk-s").acted == 1


def test_a_job_marked_in_its_history_before_the_marks_had_their_own_attribute_is_skipped(
) -> None:
    store = Store(MemoryTable(), clock=lambda: NOW)
    # Retried by bulk-r before this release: its mark only in its history's retry entry.
    old = failed_jobs(store, 3, prefix="old", history=[
        {"attempt": 3, "outcome": "error"},
        {"retried_at": NOW - 60, "after": "FAILED", "from_scratch": False, "by": "bulk-r",
         "reason": "fixed"}])
    new = failed_jobs(store, 2, prefix="new")
    report = BulkAction(store, clock=lambda: NOW).run(RETRY_FAILED, bulk_id="bulk-r")
    assert (report.acted, report.skipped, report.errors) == (2, 3, 0)
    assert all(j.state == JobState.FAILED and not j.bulk_ids for j in store.get_jobs(old))
    assert all(j.bulk_ids == ["bulk-r"] for j in store.get_jobs(new))


def test_a_new_action_acts_on_a_job_with_many_marks_and_a_resume_that_cannot_tell_refuses(
) -> None:
    store = Store(MemoryTable(), clock=lambda: NOW)
    (job_id,) = failed_jobs(store, 1)
    full = [f"bulk-{n:03}" for n in range(sizes.MAX_BULK_MARKS)]
    store.table.write(Update(r.job_key(job_id), [Set("bulk_ids", full)]))
    action = BulkAction(store, clock=lambda: NOW)
    # A resume (an id given) of an action the full list does not name: refused, reported.
    report = action.run(RETRY_FAILED, bulk_id="bulk-gone")
    assert (report.acted, report.skipped, report.errors) == (0, 0, 1)
    assert job_id in report.error_samples[0] and "cannot tell" in report.error_samples[0]
    # A new action (its id made now, or named by the caller as new) acts, the oldest mark
    # let go; the job's item keeps at most MAX_BULK_MARKS.
    assert action.run(RETRY_FAILED, bulk_id="bulk-fresh", resume=False).acted == 1
    job = store.get_job(job_id)
    assert job is not None and job.bulk_ids == [*full[1:], "bulk-fresh"]
    run_attempts(store, job_id, 1)
    report = action.run(RETRY_FAILED)
    assert report.acted == 1
    job = store.get_job(job_id)
    assert job is not None and job.bulk_ids == [*full[2:], "bulk-fresh", report.bulk_id]


@pytest.mark.parametrize("bulk_id", ["", "  ", "b" * (sizes.MAX_BULK_ID_BYTES + 1),
                                     "\u00e9" * (sizes.MAX_BULK_ID_BYTES // 2 + 1)])
def test_a_bulk_id_the_jobs_cannot_keep_is_refused_before_any_job_is_acted_on(
        bulk_id: str) -> None:
    store = Store(MemoryTable(), clock=lambda: NOW)
    ids = failed_jobs(store, 2)
    with pytest.raises(LongjobsError, match="bulk id"):
        BulkAction(store, clock=lambda: NOW).run(RETRY_FAILED, bulk_id=bulk_id)
    assert all(j.state == JobState.FAILED for j in store.get_jobs(ids))
    assert BulkAction(store, clock=lambda: NOW).run(
        RETRY_FAILED, bulk_id="b" * sizes.MAX_BULK_ID_BYTES).acted == 2


def test_the_cli_acts_as_a_new_action_unless_given_the_id_to_resume(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(MemoryTable(), clock=lambda: NOW)
    ids = failed_jobs(store, 2)
    full = [f"bulk-{n:03}" for n in range(sizes.MAX_BULK_MARKS)]
    store.table.write(Update(r.job_key(ids[0]), [Set("bulk_ids", full)]))
    monkeypatch.setattr(bulk_commands, "client", lambda: FakeClient(store))
    resumed = CliRunner().invoke(app, ["jobs", "retry", "--status", "FAILED", "--yes",
                                       "--bulk-id", "bulk-gone"])
    assert resumed.exit_code == 0, resumed.output
    assert "retried 1, errors 1" in resumed.output and "cannot tell" in resumed.output
    # Without --bulk-id, the CLI names a new id before it runs: a new action, which acts.
    fresh = CliRunner().invoke(app, ["jobs", "retry", "--status", "FAILED", "--yes"])
    assert fresh.exit_code == 0, fresh.output
    assert "retried 1, errors 0" in fresh.output
    assert all(j.state == JobState.PENDING for j in store.get_jobs(ids))
