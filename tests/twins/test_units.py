"""Pure units: bundling limits (property-based), the stub queue, the local launcher's ECS
semantics (10 per call, clientToken, failures[], exit reports)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st

from dispatcher import settings
from dispatcher.domain.errors import LaunchError
from dispatcher.domain.jobs import Job
from dispatcher.local.local_launcher import LocalLauncher, TaskExit
from dispatcher.ports.launcher import LaunchRequest
from dispatcher.stages.bundle import Bundler
from dispatcher.stages.policy import BundlePolicy
from dispatcher.testing.memory_queue import MemoryQueue

CFG = settings.load("dispatcher", {
    "LONGJOBS_QUEUE_URL": "q", "LONGJOBS_TABLE": "t", "LONGJOBS_CLUSTER": "c",
    "LONGJOBS_TASK_FAMILY": "f", "LONGJOBS_LAUNCHER": "local"})


# 5 jobs, 10 s of a task's time at 2 in parallel (20 s of work), small at <= 10 s.
POLICY = BundlePolicy(bundle_max_jobs=5, bundle_max_seconds=10, small_job_seconds=10,
                      task_concurrency=2)


@hyp_settings(max_examples=200, deadline=None)
@given(estimates=st.lists(st.one_of(st.none(), st.floats(0, 100)), max_size=60),
       capacity=st.integers(0, 12), target=st.one_of(st.none(), st.integers(1, 8)))
def test_bundles_respect_every_limit(estimates: list[float | None], capacity: int,
                                     target: int | None) -> None:
    bundler = Bundler(POLICY, capacity, target)
    jobs = [Job(job_id=f"j{i}", kind="k", payload={}, estimated_seconds=e)
            for i, e in enumerate(estimates)]
    taken = [j for j in jobs if bundler.offer(j)]
    bundler.close()
    bundles = bundler.take_closed()
    assert len(bundles) <= capacity
    assert sorted(j for b in bundles for j in b.job_ids) == sorted(j.job_id for j in taken)
    by_id = {j.job_id: j for j in jobs}
    for b in bundles:
        assert 1 <= len(b.job_ids) <= 5
        if len(b.job_ids) > 1:  # only small jobs share, within the work limit
            assert all(bundler.is_small(by_id[j]) for j in b.job_ids)
            assert sum(by_id[j].estimated_seconds or 0 for j in b.job_ids) <= 20
    if target is not None:  # the even share, except in the last slot (it takes the rest)
        assert sum(1 for b in bundles if len(b.job_ids) > target) <= 1
    for j in jobs:
        if j not in taken:  # refused only when no bundle could take it
            assert len(bundles) == capacity


def test_stub_queue_redelivers_what_was_not_deleted() -> None:
    q = MemoryQueue(visibility_seconds=0.0)
    q.send([("a", "1"), ("b", "2")])
    first = q.receive()
    assert [m.body for m in first] == ["1", "2"]
    q.delete(first[:1])
    again = q.receive()
    assert [m.body for m in again] == ["2"] and again[0].receive_count == 2


def test_local_launcher_keeps_ecs_semantics() -> None:
    exits: list[TaskExit] = []
    done = threading.Event()

    def on_exit(e: TaskExit) -> None:
        exits.append(e)
        if len(exits) == 2:
            done.set()

    # No LONGJOBS_TABLE: each runner exits at once with its configuration error (code 2).
    launcher = LocalLauncher(CFG, env={"PATH": "/usr/bin:/bin"}, on_exit=on_exit)
    with pytest.raises(LaunchError, match=r"1\.\.10"):
        launcher.run(LaunchRequest("f:1", 11, "tok-big", "s"))
    launcher.inject_failures(["RESOURCE:MEMORY"])
    request = LaunchRequest("f:1", 3, "tok-1", "s")
    result = launcher.run(request)
    assert len(result.task_arns) == 2 and result.failures == ["RESOURCE:MEMORY"]
    assert launcher.run(request) == result  # same clientToken: the same tasks, none new
    assert len(launcher.tasks) == 2
    # The token reused with another revision: the first call's tasks (ECS's ConflictException
    # names them), and its placement failure again as a task not started.
    assert launcher.run(LaunchRequest("f:2", 3, "tok-1", "s")).task_arns == result.task_arns
    assert len(launcher.tasks) == 2
    assert done.wait(60)
    assert {e.exit_code for e in exits} == {2}
    assert {e.stop_code for e in exits} == {"EssentialContainerExited"}
    statuses = launcher.describe([*result.task_arns, "arn:unknown"])
    assert [s.last_status for s in statuses] == ["STOPPED", "STOPPED", "MISSING"]
    launcher.shutdown()
    assert launcher.running() == []


def test_runner_reads_its_task_arn_from_the_metadata_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from job_runner.process import task_arn

    class Metadata(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"TaskARN": "arn:aws:ecs:eu-west-1:1:task/c/abc"}).encode()
            self.send_response(200 if self.path == "/v4/x/task" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Metadata)
    threading.Thread(target=server.handle_request, daemon=True).start()
    monkeypatch.delenv("LONGJOBS_TASK_ARN", raising=False)
    monkeypatch.setenv("ECS_CONTAINER_METADATA_URI_V4",
                       f"http://127.0.0.1:{server.server_address[1]}/v4/x")
    assert task_arn() == "arn:aws:ecs:eu-west-1:1:task/c/abc"
    server.server_close()
