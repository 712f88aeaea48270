"""Audits the locked runtime dependencies against known advisories: what uv.lock pins for
``[project] dependencies`` (no extras: what the Lambda layer and the worker image install),
checked by pip-audit against OSV (https://osv.dev: the PyPA advisory database and GitHub's).

    python infra/audit.py [--if-reachable] [--osv-url URL] [--allowlist FILE]

A finding fails, with pip-audit's table: the package, its version, the advisory and the
versions that fix it. An advisory that does not apply is allowed in
``infra/audit-allowlist.txt``, one per line: ``ID  YYYY-MM-DD  why it does not apply`` (the date
it was judged); a line without its date or its reason is refused, so an allowance always says
who may drop it when.

Where OSV cannot be reached, nothing can be checked: ``make audit`` fails saying so;
``make lint`` (``--if-reachable``) says so in one line and goes on, since a machine without the
internet cannot judge what it cannot read (this project's CI machines reach PyPI alone).

Runs on the project's venv (pip-audit is a dev dependency), with the Makefile's uv.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWLIST = ROOT / "infra" / "audit-allowlist.txt"
OSV_URL = "https://api.osv.dev/v1/query"
_ENTRY = re.compile(r"(\S+)\s+(\d{4}-\d{2}-\d{2})\s+(\S.*)")


class AuditError(Exception):
    """The audit could not run as asked; the message says why and what to do."""


def allowed(path: Path = ALLOWLIST) -> list[str]:
    """The advisory ids the allow-list allows (comments and blank lines skipped)."""
    ids: list[str] = []
    if not path.exists():
        return ids
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        match = _ENTRY.fullmatch(text)
        if match is None:
            raise AuditError(f"{path.name}:{number}: write `ID  YYYY-MM-DD  why it does not "
                             f"apply`, not {text!r}")
        ids.append(match.group(1))
    return ids


def reachable(url: str) -> str | None:
    """None if ``url`` answers over HTTP (whatever it says), else why it does not."""
    if not url.startswith(("https://", "http://")):
        raise AuditError(f"--osv-url {url!r}: give an http(s) URL")
    probe = json.dumps({"package": {"name": "pip", "ecosystem": "PyPI"}, "version": "0"})
    request = urllib.request.Request(url, data=probe.encode())  # noqa: S310 (http(s) only)
    try:
        urllib.request.urlopen(request, timeout=15)  # noqa: S310 (http(s) only, above)
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))
    return None


def locked_requirements(folder: Path) -> Path:
    uv = ROOT / ".venv-uv" / "bin" / "uv"
    if not uv.is_file():
        raise AuditError("no .venv-uv/bin/uv: run `make lint`, which installs it")
    out = folder / "requirements.txt"
    subprocess.run([str(uv), "export", "--project", str(ROOT), "--frozen", "--no-dev",
                    "--no-emit-project", "--no-header", "--format", "requirements-txt",
                    "--output-file", str(out)], capture_output=True, timeout=120, check=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--if-reachable", action="store_true",
                        help="where OSV cannot be reached, say so and exit 0")
    parser.add_argument("--osv-url", default=OSV_URL)
    parser.add_argument("--allowlist", type=Path, default=ALLOWLIST)
    args = parser.parse_args(argv)
    try:
        ignored = allowed(args.allowlist)
        why = reachable(args.osv_url)
        if why is not None:
            what = f"audit: {args.osv_url} cannot be reached ({why}): the locked runtime " \
                "dependencies were not checked; run `make audit` where it can be"
            print(what if args.if_reachable else f"error: {what}", file=sys.stderr)
            return 0 if args.if_reachable else 1
        with tempfile.TemporaryDirectory() as scratch:
            requirements = locked_requirements(Path(scratch))
            flags = [f for vuln in ignored for f in ("--ignore-vuln", vuln)]
            # --disable-pip: the list is pinned and hashed, nothing to resolve; --strict: a
            # package that cannot be looked up fails the audit rather than pass unchecked.
            return subprocess.run(
                [sys.executable, "-m", "pip_audit", "--disable-pip", "--strict",
                 "--progress-spinner", "off", "--vulnerability-service", "osv",
                 "--osv-url", args.osv_url, "-r", str(requirements), *flags],
                timeout=600, check=False).returncode
    except AuditError as exc:
        print(f"error: audit: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
