"""Labels on the tasks' tags: a task launched for a bundle is tagged ``longjobs:label:<key>``
with each label every job of its bundle has, so that AWS's split cost allocation can be
matched against ours by label as by kind and tenant. The status index holds no labels: a due
bundle launched by a later tick has its item read for them, only when its id says it may
have some, and a recovered launch repeats its request, tags and all."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.domain import labels
from dispatcher.domain.bundles import BundleState, labelled
from dispatcher.ports.launcher import LaunchRequest
from dispatcher.stages.policy import LaunchPolicy
from tests.twins import Twins
from tests.twins.test_labels import run_every_bundle

ONE_SLOT = {"LONGJOBS_MAX_RUNNING_TASKS": "1"}


def _label_tags(request: LaunchRequest) -> dict[str, str]:
    return {k: v for k, v in request.tags.items() if k.startswith(labels.TAG_PREFIX)}


def _reads(twins: Twins, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every BatchGetItem of bundle items the table is asked for, as the keys asked."""
    asked: list[list[str]] = []
    real = twins.table.get_many

    def counted(pks: list[str], *args: Any, **kwargs: Any) -> Any:
        if any(pk.startswith("BUNDLE#") for pk in pks):
            asked.append(list(pks))
        return real(pks, *args, **kwargs)

    monkeypatch.setattr(twins.table, "get_many", counted)
    return asked


def test_a_task_is_tagged_with_the_labels_all_its_jobs_share(twins: Twins) -> None:
    client = twins.client()
    given = {f"j{n}": {"customer": "acme", "pipeline": f"p{n % 2}"} for n in range(6)}
    client.submit_many([{"kind": "k", "payload": {}, "job_id": j, "estimated_seconds": 1,
                         "labels": given[j]} for j in given])
    client.submit("k", {}, job_id="plain", estimated_seconds=1, tenant="t")
    twins.stages(**ONE_SLOT).tick.tick()
    run_every_bundle(twins, 1.0)
    twins.stages(**ONE_SLOT).tick.tick()
    tagged = {}
    for b in twins.bundles():
        assert b.task_arn, b.bundle_id
        tagged[tuple(b.job_ids)] = _label_tags(twins.launcher.tasks[b.task_arn].request)
    # Six jobs in the one slot's bundle: only the label they all have tags its task (the
    # other tenant's job launches in the slot once it is free).
    assert tagged == {tuple(given): {"longjobs:label:customer": "acme"}, ("plain",): {}}


def test_a_due_bundle_launched_later_is_tagged_from_its_item(
        twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
    client = twins.client()
    # Two sizes: two bundles, one slot; the second waits for the next tick, which reads due
    # bundles from the status index (no labels there).
    client.submit("k", {}, job_id="first", estimated_seconds=1, cpu=1024, memory=2048)
    client.submit("k", {}, job_id="second", estimated_seconds=1,
                  labels={"customer": "acme", "note": "a;b"})
    twins.stages(**ONE_SLOT).tick.tick()
    waiting = twins.bundle(twins.job("second").bundle_id or "")  # type: ignore[union-attr]
    assert waiting is not None and waiting.state == BundleState.PENDING
    assert labelled(waiting.bundle_id) and waiting.labels == {"customer": "acme",
                                                               "note": "a;b"}
    run_every_bundle(twins, 1.0)
    asked = _reads(twins, monkeypatch)
    twins.stages(**ONE_SLOT).tick.tick()
    launched = twins.bundle(waiting.bundle_id)
    assert launched is not None and launched.task_arn
    # "a;b" is no tag value ECS takes: left off the tags, kept on the job.
    assert _label_tags(twins.launcher.tasks[launched.task_arn].request) == {
        "longjobs:label:customer": "acme"}
    assert [keys for keys in asked if f"BUNDLE#{waiting.bundle_id}" in keys] == [
        [f"BUNDLE#{waiting.bundle_id}"]]  # its item read once, alone


def test_unlabelled_due_bundles_cost_no_read(twins: Twins,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    client = twins.client()
    client.submit("k", {}, job_id="first", estimated_seconds=1, cpu=1024, memory=2048)
    client.submit("k", {}, job_id="second", estimated_seconds=1)
    twins.stages(**ONE_SLOT).tick.tick()
    run_every_bundle(twins, 1.0)
    asked = _reads(twins, monkeypatch)
    twins.stages(**ONE_SLOT).tick.tick()
    second = twins.bundle(twins.job("second").bundle_id or "")  # type: ignore[union-attr]
    assert second is not None and second.task_arn and not labelled(second.bundle_id)
    assert not any(f"BUNDLE#{second.bundle_id}" in keys for keys in asked)


def test_a_recovered_launch_repeats_its_label_tags(twins: Twins) -> None:
    twins.client().submit("k", {}, job_id="j", estimated_seconds=1,
                          labels={"customer": "acme"})
    twins.launcher.inject_throttle(1)  # the outcome is unknown: left STARTING for recovery
    twins.stages().tick.tick()
    assert not twins.launcher.tasks
    twins.clock.advance(LaunchPolicy().recovery_seconds + 1)
    twins.stages().tick.tick()
    first, again = twins.launcher.requests[:2]
    assert again == first  # the same token with the same parameters: ECS takes it
    assert _label_tags(again) == {"longjobs:label:customer": "acme"}


@pytest.mark.parametrize(("value", "ok"), [
    ("acme", True), ("a b:c/d=e+f-g_h.i@j", True), ("Zürich 2", True), ("", True),
    ("a;b", False), ("<script>", False), ("aws:thing", False), ("AWS:x", False),
    ("x" * 256, True), ("x" * 257, False)])
def test_only_values_ecs_takes_become_tags(value: str, ok: bool) -> None:
    assert labels.tag_value_ok(value) is ok
    assert (labels.tags({"k": value}) == {"longjobs:label:k": value}) is ok


def test_the_labels_a_bundle_shares() -> None:
    assert labels.shared([{"a": "1", "b": "2"}, {"a": "1", "b": "3"}, {"a": "1"}]) == {"a": "1"}
    assert labels.shared([{"a": "1"}, None]) == {}
    assert labels.shared([]) == {}
