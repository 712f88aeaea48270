"""`longjobs schedules` on a bad request: one line on stderr, exit code 2, saying what is
wrong and what to do next; nothing is created. Run against moto's EventBridge Scheduler."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from dispatcher.cli.app import app
from tests.conftest import Aws

CREATE = ["schedules", "create", "nightly", "report"]
BAD = {
    "no-when": (CREATE, "say when it fires: --cron"),
    "two-whens": ([*CREATE, "--cron", "0 2 * * ? *", "--rate", "1 hour"],
                  "give one of --cron, --rate and --at, not --cron and --rate"),
    "bad-field": ([*CREATE, "--cron", "0 25 * * ? *"], "hours 25 is out of range 0-23"),
    "bad-rate": ([*CREATE, "--rate", "1 minutes"], "rate(1 minute)"),
    "bad-zone": ([*CREATE, "--cron", "0 2 * * ? *", "--timezone", "Berlin"], "Berlin"),
    "past": ([*CREATE, "--at", "2020-01-01T00:00:00"], "is past: it would never fire"),
    "gap": ([*CREATE, "--at", "2030-03-31T02:30:00", "--timezone", "Europe/Berlin"],
            "2030-03-31T02:30:00"),
    "bad-name": (["schedules", "create", "no spaces", "report", "--rate", "1 hour"],
                 "1-64 characters"),
    "bad-job": ([*CREATE, "--rate", "1 hour", "--cpu", "3"], "cpu"),
    "bad-payload": ([*CREATE, "--rate", "1 hour", "--payload", "[1]"], "JSON object"),
    "bad-overlap": ([*CREATE, "--rate", "1 hour", "--overlap", "sometimes"], "overlap"),
    "unknown": (["schedules", "show", "nope"], "no schedule 'nope'"),
}


def one_error(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_schedule_is_one_line_and_nothing_is_made(aws: Aws, case: str) -> None:
    args, said = BAD[case]
    assert said in one_error(args)
    listed = CliRunner().invoke(app, ["schedules", "list", "--json"])
    assert listed.exit_code == 0 and '"count": 0' in listed.output


def test_a_name_taken_or_missing_says_what_to_do(aws: Aws) -> None:
    made = CliRunner().invoke(app, [*CREATE, "--rate", "1 hour"])
    assert made.exit_code == 0, made.output
    assert "`longjobs schedules update NAME` changes it" in one_error(
        [*CREATE, "--rate", "2 hours"])
    assert "`longjobs schedules list` shows the schedules" in one_error(
        ["schedules", "pause", "nope"])


def test_without_the_schedule_settings_it_names_them(aws: Aws,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LONGJOBS_SCHEDULE_GROUP")
    said = one_error(["schedules", "list"])
    assert "LONGJOBS_SCHEDULE_GROUP" in said and "ScheduleGroupName" in said
