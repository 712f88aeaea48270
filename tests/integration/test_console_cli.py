"""``longjobs console`` as a person starts it against local mode: it prints its URL, serves
the pages with the caller's settings, refuses a change without its token, and stops on
Ctrl-C; a port in use, or missing settings, are one clear line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import exits_within, local_mode, wait_for
from tests.integration.test_progress_local import ROOT, longjobs


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_console_serves_the_stack_it_is_pointed_at(tmp_path: Path) -> None:
    with local_mode(ROOT, tmp_path, LONGJOBS_HANDLERS="echo=tests.handlers:echo") as client:
        longjobs(client, "submit", "echo", "--job-id", "seen-0", "--payload", '{"a": 1}')
        wait_for(lambda: json.loads(longjobs(client, "jobs", "show", "seen-0", "--json"))[
            "state"] == "SUCCEEDED", 120, "the job succeeded")
        stderr = tmp_path / "console.err"
        with stderr.open("w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "dispatcher.cli.entry", "console",
                                     "--port", "0"], env=client, cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=err,
                                    stdin=subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:") and url.endswith("/"), url
            status, page = get(url + "jobs/seen-0")
            assert status == 200 and "SUCCEEDED" in page and "echo" in page
            status, page = get(url)
            assert status == 200 and "Jobs by state" in page
            request = urllib.request.Request(url + "jobs/seen-0/retry", data=b"csrf=x",
                                             method="POST", headers={"Origin": url.rstrip("/")})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 403 and "--operate" in refused.value.read().decode()
            assert "read-only" in stderr.read_text()
        finally:
            proc.send_signal(signal.SIGINT)
            assert exits_within(proc, 30, stderr) == 0


def test_console_says_what_is_missing_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in __import__("os").environ.items()
           if not k.startswith(("LONGJOBS_", "AWS_"))}
    done = subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", "console"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ") and "LONGJOBS_QUEUE_URL" in done.stderr
