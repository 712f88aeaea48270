"""The system model's ``tenants_apart`` and ``task_tags`` checks (tests/model_checks.py) where a
job's id is sent again after its record expired, while the bundle it ran in still runs.

A bundle of no tenant's labelled jobs runs one of them for half a year (heartbeating) after
another ended; the ended job's record expires after the retention period, and its id is sent
again, for t2 and without labels: a new job (docs/producing.md), recorded in a bundle of t2's.
The old bundle still lists the id. The checks took every id a bundle lists for its job: they
saw a bundle of no tenant holding t2's job, and a task tagged with labels its jobs did not
share. The dispatcher never mixed them: the new job ran on a task of its own bundle, and the
old bundle, rerun after its task died, ran its own job only (every reader of a bundle's jobs
skips a job whose record names another bundle). A bundle's jobs are those listed whose records
name it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from tests.model_checks import LABELS
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import (
    DAY,
    deliver_all,
    machines,
    rounds,
    seen_by,
    spec,
    task,
)

__all__ = ["machines"]  # the fixture, used by name


def id_sent_again_after_its_record_expired(m: model.SystemModel) -> None:
    m.submit(spec(labels=LABELS[0]), 3, False)  # j001 and j002 share a bundle
    m.tick(1)
    m.holds()
    first = task(m, 0)
    first.claim()
    first.start_next()
    first.start_next()
    first.finish("j002", "succeed")  # j001 runs on
    first.flush()
    m.sync()
    m.holds()
    m.advance(181 * DAY)
    m.holds()
    m.ttl()  # j002's record is gone: its id is forgotten
    m.holds()
    m.submit(spec(tenant="t2"), 1, True)  # j002 again, now t2's, without labels
    m.tick(1)
    m.holds()
    first.stop("EssentialContainerExited", "killed", 137)  # its bundle is rerun
    m.sync()
    deliver_all(m)
    m.holds()
    rounds(m, 4, "succeed", 5.0)


@pytest.mark.parametrize("check", ["tenants_apart", "task_tags"])
def test_an_id_sent_again_is_a_new_job_not_the_old_bundles(
        machines: Callable[[], model.SystemModel], check: str) -> None:
    m = machines()
    assert seen_by(m, check, id_sent_again_after_its_record_expired) == []
    view = m.view()
    old = next(b for b in view.bundles() if "j001" in b.job_ids)
    new = view.job("j002")
    assert "j002" in old.job_ids and old.tenant is None  # listed still, for life
    assert new is not None and new.tenant == "t2" and new.state == JobState.SUCCEEDED
    # It ran on tasks of its own bundle only, and the old bundle's rerun ran j001.
    assert {m.tasks[e["task_arn"]].key[0] for e in new.history} == {new.bundle_id}
    assert old.state == BundleState.DONE and m.runs["j001"] == 2
