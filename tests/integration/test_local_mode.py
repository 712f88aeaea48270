"""`longjobs local` as a user runs it: closing its terminal (SIGHUP) stops it and its task
processes instead of leaving runners behind, detached."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import alive, clean_env, exits_within, start_local, wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_sighup_stops_local_mode_and_its_runners(tmp_path: Path) -> None:
    log = tmp_path / "executions.jsonl"
    env = clean_env(ROOT, LONGJOBS_TEST_LOG=str(log),
                    LONGJOBS_HANDLERS="sleepy=tests.handlers:sleepy")
    stderr = tmp_path / "stderr"
    local, client_env = start_local(ROOT, env, stderr)
    try:
        subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", "submit", "sleepy",
                        "--payload", '{"seconds": 120}', "--job-id", "held"],
                       env=client_env, cwd=ROOT, check=True, capture_output=True, timeout=60)
        # The timeouts guard against a hang only (four test workers share two cores).
        wait_for(lambda: log.exists() and bool(log.read_text().strip()), 120, "a runner started")
        runner = json.loads(log.read_text().splitlines()[0])["pid"]
        assert alive(runner)
        local.send_signal(signal.SIGHUP)  # the terminal closed
        assert exits_within(local, 120, stderr) == 0
        wait_for(lambda: not alive(runner), 60, "the runner gone with local mode")
    finally:
        if local.poll() is None:
            local.kill()


_SIGNAL_TAKEN_BY_ANOTHER_THREAD = """
import signal, sys, threading
from dispatcher.cli.stop_signals import wait_for_a_stop

class Stopped(Exception):
    pass

def on_stop(signum, frame):
    raise Stopped

def take_it_here():
    signal.pthread_kill(threading.get_ident(), signal.SIGHUP)  # this thread, not the main one

threading.Timer(0.5, take_it_here).start()
try:
    wait_for_a_stop((signal.SIGHUP,), on_stop)
except Stopped:
    print("stopped", flush=True)
"""


def test_a_stop_signal_taken_by_another_thread_still_stops_the_wait() -> None:
    """The kernel may hand a process's SIGHUP to any of its threads; the main thread's wait
    (where the Python handler runs) must wake all the same. `signal.pause()` there never
    returned: local mode ignored the signal when a worker thread took it."""
    done = subprocess.run([sys.executable, "-c", _SIGNAL_TAKEN_BY_ANOTHER_THREAD], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60, check=False)  # the timeout guards a hang only
    assert (done.returncode, done.stdout.strip()) == (0, "stopped"), done.stderr
