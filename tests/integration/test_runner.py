"""The job runner as a real subprocess, AWS over HTTP to moto's server, task exits fed to the
production task-event handler as ECS "Task State Change" events (local mode)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher import versions
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.local.environment import LocalEnv
from dispatcher.local.local_launcher import STOP_TIMEOUT_SECONDS
from dispatcher.ops.client import JobClient
from dispatcher.store import Store
from dispatcher.testing.moto import MotoEndpoint
from dispatcher.testing.proxy import AwsProxy
from dispatcher.wiring.adapters import open_store
from job_runner.process import NO_HANDLERS
from tests.helpers import wait_for

HANDLERS = ("echo=tests.handlers:echo,fail=tests.handlers:fail,steps=tests.handlers:steps,"
            "sleepy=tests.handlers:sleepy,suicide=tests.handlers:suicide,"
            "exit_zero=tests.handlers:exit_zero,stubborn=tests.handlers:stubborn,"
            "meet=tests.handlers:meet,ameet=tests.handlers:ameet")


@pytest.fixture
def local(moto_server: MotoEndpoint, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LocalEnv, Path]]:
    with own_local(moto_server, tmp_path, monkeypatch, tick_seconds=0.5, pin_tasks=True,
                   LONGJOBS_HEARTBEAT_SECONDS="1", LONGJOBS_FLUSH_SECONDS="0.5",
                   LONGJOBS_LAUNCH_BACKOFF_SECONDS="0", LONGJOBS_ASSIGN_WAIT_SECONDS="20") as run:
        yield run


@contextlib.contextmanager
def own_local(moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
              tick_seconds: float, endpoint: str | None = None, pin_tasks: bool = False,
              **settings: str) -> Iterator[tuple[LocalEnv, Path]]:
    """Local mode with this test's own settings (the ``local`` fixture's are fixed), on
    moto or on ``endpoint`` (a proxy in front of it); the process environment local mode
    exports is restored after."""
    moto_server.reset()
    if pin_tasks:
        moto_server.pin_ecs_tasks()
    log = tmp_path / "executions.jsonl"
    monkeypatch.setenv("LONGJOBS_TEST_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    for name in ("LONGJOBS_HANDLERS", *settings):  # what local mode is given wins
        monkeypatch.delenv(name, raising=False)
    # Local mode exports its environment (LONGJOBS_LAUNCHER=local among it) into this
    # process; the tests after this one on the same worker must not inherit it.
    saved = dict(os.environ)
    env = LocalEnv(endpoint=endpoint or moto_server.url, tick_seconds=tick_seconds,
                   stream_endpoint=moto_server.url,  # Lambda's reads: not counted by a proxy
                   settings={"LONGJOBS_HANDLERS": HANDLERS, **settings})
    try:
        env.start()
        yield env, log
    finally:
        env.stop()
        os.environ.clear()
        os.environ.update(saved)




def runs(log: Path, job_id: str) -> list[dict[str, object]]:
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in lines if r["job_id"] == job_id]


def checkpointed(store: Store, job_id: str) -> bool:
    job = store.get_job(job_id)
    return job is not None and job.checkpoint is not None


def step(store: Store, job_id: str) -> int:
    job = store.get_job(job_id)
    return int((job.checkpoint or {}).get("step", 0)) if job else 0


def state(store: Store, job_id: str) -> JobState | None:
    job = store.get_job(job_id)
    return job.state if job else None


def test_small_bundle_runs_each_job_once(local: tuple[LocalEnv, Path]) -> None:
    env, log = local
    store = open_store(env.cfg.table)
    with env.paused():  # one tick sees the burst whole (it is sent in two batches)
        ids = JobClient().submit_many([{"kind": "echo", "payload": {"n": i}, "job_id": f"e{i}",
                                        "estimated_seconds": 0.1} for i in range(12)]
                                      + [{"kind": "nope", "payload": {}, "job_id": "unknown-kind",
                                          "estimated_seconds": 0.1}])
    wait_for(lambda: all(state(store, i) in (JobState.SUCCEEDED, JobState.FAILED)
                         for i in ids))
    for i in range(12):
        job = store.get_job(f"e{i}")
        assert job is not None and job.state == JobState.SUCCEEDED
        assert job.result == {"echo": {"n": i}} and len(runs(log, f"e{i}")) == 1
    unknown = store.get_job("unknown-kind")
    assert unknown is not None and unknown.state == JobState.FAILED
    assert "unknown kind 'nope'" in (unknown.reason or "")
    # Bundled: the 13 share bundles (the backlog is spread over the free slots, 2 or more each).
    # Bundles, not tasks, are counted: on a loaded machine a task can stop before it claims
    # its bundle, and the bundle's rerun is a second task for the same jobs (each still ran once).
    bundles = {job.bundle_id for job in (store.get_job(i) for i in ids) if job is not None}
    exits = [t.exit for t in env.launcher.tasks.values()]
    assert None not in bundles and len(bundles) <= 7, exits


def test_sigkill_mid_job_reruns_from_checkpoint_on_the_infra_budget(
        local: tuple[LocalEnv, Path]) -> None:
    env, log = local
    store = open_store(env.cfg.table)
    JobClient().submit("steps", {"steps": 8, "step_seconds": 0.5}, job_id="long",
                       max_attempts=1)
    wait_for(lambda: len(runs(log, "long")) == 1 and step(store, "long") >= 2)
    first = next(iter(env.launcher.tasks))
    env.launcher.kill(first)
    wait_for(lambda: state(store, "long") == JobState.SUCCEEDED)
    job = store.get_job("long")
    assert job is not None
    assert len(job.history) == 2 and job.infra_attempts == 1 and job.attempts == 1
    assert job.history[0]["stop_code"] == "SpotInterruption"
    second = runs(log, "long")[1]
    assert int(str(second["resumed_from"])) >= 1  # resumed, not restarted


def test_poison_job_fails_after_exactly_max_attempts(local: tuple[LocalEnv, Path]) -> None:
    env, log = local
    store = open_store(env.cfg.table)
    JobClient().submit("fail", {}, job_id="poison", max_attempts=2)
    wait_for(lambda: state(store, "poison") == JobState.FAILED, timeout=180)
    job = store.get_job("poison")
    assert job is not None and job.attempts == 2 and len(runs(log, "poison")) == 2
    assert job.error is not None and job.error["type"] == "ValueError"
    assert "poison" in job.error["message"]


def test_sigterm_interrupts_and_the_rerun_resumes(local: tuple[LocalEnv, Path]) -> None:
    env, log = local
    store = open_store(env.cfg.table)
    JobClient().submit("steps", {"steps": 8, "step_seconds": 0.5}, job_id="graceful")
    wait_for(lambda: checkpointed(store, "graceful"))
    arn = next(iter(env.launcher.tasks))
    env.launcher.stop(arn, "spot two-minute warning")  # SIGTERM, not a longjobs stop
    # It ends on its own: the launcher's SIGKILL, STOP_TIMEOUT_SECONDS after the SIGTERM,
    # would show as exit code 137.
    wait_for(lambda: env.launcher.tasks[arn].exit is not None, timeout=STOP_TIMEOUT_SECONDS + 30)
    ended = env.launcher.tasks[arn].exit
    assert ended is not None and ended.exit_code != 128 + signal.SIGKILL
    wait_for(lambda: state(store, "graceful") == JobState.SUCCEEDED)
    job = store.get_job("graceful")
    assert job is not None and job.attempts == 1 and job.infra_attempts == 1
    assert int(str(runs(log, "graceful")[1]["resumed_from"])) >= 1


def test_cancel_running_job_stops_it_at_the_next_heartbeat(local: tuple[LocalEnv, Path]) -> None:
    env, _ = local
    store = open_store(env.cfg.table)
    client = JobClient()
    client.submit("sleepy", {"seconds": 60}, job_id="to-cancel")
    wait_for(lambda: state(store, "to-cancel") == JobState.RUNNING)
    assert client.cancel("to-cancel").state == JobState.RUNNING  # requested, not yet done
    wait_for(lambda: state(store, "to-cancel") == JobState.CANCELLED, timeout=30)
    arn = next(iter(env.launcher.tasks))
    wait_for(lambda: env.launcher.tasks[arn].exit is not None, timeout=30)
    assert len(env.launcher.tasks) == 1  # not rerun
    retried = client.retry("to-cancel")
    assert retried.state == JobState.PENDING and retried.attempts == 0


def test_job_timeout_fails_it_with_reason_timeout(local: tuple[LocalEnv, Path]) -> None:
    env, _ = local
    store = open_store(env.cfg.table)
    JobClient().submit("sleepy", {"seconds": 60}, job_id="slow", timeout_seconds=1)
    wait_for(lambda: state(store, "slow") == JobState.FAILED, timeout=30)
    job = store.get_job("slow")
    assert job is not None and (job.reason or "").startswith("timed out after")


def test_a_bundle_of_50_small_jobs_costs_a_few_writes(
        moto_server: MotoEndpoint, proxy: AwsProxy, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouped writes: starts and results of small jobs share transactions."""
    with own_local(moto_server, tmp_path, monkeypatch, 3600, endpoint=proxy.url,
                   LONGJOBS_FLUSH_SECONDS="5", LONGJOBS_HEARTBEAT_SECONDS="30",
                   LONGJOBS_ASSIGN_WAIT_SECONDS="20",
                   LONGJOBS_MAX_RUNNING_TASKS="1") as (env, _):  # one slot: 50 in one bundle
        store = open_store(env.cfg.table)
        ids = JobClient().submit_many([{"kind": "echo", "payload": {"n": i},
                                        "job_id": f"g{i}", "estimated_seconds": 0.1}
                                       for i in range(50)])
        env.tick()
        proxy.reset_counts()  # from here on: the runner, then the stop event's handler
        arn = next(iter(env.launcher.tasks))
        wait_for(lambda: env.launcher.tasks[arn].exit is not None)
        wait_for(lambda: len(env.events) == 1)
        counts = proxy.counts()
        assert all(state(store, i) == JobState.SUCCEEDED for i in ids)
    writes = {k: v for k, v in counts.items()
              if k.split(".")[1] in ("TransactWriteItems", "UpdateItem", "PutItem")}
    assert sum(writes.values()) <= 6, counts  # claim + 1-3 grouped flushes (+ a heartbeat)
    assert sum(counts.values()) <= 12, counts  # 50 jobs, far fewer than 100 calls
    assert counts["dynamodb.TransactWriteItems"] <= 3, counts


def test_a_runner_takes_the_follow_ons_of_its_batch_after_its_bundle(
        moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backlog of more than the slots take at LONGJOBS_FOLLOW_ON_SECONDS each: one bundle
    a slot is launched, and the rest are run by those tasks, each taking the next follow-on
    when its bundle is done (dispatcher/store/follow_ons.py), every job once."""
    with own_local(moto_server, tmp_path, monkeypatch, 3600, LONGJOBS_HEARTBEAT_SECONDS="30",
                   LONGJOBS_ASSIGN_WAIT_SECONDS="20", LONGJOBS_MAX_RUNNING_TASKS="2",
                   LONGJOBS_FOLLOW_ON_SECONDS="1") as (env, log):
        store = open_store(env.cfg.table)
        ids = JobClient().submit_many([{"kind": "echo", "payload": {"n": i},
                                        "job_id": f"f{i}", "estimated_seconds": 0.1}
                                       for i in range(100)])
        env.tick()  # one tick: every later bundle is the running tasks' to take
        wait_for(lambda: all(state(store, i) == JobState.SUCCEEDED for i in ids))
        wait_for(lambda: all(t.exit is not None for t in env.launcher.tasks.values()))
        jobs = [j for j in (store.get_job(i) for i in ids) if j is not None]
        assert all(len(runs(log, j.job_id)) == 1 for j in jobs)
        on_task: dict[str, set[str]] = {}
        for job in jobs:
            on_task.setdefault(str(job.history[-1]["task_arn"]), set()).add(job.bundle_id or "")
        bundles = set().union(*on_task.values())
        # The tasks of the two slots ran more bundles than were launched (a task can stop
        # before its claim on a loaded machine: its bundle's relaunch is one more task).
        assert len(bundles) > len(env.launcher.tasks) >= 2, on_task
        for arn, ran in on_task.items():  # each task's pointer names the last it took
            last = store.bundle_for_task(arn)
            assert last is not None and last.bundle_id in ran
            assert last.state == BundleState.DONE


def test_a_runner_without_an_assignment_exits_without_running(
        moto_server: MotoEndpoint, tmp_path: Path) -> None:
    moto_server.reset()
    from dispatcher.local.provision import provision

    mine = {k: v for k, v in os.environ.items() if k != "LONGJOBS_HANDLERS"}  # none registered
    env = {**mine, **provision(moto_server.url), "AWS_ENDPOINT_URL": moto_server.url,
           "LONGJOBS_TASK_ARN": "arn:aws:ecs:us-east-1:000000000000:task/c/unassigned",
           "LONGJOBS_ASSIGN_WAIT_SECONDS": "1", "LONGJOBS_TEST_LOG": str(tmp_path / "x")}
    done = subprocess.run([sys.executable, "-m", "job_runner"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "no bundle assigned" in done.stderr
    assert not (tmp_path / "x").exists()
    # Its first line says which build the task runs; with no handler registered, the next says
    # so once, before any job of the bundle would fail as an unknown kind.
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert logged[0]["message"] == "job runner starting"
    assert {k: logged[0][k] for k in versions.running()} == versions.running()
    assert logged[0]["task_arn"] == env["LONGJOBS_TASK_ARN"]
    assert logged[1]["message"] == NO_HANDLERS
    bad = subprocess.run([sys.executable, "-m", "job_runner"],
                         env={k: v for k, v in env.items() if k != "LONGJOBS_TABLE"},
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "LONGJOBS_TABLE is not set" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize(("kind", "max_attempts"), [("suicide", 2), ("exit_zero", 1)])
def test_a_job_that_ends_its_task_fails_within_its_budget_and_spares_its_bundle(
        local: tuple[LocalEnv, Path], kind: str, max_attempts: int) -> None:
    """Bundled with 10 small jobs, a handler that SIGKILLs (or os._exit(0)s)
    its own process ends FAILED after max_attempts, naming the stop, within max_attempts + 1
    launches; the 10 others succeed, none run more than twice."""
    env, log = local
    store = open_store(env.cfg.table)
    mates = [f"mate-{i}" for i in range(10)]
    jobs: list[dict[str, object]] = [{"kind": "echo", "payload": {"n": i}, "job_id": j,
                                      "estimated_seconds": 0.1} for i, j in enumerate(mates)]
    jobs.insert(5, {"kind": kind, "payload": {}, "job_id": "killer", "estimated_seconds": 0.1,
                    "max_attempts": max_attempts})
    JobClient().submit_many(jobs)
    wait_for(lambda: state(store, "killer") == JobState.FAILED, timeout=120)
    wait_for(lambda: all(state(store, j) == JobState.SUCCEEDED for j in mates), timeout=60)
    killer = store.get_job("killer")
    assert killer is not None and "out of attempts" in (killer.reason or "")
    assert "EssentialContainerExited" in (killer.reason or "")
    assert killer.attempts == max_attempts
    assert len(runs(log, "killer")) <= max_attempts + 1  # one run per launch of its bundle
    assert all(1 <= len(runs(log, j)) <= 2 for j in mates)  # at-least-once, not a loop


def test_a_killer_among_concurrent_jobs_spends_only_its_own_budget(
        moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 000: one job that crashes its task never costs more than its own budget. Four jobs
    run at once; one kills the process. Its mates, with a single attempt each, must not be
    failed for it: a crash with several jobs running charges none of them an attempt and
    reruns the bundle one job at a time, where the next crash names the killer."""
    mates = [f"mate-{i}" for i in range(3)]
    with own_local(moto_server, tmp_path, monkeypatch, 0.5, LONGJOBS_TASK_CONCURRENCY="4",
                   LONGJOBS_MAX_RUNNING_TASKS="1", LONGJOBS_FLUSH_SECONDS="0.5",
                   LONGJOBS_HEARTBEAT_SECONDS="1", LONGJOBS_LAUNCH_BACKOFF_SECONDS="0",
                   LONGJOBS_ASSIGN_WAIT_SECONDS="20") as (env, log):
        store = open_store(env.cfg.table)
        with env.paused():  # one bundle of all four
            JobClient().submit_many(
                [{"kind": "sleepy", "payload": {"seconds": 1}, "job_id": j, "max_attempts": 1,
                  "estimated_seconds": 0.1} for j in mates]
                + [{"kind": "suicide", "payload": {}, "job_id": "killer", "max_attempts": 2,
                    "estimated_seconds": 0.1}])
        wait_for(lambda: state(store, "killer") == JobState.FAILED
                 and all(state(store, j) == JobState.SUCCEEDED for j in mates))
    killer = store.get_job("killer")
    assert killer is not None and killer.attempts == 2 and "out of attempts" in (
        killer.reason or "")
    # Launches of its bundle: the first (buffered: nobody can be blamed), at most one crash
    # with several running (nobody blamed, serial from then on), then one per attempt.
    assert len(runs(log, "killer")) <= 2 + 2
    assert all(1 <= len([r for r in runs(log, j) if r["event"] == "run"]) <= 3 for j in mates)


def test_a_handler_ignoring_its_timeout_ends_its_task_before_a_retry_runs(
        local: tuple[LocalEnv, Path]) -> None:
    """The job is recorded FAILED (timeout) and its process ends, so a
    retry can never run beside the first, still-sleeping run."""
    env, log = local
    store = open_store(env.cfg.table)
    client = JobClient()
    client.submit("stubborn", {"seconds": 60}, job_id="stubborn", timeout_seconds=1)
    wait_for(lambda: state(store, "stubborn") == JobState.FAILED, timeout=60)
    arn = next(iter(env.launcher.tasks))
    wait_for(lambda: env.launcher.tasks[arn].exit is not None, timeout=30)
    ended = time.time()
    client.retry("stubborn")
    wait_for(lambda: len(runs(log, "stubborn")) == 2, timeout=60)
    first, second = runs(log, "stubborn")
    assert float(str(second["at"])) >= ended  # the first run's process had ended
    assert first["pid"] != second["pid"]
    assert not [r for r in runs(log, "stubborn") if r["event"] == "finished"]


def test_a_task_runs_plain_and_async_jobs_at_once(
        moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LONGJOBS_TASK_CONCURRENCY=8 in a real runner process: 4 plain handlers that return only
    once all 4 run at once (each in a thread of its own), and 4 async ones that return only
    once all 4 await on the task's one event loop."""
    with own_local(moto_server, tmp_path, monkeypatch, 3600, LONGJOBS_TASK_CONCURRENCY="8",
                   LONGJOBS_MAX_RUNNING_TASKS="1", LONGJOBS_FLUSH_SECONDS="5",
                   LONGJOBS_HEARTBEAT_SECONDS="30",
                   LONGJOBS_ASSIGN_WAIT_SECONDS="20") as (env, log):
        store = open_store(env.cfg.table)
        ids = JobClient().submit_many(
            [{"kind": kind, "payload": {"group": kind, "party": 4}, "job_id": f"{kind}{i}",
              "estimated_seconds": 0.1} for i in range(4) for kind in ("meet", "ameet")])
        env.tick()
        (arn,) = env.launcher.tasks  # one bundle, one task
        wait_for(lambda: env.launcher.tasks[arn].exit is not None)
        ended = env.launcher.tasks[arn].exit
        assert ended is not None and ended.exit_code == 0
        assert all(state(store, i) == JobState.SUCCEEDED for i in ids)
    met = [r for i in ids for r in runs(log, i)]
    assert len(met) == 8 and len({r["pid"] for r in met}) == 1
    plain = [r for r in met if str(r["job_id"]).startswith("meet")]
    aio = [r for r in met if str(r["job_id"]).startswith("ameet")]
    assert len({r["thread"] for r in plain}) == 4  # a thread each
    assert {r["thread"] for r in aio} == {"job-loop"} and len({r["loop"] for r in aio}) == 1


def test_a_handler_that_raises_interrupted_by_itself_fails_within_its_budget(
        moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real runner gives the job back and exits with its bundle RUNNING; the task's stop
    event reruns it and, once LONGJOBS_MAX_INFRA_ATTEMPTS is spent, fails it with its reason.
    A job submitted beside it succeeds, once."""
    with own_local(moto_server, tmp_path, monkeypatch, 0.5, LONGJOBS_MAX_INFRA_ATTEMPTS="2",
                   LONGJOBS_HANDLERS=HANDLERS + ",interrupts=tests.handlers:interrupts",
                   LONGJOBS_HEARTBEAT_SECONDS="1", LONGJOBS_FLUSH_SECONDS="0.5",
                   LONGJOBS_LAUNCH_BACKOFF_SECONDS="0",
                   LONGJOBS_ASSIGN_WAIT_SECONDS="20") as (env, log):
        store = open_store(env.cfg.table)
        with env.paused():
            JobClient().submit_many([
                {"kind": "interrupts", "payload": {}, "job_id": "gives-back", "max_attempts": 1,
                 "estimated_seconds": 0.1},
                {"kind": "echo", "payload": {}, "job_id": "mate", "estimated_seconds": 0.1}])
        wait_for(lambda: state(store, "gives-back") == JobState.FAILED
                 and state(store, "mate") == JobState.SUCCEEDED)
    job = store.get_job("gives-back")
    assert job is not None and job.infra_attempts == 3
    assert "infrastructure budget spent" in (job.reason or "")
    assert "upstream unavailable" in (job.reason or "")
    assert len(runs(log, "gives-back")) == 3 and len(runs(log, "mate")) == 1


def test_a_retry_waits_for_the_task_its_abandoned_run_keeps_alive_beside_a_mate(
        moto_server: MotoEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two jobs at once: one ignores its timeout and is recorded FAILED while its bundle-mate
    keeps the task running; `jobs retry` must not start a second run before that task (and
    the abandoned thread in it) has ended."""
    with own_local(moto_server, tmp_path, monkeypatch, 0.5, LONGJOBS_TASK_CONCURRENCY="2",
                   LONGJOBS_MAX_RUNNING_TASKS="2", LONGJOBS_HEARTBEAT_SECONDS="1",
                   LONGJOBS_FLUSH_SECONDS="0.5", LONGJOBS_LAUNCH_BACKOFF_SECONDS="0",
                   LONGJOBS_ASSIGN_WAIT_SECONDS="20") as (env, log):
        store = open_store(env.cfg.table)
        client = JobClient()
        with env.paused():  # one bundle of both
            client.submit_many([
                {"kind": "stubborn", "payload": {"seconds": 60}, "job_id": "stubborn",
                 "timeout_seconds": 1, "estimated_seconds": 0.1},
                {"kind": "sleepy", "payload": {"seconds": 15}, "job_id": "mate",
                 "estimated_seconds": 0.1}])
        wait_for(lambda: state(store, "stubborn") == JobState.FAILED, timeout=60)
        (arn,) = env.launcher.tasks
        assert env.launcher.tasks[arn].exit is None  # its mate still runs there
        retried = client.retry("stubborn")
        wait_for(lambda: len(runs(log, "stubborn")) == 2, timeout=90)
        ended = env.launcher.tasks[arn].exit
        first, second = runs(log, "stubborn")
        assert ended is not None and float(str(second["at"])) >= ended.stopped_at, \
            "the retry ran beside the abandoned run"
        assert first["pid"] != second["pid"] and retried.live_task == arn
        assert state(store, "mate") == JobState.SUCCEEDED

