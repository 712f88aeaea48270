"""MiniStack as local mode's SQS endpoint, for queues too deep for moto.

moto's SQS scans the whole queue several times per call (a 10-message receive takes ~0.2 s at
depth 100 and ~2 s at depth 2,000), so a nightly-sized backlog cannot be admitted through it.
MiniStack (PyPI ``ministack``) keeps a queue as a list too, but a receive or delete of 10 costs
~45-60 ms at depth 20,000 instead of tens of seconds. It pins its own botocore, so it runs from
its own virtualenv (``make ministack`` builds ``.venv-ministack``) as a separate process; local
mode then points only SQS at it with ``AWS_ENDPOINT_URL_SQS`` and keeps DynamoDB and ECS on
moto (see ``dispatcher.aws.clients.endpoint_client``).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["MiniStack", "MiniStackUnavailable", "find_ministack", "start_ministack"]

# The repository's own venv for it (`make ministack`), next to .venv.
VENV = Path(__file__).resolve().parents[2] / ".venv-ministack"
HEALTH = "/_ministack/health"


class MiniStackUnavailable(RuntimeError):
    """MiniStack is not installed, or did not come up."""


def find_ministack(binary: str | Path | None = None) -> Path:
    """The ``ministack`` executable: ``binary``, else ``.venv-ministack``, else on PATH."""
    for candidate in (binary, VENV / "bin" / "ministack", shutil.which("ministack")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise MiniStackUnavailable("ministack is not installed: run `make ministack` (it builds "
                               f"{VENV.name} with `pip install ministack`)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MiniStack:
    """A running MiniStack process serving ``services`` on 127.0.0.1."""

    def __init__(self, process: subprocess.Popen[bytes], url: str) -> None:
        self.process = process
        self.url = url

    def stop(self, grace: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> MiniStack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + HEALTH, timeout=2) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def start_ministack(services: str = "sqs", *, binary: str | Path | None = None,
                    timeout: float = 60.0, log: Path | None = None) -> MiniStack:
    """Start MiniStack on a free loopback port and wait until it answers its health check.

    The process gets a clean environment of its own (only its settings), so nothing of the
    caller's AWS or longjobs configuration leaks into the emulator. ``log`` receives its
    output (discarded by default).
    """
    exe = find_ministack(binary)
    for _ in range(3):  # the port is probed free, then bound by the child: retry a lost race
        port = _free_port()
        env = {"BIND_HOST": "127.0.0.1", "GATEWAY_PORT": str(port), "SERVICES": services,
               "LOG_LEVEL": "WARNING", "MINISTACK_REGION": "us-east-1"}
        out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen([str(exe)], env=env, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=out, start_new_session=True)
        finally:
            if log is not None and not isinstance(out, int):
                out.close()
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            if _healthy(url):
                return MiniStack(process, url)
            time.sleep(0.05)  # polling a child's health endpoint; no event to wait on
        with contextlib.suppress(Exception):
            MiniStack(process, url).stop(grace=2)
        if process.returncode not in (None, 1):  # 1: port taken; anything else is fatal
            break
    raise MiniStackUnavailable(f"ministack ({exe}) did not answer on {HEALTH} within "
                               f"{timeout:.0f} s")
