"""A retry packs its jobs into bundles as admission does (dispatcher/domain/bundle_sizes.py):
many small jobs retried at once (an array's failed children, a bulk retry) share a few tasks
instead of taking one each, and each retried job still runs once; a job whose earlier run may
still be alive is still held in a bundle of its own."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

from dispatcher.domain import arrays, lifecycle
from dispatcher.domain.bundles import Bundle, BundleState, untaken_follow_on
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import Set, Update
from dispatcher.store import codec as r
from dispatcher.store.job_ops import RETRY_BUNDLE_JOBS
from dispatcher.wiring import pipeline
from tests.twins import Twins
from tests.twins.test_array_jobs import drive

N = 200
# The outage's world: four tasks at once, ten jobs each at a time.
CFG = {"LONGJOBS_MAX_RUNNING_TASKS": "4", "LONGJOBS_TASK_CONCURRENCY": "10"}
ESTIMATE = 1.0
# How a task that ended its work stops (its container exited 0).
EXITED = ("EssentialContainerExited", "Essential container in task exited", 0)


def fail_first(ran: Counter[str]) -> Callable[[Job], JobState]:
    """Each job's first run fails (an outage); every later run succeeds (``ran`` counts a
    run before its outcome is asked)."""
    def outcome(job: Job) -> JobState:
        return JobState.FAILED if ran[job.job_id] == 1 else JobState.SUCCEEDED
    return outcome


def bound(t: Twins) -> int:
    """Bundles that N jobs of ESTIMATE seconds need at most by the sizing rule admission
    packs by (the deployment's settings), each bundle written in one transaction."""
    rule = pipeline.bundle_sizes(t.config(**CFG))
    per = min(RETRY_BUNDLE_JOBS, rule.bundle_max_jobs,
              int(rule.max_work_seconds // ESTIMATE))
    return math.ceil(N / per)


def bundles_of(t: Twins, job_ids: list[str]) -> list[Bundle]:
    ids = {j.bundle_id for j in t.store.get_jobs(job_ids)}
    out = [b for b in t.bundles() if b.bundle_id in ids]
    assert len(out) == len(ids)
    return out


def test_an_arrays_retry_of_many_small_failed_children_shares_few_tasks() -> None:
    t = Twins()
    t.client().submit("k", {}, job_id="a", array_size=N, max_attempts=1,
                      estimated_seconds=ESTIMATE)
    ran: Counter[str] = Counter()
    children = [arrays.child_id("a", i) for i in range(N)]
    drive(t, 3, fail_first(ran), ran, **CFG)
    parent = t.job("a")
    assert parent is not None and parent.state == JobState.FAILED
    admitted = len(bundles_of(t, children))
    tasks = len(t.task_arns())
    assert admitted == tasks  # one task a bundle

    t.client().retry("a", reason="the outage is over")
    retried = bundles_of(t, children)
    assert len(retried) <= min(admitted, bound(t)), [len(b.job_ids) for b in retried]
    assert all(b.batch is not None and not untaken_follow_on(b) for b in retried)
    drive(t, 3, fail_first(ran), ran, **CFG)
    assert len(t.task_arns()) - tasks <= len(retried)
    assert ran == {c: 2 for c in children}  # each retried child ran once more
    assert {j.state for j in t.store.get_jobs(children)} == {JobState.SUCCEEDED}
    parent = t.job("a")
    assert parent is not None and parent.state == JobState.SUCCEEDED, parent.reason


def failed_jobs(t: Twins, ran: Counter[str]) -> list[str]:
    """N small jobs admitted at once whose only run failed."""
    ids = [f"j{i:03}" for i in range(N)]
    t.client().submit_many([{"kind": "k", "payload": {}, "job_id": j, "max_attempts": 1,
                             "estimated_seconds": ESTIMATE} for j in ids])
    drive(t, 3, fail_first(ran), ran, **CFG)
    assert {j.state for j in t.store.get_jobs(ids)} == {JobState.FAILED}
    return ids


def test_a_bulk_retry_of_many_small_failed_jobs_shares_few_tasks() -> None:
    t = Twins()
    ran: Counter[str] = Counter()
    ids = failed_jobs(t, ran)
    admitted = len(bundles_of(t, ids))
    tasks = len(t.task_arns())

    report = t.client().bulk_retry(status="FAILED", reason="the outage is over")
    assert (report.acted, report.errors) == (N, 0)
    retried = bundles_of(t, ids)
    assert len(retried) <= min(admitted, bound(t)), [len(b.job_ids) for b in retried]
    assert all(b.batch is not None and not untaken_follow_on(b) for b in retried)
    drive(t, 3, fail_first(ran), ran, **CFG)
    assert len(t.task_arns()) - tasks <= len(retried)
    assert ran == {j: 2 for j in ids}
    assert {j.state for j in t.store.get_jobs(ids)} == {JobState.SUCCEEDED}


def test_a_retry_of_more_bundles_than_free_slots_runs_in_the_slots_tasks() -> None:
    """Nine bundles' worth of failed small jobs retried with two slots: the tick launches two
    tasks, and each, its bundle done, takes the retry's next bundle still due (as an admitted
    batch's tasks take its follow-ons), so the retry takes two task starts, not nine."""
    t = Twins()
    cfg = {**CFG, "LONGJOBS_MAX_RUNNING_TASKS": "2"}
    many = 9 * RETRY_BUNDLE_JOBS
    ids = [f"j{i:04}" for i in range(many)]
    ran: Counter[str] = Counter()
    t.client().submit_many([{"kind": "k", "payload": {}, "job_id": j, "max_attempts": 1,
                             "estimated_seconds": ESTIMATE} for j in ids])
    drive(t, 3, fail_first(ran), ran, **cfg)
    assert {j.state for j in t.store.get_jobs(ids)} == {JobState.FAILED}
    tasks = len(t.task_arns())

    assert t.client().bulk_retry(status="FAILED").acted == many
    assert len(bundles_of(t, ids)) == 9
    drive(t, 2, fail_first(ran), ran, **cfg)
    assert ran == {j: 2 for j in ids}
    assert len(t.task_arns()) - tasks == 2


def test_a_single_jobs_retry_is_a_bundle_of_its_own_as_before() -> None:
    t = Twins()
    ran: Counter[str] = Counter()
    t.client().submit("k", {}, job_id="one", max_attempts=1, estimated_seconds=ESTIMATE)
    drive(t, 1, fail_first(ran), ran, **CFG)
    job = t.client().retry("one")
    assert job.state == JobState.PENDING
    bundle = t.bundle(job.bundle_id or "")
    assert bundle is not None and bundle.job_ids == ["one"]
    assert (bundle.state, bundle.slots, bundle.kind, bundle.batch) == \
        (BundleState.PENDING, 1, "k", None)
    assert bundle.next_attempt_at == t.clock()
    drive(t, 1, fail_first(ran), ran, **CFG)
    assert ran == {"one": 2}
    done = t.job("one")
    assert done is not None and done.state == JobState.SUCCEEDED


def test_a_job_whose_run_may_still_be_alive_is_held_alone_while_the_others_share() -> None:
    t = Twins()
    ran: Counter[str] = Counter()
    ids = failed_jobs(t, ran)
    # One job failed as overdue while its task ran on: that run may still be alive there.
    live, arn = ids[7], t.launcher.running()[0]
    t.table.write(Update(r.job_key(live), [Set("live_task", arn)]))

    report = t.client().bulk_retry(status="FAILED")
    assert (report.acted, report.errors) == (N, 0)
    held = t.bundle(t.store.get_jobs([live])[0].bundle_id or "")
    assert held is not None and held.job_ids == [live]
    assert held.state == BundleState.PENDING and held.next_attempt_at == lifecycle.HELD_AT
    others = bundles_of(t, [j for j in ids if j != live])
    assert len(others) <= bound(t) and all(live not in b.job_ids for b in others)
    drive(t, 2, fail_first(ran), ran, **CFG)
    assert ran[live] == 1  # not run again while that task may still run it
    assert {j: n for j, n in ran.items() if j != live} == {j: 2 for j in ids if j != live}
    t.launcher.stop_task(arn, *EXITED)
    drive(t, 2, fail_first(ran), ran, **CFG)  # known stopped: released, and run once
    assert ran == {j: 2 for j in ids}
