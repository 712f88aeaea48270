"""The system model's ``task_tags`` check (tests/model_checks.py): each task is tagged with
the tenant of the bundle it was launched for and the labels all that bundle's own jobs have.

Labelled and unlabelled jobs, more than the slots take at once (follow-ons, and bundles that
wait for a later tick, which reads them from the status index), run to their end. Today the
tags hold; with the shared labels left off the request, or a due bundle's item not read for
them, the check sees it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dispatcher.domain import labels
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Resources
from dispatcher.ports.launcher import MAX_TASKS_PER_CALL
from dispatcher.stages import launch
from tests.twins import test_system_model as model
from tests.twins.test_system_model_gaps import machines, rounds, seen_by, spec

__all__ = ["machines"]  # the fixture, used by name

GOLD = {"team": "b", "tier": "gold"}


def labelled_work(m: model.SystemModel) -> None:
    # Long jobs, a task each, more than the slots: the first tick launches labelled and
    # unlabelled bundles at once; later ticks launch the rest, read from the status index.
    m.submit(spec(estimated_seconds=3600.0), 2, False)
    m.submit(spec(labels=GOLD, estimated_seconds=3600.0), 3, False)
    m.submit(spec(labels={"team": "a"}, tenant="t1"), 30, False)
    m.burst(30, "succeed")
    rounds(m, 10, "succeed", 5.0)


def _launched_tags(m: model.SystemModel) -> list[dict[str, str]]:
    return [{k: v for k, v in t.request.tags.items() if k.startswith(labels.TAG_PREFIX)}
            for t in m.twins.launcher.tasks.values()]


def test_each_task_is_tagged_for_its_bundle(machines: Callable[[], model.SystemModel]) -> None:
    m = machines()
    assert seen_by(m, "task_tags", labelled_work) == []
    tagged = _launched_tags(m)
    assert {"longjobs:label:team": "b", "longjobs:label:tier": "gold"} in tagged
    assert {"longjobs:label:team": "a"} in tagged and {} in tagged


def _calls_blind_to_labels(bundles: list[Bundle]) -> list[list[Bundle]]:
    """RunTask calls cut as before labels were tags: bundles of other labels share a call,
    which tags them all with its first bundle's."""
    by: dict[tuple[Resources, str | None, str | None], list[Bundle]] = {}
    for b in bundles:
        by.setdefault((b.resources, b.kind, b.tenant), []).append(b)
    return [same[i:i + MAX_TASKS_PER_CALL] for same in by.values()
            for i in range(0, len(same), MAX_TASKS_PER_CALL)]


@pytest.mark.parametrize("broken", ["calls", "read"])
def test_the_check_sees_a_task_tagged_wrong(machines: Callable[[], model.SystemModel],
                                            monkeypatch: pytest.MonkeyPatch,
                                            broken: str) -> None:
    if broken == "calls":
        monkeypatch.setattr(launch, "calls_for", _calls_blind_to_labels)
    else:
        monkeypatch.setattr(launch.Launches, "_read_labels", lambda self, bundles: None)
    seen = seen_by(machines(), "task_tags", labelled_work)
    assert seen, f"a broken {broken} rule went unseen"
