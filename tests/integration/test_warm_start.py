"""Warm starts (dispatcher/local/warm.py): tasks forked from one process that imported the runner.

The starter runs a stand-in entry point (:func:`task_main` below, chosen by ``entry``) so these
tests see what a forked task gets without a table: its own environment, process group, output
and exit status, reported as :class:`subprocess.Popen` reports them. The runner itself runs
forked in every local-mode test (``test_local_mode``, ``test_demo``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher.domain.errors import LaunchError
from dispatcher.local.warm import WarmStarter
from tests.helpers import alive

ENTRY = "tests.integration.test_warm_start:task_main"


def task_main() -> int:
    """A task: writes its pid, group and variable to its file, then acts as TASK_ACT says."""
    out = Path(os.environ["TASK_FILE"])
    out.write_text(f"{os.getpid()} {os.getpgid(0)} {os.environ.get('TASK_VAR', '')} "
                   f"{'LEAKED' in os.environ}\n")
    print(f"task {os.environ.get('TASK_VAR')} says hello", flush=True)
    act = os.environ.get("TASK_ACT", "exit:0")
    if act == "sleep":
        time.sleep(300)
    return int(act.split(":")[1])


@pytest.fixture
def starter(tmp_path: Path) -> Iterator[WarmStarter]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    output = os.open(tmp_path / "output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    s = WarmStarter(env, output, entry=ENTRY)
    yield s
    s.close()
    os.close(output)


def read(path: Path, deadline: float = 30.0) -> list[str]:
    end = time.monotonic() + deadline
    while time.monotonic() < end:  # the task writes it as soon as it runs
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text().split()
        time.sleep(0.05)
    raise AssertionError(f"{path} was never written")


def test_each_task_gets_its_environment_group_and_exit_code(starter: WarmStarter,
                                                            tmp_path: Path) -> None:
    tasks = []
    for i in range(3):
        env = {"PATH": os.environ["PATH"], "TASK_FILE": str(tmp_path / f"t{i}"),
               "TASK_VAR": f"v{i}", "TASK_ACT": f"exit:{i + 3}"}
        tasks.append(starter.spawn(env))
    assert [t.wait(timeout=30) for t in tasks] == [3, 4, 5]
    pids = set()
    for i, t in enumerate(tasks):
        pid, group, var, leaked = read(tmp_path / f"t{i}")
        assert (int(pid), int(group), var, leaked) == (t.pid, t.pid, f"v{i}", "False")
        pids.add(t.pid)
    assert len(pids) == 3
    out = (tmp_path / "output.log").read_text()
    assert all(f"task v{i} says hello" in out for i in range(3)), out


def test_a_signalled_task_reports_the_signal_as_popen_does(starter: WarmStarter,
                                                          tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "TASK_FILE": str(tmp_path / "t"), "TASK_ACT": "sleep"}
    task = starter.spawn(env)
    read(tmp_path / "t")
    assert task.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        task.wait(timeout=0.2)
    task.signal_group(signal.SIGTERM)  # what LocalLauncher.stop sends
    assert task.wait(timeout=30) == -signal.SIGTERM
    assert task.poll() == -signal.SIGTERM
    task.signal_group(signal.SIGKILL)  # ended: a no-op, whoever has that pid now


def test_the_starter_signals_only_tasks_it_has_not_reaped(starter: WarmStarter,
                                                         tmp_path: Path) -> None:
    """A pid is free for reuse once the starter reaps its task, which may be before the
    launcher reads the exit: a signal for it must not reach whoever has the pid then."""
    env = {"PATH": os.environ["PATH"], "TASK_FILE": str(tmp_path / "t"), "TASK_ACT": "exit:0"}
    task = starter.spawn(env)
    assert task.wait(timeout=30) == 0
    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        task.returncode = None  # as if the launcher had not read the exit yet
        task.pid = bystander.pid  # and the pid had gone to another process
        task.signal_group(signal.SIGTERM)
        spawned = starter.spawn({**env, "TASK_FILE": str(tmp_path / "u")})
        assert spawned.wait(timeout=30) == 0  # the starter has read the signal request by now
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_tasks_of_a_starter_that_dies_are_reported_killed_and_a_new_one_starts(
        starter: WarmStarter, tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "TASK_FILE": str(tmp_path / "t"), "TASK_ACT": "sleep"}
    task = starter.spawn(env)
    read(tmp_path / "t")
    proc = starter._proc
    assert proc is not None
    proc.kill()
    assert task.wait(timeout=30) == -signal.SIGKILL  # no watcher is left waiting forever
    # And it is true: the task died with its starter (PR_SET_PDEATHSIG), so it cannot go on
    # running a job that the reported stop reruns elsewhere.
    deadline = time.monotonic() + 30
    while alive(task.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(task.pid)
    again = starter.spawn({**env, "TASK_FILE": str(tmp_path / "u"), "TASK_ACT": "exit:0"})
    assert again.wait(timeout=30) == 0
    assert starter._proc is not proc


def test_a_ctrl_c_at_the_terminal_reaches_local_mode_not_the_starter(
        starter: WarmStarter, tmp_path: Path) -> None:
    """The terminal sends SIGINT to its foreground process group; the starter is in a session
    of its own, so local mode gets to stop the tasks (and they are not left orphaned)."""
    env = {"PATH": os.environ["PATH"], "TASK_FILE": str(tmp_path / "t"), "TASK_ACT": "exit:0"}
    assert starter.spawn(env).wait(timeout=30) == 0
    proc = starter._proc
    assert proc is not None
    assert os.getsid(proc.pid) == proc.pid != os.getsid(0)


def children(pid: int) -> set[int]:
    """The processes ``pid`` forked that still run (not zombies)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        out |= {int(c) for c in (task / "children").read_text().split()}
    return {c for c in out if alive(c)}


def test_a_task_forked_after_its_spawn_gave_up_is_killed_and_leaves_no_exit(
        starter: WarmStarter, tmp_path: Path) -> None:
    """A spawn that gives up waiting reports the launch failed: the task the starter forks
    later must not run that launch, nor leave its exit for a later task given its pid."""
    env = {"PATH": os.environ["PATH"], "TASK_FILE": str(tmp_path / "late"), "TASK_ACT": "sleep"}
    with pytest.raises(LaunchError, match="did not fork the task"):
        starter.spawn(env, timeout=0.0)  # the starter is still importing: it forks later
    # The starter takes its requests in order: once the next task has run, the late one was
    # forked (and may have been killed before it wrote its file).
    task = starter.spawn({**env, "TASK_FILE": str(tmp_path / "next"), "TASK_ACT": "exit:0"})
    assert task.wait(timeout=30) == 0
    assert starter.pid is not None
    end = time.monotonic() + 30
    while children(starter.pid) and time.monotonic() < end:
        time.sleep(0.05)  # a poll of the condition, bounded by the deadline
    assert not children(starter.pid), "the task forked after its spawn gave up still runs"
    # Its exit was dropped, not kept for whichever task gets its pid next.
    assert not starter._exits
