"""Bad configuration and missing AWS resources end in one readable line, never a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dispatcher.cli.app import app
from tests.conftest import Aws

CASES = {
    "missing-table": ({"LONGJOBS_TABLE": "no-such-table"}, "table"),
    "missing-queue": ({"LONGJOBS_QUEUE_URL": "http://127.0.0.1:1/000000000000/nope"},
                      "error:"),
    "missing-family": ({"LONGJOBS_TASK_FAMILY": "no-such-family"}, "no-such-family"),
    "bad-number": ({"LONGJOBS_MAX_RUNNING_TASKS": "ten"}, "LONGJOBS_MAX_RUNNING_TASKS"),
    "bad-launcher": ({"LONGJOBS_LAUNCHER": "k8s"}, "LONGJOBS_LAUNCHER"),
    "bundle-too-big": ({"LONGJOBS_BUNDLE_MAX_JOBS": "500000"}, "LONGJOBS_BUNDLE_MAX_JOBS"),
    "unreachable": ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "error:"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_dispatch_reports_bad_setup_in_one_line(aws: Aws, monkeypatch: pytest.MonkeyPatch,
                                                case: str) -> None:
    env, expected = CASES[case]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    result = CliRunner().invoke(app, ["dispatch", "--once"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], result.output


def test_submit_rejects_a_bad_job_before_sending(aws: Aws) -> None:
    result = CliRunner().invoke(app, ["submit", "k", "--payload", "[1, 2]"])
    assert result.exit_code == 2 and "must be a JSON object" in result.output
    big = '{"x": "' + "y" * 300_000 + '"}'
    result = CliRunner().invoke(app, ["submit", "k", "--payload", big])
    assert result.exit_code == 2 and "payload too large" in result.output
    result = CliRunner().invoke(app, ["submit", "k", "--job-id", "has space"])
    assert result.exit_code == 2 and "job_id" in result.output
