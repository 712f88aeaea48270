"""The audit of the locked runtime dependencies (infra/audit.py, in `make lint` and `make
audit`), against an advisory feed of our own that speaks OSV's query API: a finding fails
naming the package, its locked version, the advisory and the fixed version; an allowance with
its date and reason lets it pass; one without them is refused; a feed that cannot be reached
fails `make audit` and is one line in `make lint`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.integration.locked import runtime_pins

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".venv-uv" / "bin" / "uv"
pytestmark = pytest.mark.skipif(not UV.is_file(), reason="no .venv-uv: `make` installs uv")
ADVISORY = "GHSA-0000-test-0001"


class _Feed(BaseHTTPRequestHandler):
    """OSV's POST /v1/query: one advisory on urllib3, fixed in 99.0, nothing on the rest."""

    asked: list[str] = []  # noqa: RUF012 (the test's record of what was asked)

    def do_POST(self) -> None:
        query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name = query["package"]["name"]
        self.asked.append(name)
        body: dict[str, object] = {}
        if name == "urllib3":
            body = {"vulns": [{"id": ADVISORY, "summary": "a test advisory", "affected": [{
                "package": {"name": "urllib3", "ecosystem": "PyPI"},
                "ranges": [{"type": "ECOSYSTEM",
                            "events": [{"introduced": "0"}, {"fixed": "99.0"}]}]}]}]}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def feed() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Feed)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/query"
    finally:
        server.shutdown()


def audit(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "infra" / "audit.py"), *argv],
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_finding_fails_naming_the_package_the_advisory_and_the_fix(
        feed: str, tmp_path: Path) -> None:
    none = tmp_path / "allowlist.txt"
    none.write_text("# nothing allowed\n")
    done = audit("--osv-url", feed, "--allowlist", str(none))
    assert done.returncode == 1, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("urllib3"))
    assert row.split() == ["urllib3", runtime_pins()["urllib3"], ADVISORY, "99.0"]
    # Every locked runtime dependency was looked up, no extra (the CLI's, the suite's).
    assert set(_Feed.asked) >= set(runtime_pins()) and "moto" not in _Feed.asked


def test_an_allowance_with_its_date_and_reason_lets_the_audit_pass(
        feed: str, tmp_path: Path) -> None:
    allow = tmp_path / "allowlist.txt"
    allow.write_text(f"{ADVISORY}  2026-12-05  the test feed's own advisory\n")
    done = audit("--osv-url", feed, "--allowlist", str(allow))
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_allowance_without_its_date_or_reason_is_refused(feed: str, tmp_path: Path) -> None:
    allow = tmp_path / "allowlist.txt"
    allow.write_text(f"{ADVISORY}  does not apply\n")
    done = audit("--osv-url", feed, "--allowlist", str(allow))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"error: audit: allowlist.txt:1: write `ID  YYYY-MM-DD  why "
                                   f"it does not apply`, not '{ADVISORY}  does not apply'")


def test_the_projects_allowlist_reads() -> None:
    from importlib.util import module_from_spec, spec_from_file_location

    spec = spec_from_file_location("audit", ROOT / "infra" / "audit.py")
    assert spec is not None and spec.loader is not None
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    module.allowed()  # raises on an entry without its date and reason


def test_a_feed_out_of_reach_fails_the_audit_and_is_one_line_in_lint() -> None:
    closed = "http://127.0.0.1:9/v1/query"  # the discard port: nothing listens
    strict = audit("--osv-url", closed)
    assert strict.returncode == 1 and strict.stderr.startswith("error: audit: ")
    lint = audit("--osv-url", closed, "--if-reachable")
    assert lint.returncode == 0
    assert lint.stderr.count("\n") == 1 and "were not checked; run `make audit`" in lint.stderr
