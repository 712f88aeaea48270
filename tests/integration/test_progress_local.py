"""`ctx.progress` as a person sees it: a job in `longjobs local` reports it is half done, and
`longjobs jobs list` and `jobs show` print its percentage and ETA while it runs (the runner's
heartbeat carried the report; `LONGJOBS_HEARTBEAT_SECONDS` is short here)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import cli, local_mode, wait_for

ROOT = Path(__file__).resolve().parents[2]


def longjobs(env: dict[str, str], *args: str) -> str:
    return cli(ROOT, env, *args)


def test_list_and_show_print_a_running_jobs_progress(tmp_path: Path) -> None:
    with local_mode(ROOT, tmp_path, LONGJOBS_HANDLERS="halfway=tests.handlers:halfway",
                    LONGJOBS_HEARTBEAT_SECONDS="1") as client:
        longjobs(client, "submit", "halfway", "--job-id", "half", "--payload",
                 '{"seconds": 120}')
        # The timeout guards against a hang only.
        wait_for(lambda: "50% eta" in longjobs(client, "jobs", "list"), 120,
                 "jobs list shows the job half done")
        listed = longjobs(client, "jobs", "list", "--wide")
        assert "PROGRESS" in listed and "halfway there" in listed
        shown = longjobs(client, "jobs", "show", "half")
        assert "50% (1 of 2), eta" in shown and ": halfway there" in shown
        longjobs(client, "jobs", "cancel", "half")
