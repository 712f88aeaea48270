"""A job's page lists its state changes, as its record tells them, numbered as its events
are; an array's parent lists none (its children tell its path)."""

from __future__ import annotations

import re

from dispatcher.domain.jobs import JobState
from dispatcher.store import JobUpdate
from tests.twins import Twins, finish_as_runner
from tests.twins.test_console import console


def ran_and_failed(twins: Twins, job_id: str) -> None:
    """A job run and failed as a runner writes it: its start, then its end, each with the
    history entry of its run."""
    twins.client().submit("k", {}, job_id=job_id, max_attempts=1)
    twins.stages().tick.tick()
    fence = finish_as_runner(twins.store, job_id, JobState.RUNNING)
    t = twins.clock()
    entry = {"attempt": 1, "task_arn": fence.task_arn, "started_at": t}
    twins.store.apply(fence, [JobUpdate(job_id, JobState.RUNNING, JobState.RUNNING,
                                        history=[entry])])
    twins.clock.advance(5.0)
    done = {**entry, "ended_at": twins.clock(), "outcome": "FAILED", "reason": "it broke"}
    twins.store.apply(fence, [JobUpdate(job_id, JobState.RUNNING, JobState.FAILED,
                                        history=[done], reason="it broke")])


def test_a_failed_jobs_page_lists_its_state_changes(twins: Twins) -> None:
    ran_and_failed(twins, "j1")
    web, _ = console(twins)
    page = web.get("/jobs/j1").text
    table = page.split('<table class="changes" id="state-changes">', 1)[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>(\d)</td><td>[^<]*</td><td>([^<]*)</td><td><span[^>]*>(\w+)<",
                      table)
    assert rows == [("1", "(created)", "PENDING"), ("2", "PENDING", "RUNNING"),
                    ("3", "RUNNING", "FAILED")]
    assert "numbered 1 to 3." in page


def test_a_job_not_yet_changed_lists_no_path(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="j2")
    twins.stages().tick.tick()
    web, _ = console(twins)
    assert 'id="state-changes"' not in web.get("/jobs/j2").text
