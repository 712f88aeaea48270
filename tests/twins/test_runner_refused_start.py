"""A job whose start the table refuses is not run (job_runner/worker.py, ``Worker._run_job``):
a bundle that writes each start at once (lifecycle.writes_through) hears at its start that the
job moved on meanwhile (cancelled), and its handler never runs."""

from __future__ import annotations

from typing import Any

from dispatcher import settings
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.ports.table import Put
from dispatcher.store import JobUpdate
from dispatcher.store import codec as r
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins

RUNNER = settings.load("runner", {"LONGJOBS_TABLE": "t", "LONGJOBS_FLUSH_SECONDS": "0"})


def test_a_job_cancelled_before_its_start_is_written_is_not_run(twins: Twins) -> None:
    bundle_id, arn = twins.launched("j1")  # a bundle of one job: every write goes through
    apply = twins.store.apply

    def cancelled_first(fence: Any, updates: list[JobUpdate], *args: Any,
                        **kwargs: Any) -> set[str]:
        if any(u.job_id == "j1" and u.target == JobState.RUNNING for u in updates):
            job = twins.job("j1")  # a cancel wrote it CANCELLED as the runner started it
            assert job is not None and job.state == JobState.PENDING
            job.state, job.reason = JobState.CANCELLED, "cancelled by an operator"
            twins.table.write(Put(r.job_record(job)))
        return apply(fence, updates, *args, **kwargs)

    twins.store.apply = cancelled_first  # type: ignore[method-assign]
    ran: list[str] = []
    registry = HandlerRegistry({"k": lambda payload, ctx: ran.append(ctx.job_id)})
    assert Worker(RUNNER, twins.store, registry, arn).run() == 0
    assert ran == []
    job = twins.job("j1")
    assert job is not None and job.state == JobState.CANCELLED
    assert job.reason == "cancelled by an operator"
    bundle = twins.bundle(bundle_id)
    assert bundle is not None and bundle.state == BundleState.DONE
