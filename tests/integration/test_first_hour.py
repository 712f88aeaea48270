"""A newcomer's first hour with the CLI, walked in order against one ``longjobs local``.

Start local mode with a mistake in LONGJOBS_HANDLERS, then in a script's background (SIGINT
ignored, as ``&`` starts it); forget the ``eval``; submit with a bad value and an unknown kind;
watch, cancel and retry a job; dry-run a tick; read every table at 80 columns; stop local mode
with SIGINT. Every error is one line that names the next step: a command, a flag or a setting.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from dispatcher import versions
from dispatcher.cli import app as cli_app
from tests.helpers import exits_within, local_exports, wait_for

ROOT = Path(__file__).resolve().parents[2]
HANDLERS = "echo=tests.handlers:echo,sleepy=tests.handlers:sleepy"
# What "names the next step" means: a command to run, a flag to pass or a setting to set.
NEXT_STEP = re.compile(r"`longjobs [a-z]|`eval|--[a-z]|LONGJOBS_[A-Z]")
TABLE_COMMANDS = [["jobs", "list"], ["jobs", "list", "--status", "FAILED"], ["stats"],
                  ["top", "--once"], ["dlq", "list"]]


@dataclass
class Out:
    code: int
    out: str
    err: str


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LONGJOBS_", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), POWERTOOLS_LOG_LEVEL="WARNING", **extra)
    return env


def cli(env: dict[str, str], *argv: str) -> Out:
    """``longjobs ARGV`` through the console script's own entry (help tidied, exit codes),
    in this process, with exactly ``env``'s LONGJOBS_/AWS_ settings and COLUMNS=80."""
    saved = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        for k in [k for k in os.environ if k.startswith(("LONGJOBS_", "AWS_"))]:
            del os.environ[k]
        os.environ.update({k: v for k, v in env.items() if k.startswith(("LONGJOBS_", "AWS_"))})
        os.environ["COLUMNS"] = "80"
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                _argv(["longjobs", *argv]):
            try:
                cli_app.main()
            except SystemExit as exc:
                code = int(exc.code or 0)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return Out(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved


def one_line_with_next_step(result: Out) -> str:
    assert result.code == 2, (result.code, result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("error: ")
    assert NEXT_STEP.search(lines[0]), f"names no next step: {lines[0]}"
    return lines[0]




def state(env: dict[str, str], job_id: str) -> str | None:
    shown = cli(env, "jobs", "show", job_id, "--json")
    return json.loads(shown.out)["state"] if shown.code == 0 else None


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str],
                                                                        subprocess.Popen[str]]]:
    """``longjobs local &`` from a script: started with SIGINT ignored, as a non-interactive
    shell starts a background job."""
    stderr = tmp_path_factory.mktemp("local") / "stderr"
    env = _clean_env(LONGJOBS_HANDLERS=HANDLERS, LONGJOBS_HEARTBEAT_SECONDS="2")
    with stderr.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dispatcher.cli.entry", "local", "--tick-seconds", "0.5"],
            env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=err_file,
            stdin=subprocess.DEVNULL,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout is not None
        exports = local_exports(proc.stdout)
        assert "LONGJOBS_QUEUE_URL" in exports, stderr.read_text()
        yield {**env, **exports, "STDERR": str(stderr)}, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_mistake_in_handlers_stops_local_mode_at_start() -> None:
    for spec, fix in (("resize=mypkg.jobs.resize", "write it as resize=mypkg.jobs:resize"),
                      ("resize=nosuchpkg.jobs:resize", "check PYTHONPATH")):
        done = subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", "local"],
                              env=_clean_env(LONGJOBS_HANDLERS=spec), cwd=ROOT, text=True,
                              capture_output=True, timeout=120, check=False)
        line = one_line_with_next_step(Out(done.returncode, done.stdout, done.stderr))
        assert fix in line
        assert done.stdout == ""  # no exports: nothing was started


def test_forgetting_the_eval_says_to_start_local_mode_and_eval() -> None:
    for argv in (["jobs", "list"], ["submit", "echo"], ["stats"], ["top", "--once"],
                 ["jobs", "show", "x"], ["dlq", "list"]):
        line = one_line_with_next_step(cli(_clean_env(), *argv))
        assert "longjobs local" in line and "eval" in line, line


def test_help_and_version_read_as_a_person_would_expect() -> None:
    top = cli({}, "--help")
    assert top.code == 0
    assert cli({}, "--version").out.strip() == versions.line()
    for argv in (["submit"], ["jobs", "list"], ["jobs", "show"], ["jobs", "cancel"],
                 ["jobs", "retry"], ["dlq", "list"], ["demo"], ["local"], ["dispatch"],
                 ["stats"], ["top"], ["deploy"]):
        shown = cli({}, *argv, "--help").out
        assert shown.count("\n") > 3, argv
        usage = next(line for line in shown.splitlines() if "Usage:" in line)
        assert "<bool>" not in shown and "{" not in usage, shown
        assert max(len(line) for line in shown.splitlines()) <= 80, shown
    submit = cli({}, "submit", "--help").out
    assert "Usage: longjobs submit [OPTIONS] KIND" in submit
    for flag in ("--estimated-seconds", "--max-attempts", "--timeout-seconds", "--json"):
        row = next(line for line in submit.splitlines() if flag in line)
        assert re.search(r"[a-z]{4}", row.split(flag, 1)[1]), f"{flag} has no help: {row}"
    assert "SCHEDULED" in cli({}, "jobs", "list", "--help").out


def test_the_newcomer_path(local: tuple[dict[str, str], subprocess.Popen[str]],
                           capfd: pytest.CaptureFixture[str]) -> None:
    env, proc = local

    # Three jobs at once (their waits overlap): one that runs, one of a kind no handler
    # takes, one long enough to cancel.
    job = cli(env, "submit", "echo", "--payload", '{"n": 1}', "--estimated-seconds", "1")
    assert job.code == 0, job.err
    job_id = job.out.strip()
    unknown = cli(env, "submit", "nokind", "--estimated-seconds", "1").out.strip()
    long = cli(env, "submit", "sleepy", "--payload", '{"seconds": 120}').out.strip()
    assert json.loads(cli(env, "submit", "echo", "--json").out)["job_id"]

    # Errors: a bad value, an unknown id.
    bad = one_line_with_next_step(cli(env, "submit", "echo", "--priority", "urgent"))
    assert "--priority" in bad and "Value error" not in bad
    assert not re.search(r"[0-9a-f]{32}", bad), "a generated id leads the error"
    missing = one_line_with_next_step(cli(env, "jobs", "show", "nope"))
    assert "`longjobs jobs list`" in missing

    # Watched to the end; the unknown kind's reason says how to register a handler.
    wait_for(lambda: state(env, job_id) == "SUCCEEDED")
    wait_for(lambda: state(env, unknown) == "FAILED")
    reason = json.loads(cli(env, "jobs", "show", unknown, "--json").out)["reason"]
    assert "LONGJOBS_HANDLERS=nokind=module:function" in reason
    assert f"longjobs jobs retry {unknown}" in reason

    # Cancel a running job: the message says when it takes effect and how to see it.
    wait_for(lambda: state(env, long) == "RUNNING")
    cancel = cli(env, "jobs", "cancel", long)
    assert cancel.code == 0 and "within 2 s" in cancel.out, cancel.out
    assert f"`longjobs jobs show {long}`" in cancel.out
    wait_for(lambda: state(env, long) == "CANCELLED")
    retry = cli(env, "jobs", "retry", long, "--from-scratch")
    assert retry.code == 0 and "the next tick launches it" in retry.out, retry.out
    again = one_line_with_next_step(cli(env, "jobs", "retry", job_id))  # SUCCEEDED: no retry
    assert job_id in again

    # Dry run against local mode: the decision once, on stdout.
    capfd.readouterr()
    dry = cli(env, "dispatch", "--once", "--dry-run")
    assert dry.code == 0, dry.err
    assert json.loads(dry.out)["dry_run"] is True
    # The log handler holds the stderr of its import: read the file descriptor itself.
    logged = capfd.readouterr().err + dry.err
    assert '"message":"tick"' not in logged.replace(" ", ""), logged

    # Tables fit 80 columns; long ids are shortened unambiguously, whole in --json and --wide.
    boto3.client("sqs", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                 aws_access_key_id="local", aws_secret_access_key="local").send_message(
        QueueUrl=env["LONGJOBS_DLQ_URL"],
        MessageBody=json.dumps({"kind": "echo", "job_id": unknown, "payload": {"x": "y" * 200}}))
    for argv in [*TABLE_COMMANDS, ["jobs", "show", unknown], ["jobs", "show", long]]:
        shown = cli(env, *argv)
        assert shown.code == 0, (argv, shown.err)
        widest = max(len(line) for line in shown.out.splitlines())
        assert widest <= 80, f"longjobs {' '.join(argv)}: a line of {widest}:\n{shown.out}"
    listed = cli(env, "jobs", "list").out
    assert unknown not in listed and unknown[:8] in listed and "--wide" in listed
    assert unknown in cli(env, "jobs", "list", "--wide").out
    assert unknown in cli(env, "jobs", "list", "--json").out
    assert "RECV" in cli(env, "dlq", "list").out

    # SIGINT stops it, though it was started with SIGINT ignored, and it says so.
    proc.send_signal(signal.SIGINT)
    assert exits_within(proc, 120, Path(env["STDERR"])) == 0
    said = Path(env["STDERR"]).read_text()
    assert "longjobs local stopped" in said, said
    # Nothing of it is left in the temp directory (its tasks' output went with it).
    output = Path(env["LONGJOBS_LOCAL_LOG"])
    assert output.name == "tasks.log" and not output.parent.exists(), output
