"""A task's normal finish, reported from its runner's count: the runner that ends its bundle
DONE with every result written and none of its handlers left running counts the outcomes on
the task's pointer in that same write, so the task's stop reads one item and writes one; a
runner that cannot vouch so (the table refused one of its results) leaves the stop to read
the jobs, as before."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, JobState
from dispatcher.domain.launches import Launch
from dispatcher.domain.stops import StopCode, TaskStop
from dispatcher.ports.table import Set, Update
from dispatcher.stages.rerun import StopResult
from dispatcher.store import LaunchOutcome
from dispatcher.store import codec as r
from dispatcher.store.values import JobOutcomes
from job_runner.kinds import HandlerRegistry
from job_runner.worker import Worker
from tests.twins import Twins
from tests.twins.test_worker import CFG

ARN = "arn:aws:ecs:us-east-1:000000000000:task/longjobs/t1"
EXITED = TaskStop(ARN, str(StopCode.ESSENTIAL_CONTAINER_EXITED),
                  "Essential container in task exited", 0)


def _launched(tw: Twins, kinds: dict[str, str]) -> None:
    """Bundle b1 of these jobs (id: kind; one attempt each), launched on ARN as the tick
    leaves it."""
    jobs = [Job(job_id=i, kind=k, payload={}, estimated_seconds=0.1, bundle_id="b1",
                max_attempts=1) for i, k in kinds.items()]
    tw.store.record([Bundle("b1", list(kinds))], jobs)
    launch = Launch("L-b1", ["b1"], "longjobs-worker:1")
    tw.store.begin_launch(launch, [Bundle("b1", list(kinds))])
    tw.store.finish_launch(launch, LaunchOutcome(assigned=[("b1", ARN)]), {})


def _counting(tw: Twins, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The table calls made from now on, by method."""
    calls: Counter[str] = Counter()
    for name in ("get", "get_many", "query", "count", "write", "transact"):
        real = getattr(tw.table, name)

        def counted(*args: Any, _real: Callable[..., Any] = real, _name: str = name,
                    **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(tw.table, name, counted)
    return calls


def _fail(payload: dict[str, Any], ctx: Any) -> None:
    raise ValueError("no")


def test_a_finished_task_is_reported_from_its_runners_count_reading_no_job(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tw = Twins()
    stages = tw.stages()
    _launched(tw, {"a": "ok", "b": "ok", "c": "bad"})
    Worker(CFG, tw.store, HandlerRegistry({"ok": lambda p, ctx: "done", "bad": _fail}),
           ARN).run()
    pointer = tw.store.task_pointer(ARN)
    assert pointer is not None and pointer.ended == JobOutcomes(2, 1)
    calls = _counting(tw, monkeypatch)
    outcome = stages.reruns.on_stop(EXITED)
    assert outcome.result == StopResult.FINISHED and outcome.finished == JobOutcomes(2, 1)
    assert calls == Counter({"get": 1, "write": 1})  # the pointer; the once-only mark
    # The count is what the jobs say.
    assert [tw.store.get_job(j).state for j in "abc"] == [  # type: ignore[union-attr]
        JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.FAILED]
    # A second delivery of the stop reports nothing again.
    again = stages.reruns.on_stop(EXITED)
    assert again.result == StopResult.IGNORED and again.finished is None


def test_a_runner_whose_result_was_refused_leaves_the_stop_to_read_the_jobs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tw = Twins()
    stages = tw.stages()
    _launched(tw, {"a": "ok", "b": "moves", "c": "ok"})

    def moves(payload: dict[str, Any], ctx: Any) -> None:
        # Meanwhile "a" (its result buffered) is failed by another writer, with this task as
        # the one whose run of it may go on (as the tick's timeout does).
        tw.table.write(Update(r.job_key("a"), [
            Set("state", "FAILED"), Set("status_key", r.job_status("FAILED", "a")),
            Set("live_task", ARN)]))

    Worker(CFG, tw.store, HandlerRegistry({"ok": lambda p, ctx: "done", "moves": moves}),
           ARN).run()
    bundle = tw.bundle("b1")
    assert bundle is not None and bundle.state == BundleState.DONE
    pointer = tw.store.task_pointer(ARN)
    assert pointer is not None and pointer.ended is None  # it cannot vouch for "a"
    calls = _counting(tw, monkeypatch)
    outcome = stages.reruns.on_stop(EXITED)
    assert outcome.result == StopResult.FINISHED and outcome.finished == JobOutcomes(2, 1)
    assert calls["get_many"] >= 1  # the jobs were read
    a = tw.job("a")
    assert a is not None and a.live_task is None  # the stop ended the run left there
