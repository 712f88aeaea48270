"""Bad configuration and missing AWS resources end in one readable line, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
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
    # The flag the user typed, not the message's field.
    assert result.exit_code == 2 and "--job-id must be 1-128 chars" in result.output


def test_submit_reads_a_payload_too_long_for_a_command_line_from_a_file_or_stdin(
        aws: Aws, tmp_path: Path) -> None:
    """`--payload @FILE` and `--payload -`: a payload of up to 256 KiB does not fit one
    command-line argument (~128 KiB on Linux); too large or unreadable, a one-line error."""
    body = json.dumps({"rows": ["r" * 100] * 1500})  # ~150 KB: too long for argv, under 256 KiB
    path = tmp_path / "payload.json"
    path.write_text(body)
    sent = CliRunner().invoke(app, ["submit", "k", "--payload", f"@{path}", "--json"])
    assert sent.exit_code == 0, sent.output
    piped = CliRunner().invoke(app, ["submit", "k", "--payload", "-", "--json"], input=body)
    assert piped.exit_code == 0, piped.output
    sqs = boto3.client("sqs", endpoint_url=aws.moto.url, region_name="us-east-1")
    got = sqs.receive_message(QueueUrl=aws.env["LONGJOBS_QUEUE_URL"],
                              MaxNumberOfMessages=10)["Messages"]
    assert [len(json.loads(m["Body"])["payload"]["rows"]) for m in got] == [1500, 1500]
    path.write_text('{"x": "' + "y" * 300_000 + '"}')
    big = CliRunner().invoke(app, ["submit", "k", "--payload", f"@{path}"])
    assert big.exit_code == 2 and "payload too large" in big.output
    missing = CliRunner().invoke(app, ["submit", "k", "--payload", f"@{tmp_path}/nope.json"])
    assert missing.exit_code == 2 and "cannot read" in missing.output
    assert "Traceback" not in big.output + missing.output
