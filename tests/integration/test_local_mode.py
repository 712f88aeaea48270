"""`longjobs local` as a user runs it: closing its terminal (SIGHUP) stops it and its task
processes instead of leaving runners behind, detached."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import alive, exits_within, wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_sighup_stops_local_mode_and_its_runners(tmp_path: Path) -> None:
    log = tmp_path / "executions.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LONGJOBS_", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), LONGJOBS_TEST_LOG=str(log),
               LONGJOBS_HANDLERS="sleepy=tests.handlers:sleepy", POWERTOOLS_LOG_LEVEL="WARNING")
    stderr = tmp_path / "stderr"
    with stderr.open("w") as err_file:
        local = subprocess.Popen([sys.executable, "-m", "dispatcher.cli.entry", "local",
                                  "--tick-seconds", "0.5"], env=env, cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=err_file,
                                 stdin=subprocess.DEVNULL, text=True)
    try:
        assert local.stdout is not None
        exports = {}
        for line in local.stdout:  # one export line per setting, then it runs
            name, _, value = line.removeprefix("export ").strip().partition("=")
            exports[name] = value
            if name == "LONGJOBS_TASK_FAMILY":
                break
        client_env = {**env, **exports}
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
