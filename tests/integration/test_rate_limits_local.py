"""Rate limits as a person uses them, in `longjobs local` with real runner processes: a limit
set with `longjobs limits set`, listed by `longjobs limits`; a job that declares `--uses` runs
once its token is granted, a second one waits saying `rate_limit`; a handler's
`ctx.acquire` gets its tokens no faster than the limit lets."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import cli, local_mode, wait_for

ROOT = Path(__file__).resolve().parents[2]


def longjobs(env: dict[str, str], *args: str) -> str:
    return cli(ROOT, env, *args)


def test_a_limit_holds_launches_and_acquires(tmp_path: Path) -> None:
    with local_mode(ROOT, tmp_path, LONGJOBS_HANDLERS="acquirer=tests.handlers:acquirer"
                    ) as client:
        said = longjobs(client, "limits", "set", "once", "--rate", "1/hour", "--burst", "1")
        assert "limit once: 1/hour, burst 1" in said and "note: a tick" not in said
        longjobs(client, "limits", "set", "api", "--rate", "2/s", "--burst", "1")
        listed = longjobs(client, "limits")
        assert "once" in listed and "1/hour" in listed and "2/s" in listed
        longjobs(client, "submit", "acquirer", "--job-id", "first", "--uses", "once=1",
                 "--payload", '{"n": 0}')
        longjobs(client, "submit", "acquirer", "--job-id", "second", "--uses", "once=1",
                 "--payload", '{"n": 0}')
        longjobs(client, "submit", "acquirer", "--job-id", "calls", "--payload",
                 '{"key": "api", "n": 5}')
        # The timeouts guard against a hang only.
        wait_for(lambda: "SUCCEEDED" in longjobs(client, "jobs", "show", "calls"), 120,
                 "the job that acquires succeeds")
        def state(job_id: str) -> str:
            return str(json.loads(longjobs(client, "jobs", "show", job_id, "--json"))["state"])

        wait_for(lambda: "SUCCEEDED" in {state("first"), state("second")}, 120,
                 "one of the jobs that take the hour's one token runs")
        held = "second" if state("first") == "SUCCEEDED" else "first"
        assert state(held) == "PENDING"  # one token an hour: the other waits
        said = longjobs(client, "jobs", "show", held)
        assert "rate_limit (once: its next tokens) until" in said, said
        shown = longjobs(client, "jobs", "show", held)
        assert "uses" in shown and "once=1 tokens" in shown
        result = json.loads(longjobs(client, "jobs", "show", "calls", "--json"))["result"]
        granted = result["granted"]
        # 2 a second, a burst of 1: five tokens take at least two seconds.
        assert granted[-1] - granted[0] >= 1.9
