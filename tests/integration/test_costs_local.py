"""What a job cost and what it carries, as a person sees it in `longjobs local`: jobs of two
kinds and two labels run; once their tasks stop (each stop's event carries the task's bill, as
ECS's do), `jobs show` prints each job's share, `jobs list --wide` a COST column, and
`stats --by kind` and `--by label` the cost per group, which adds up to what the jobs cost;
`jobs list --label` lists the jobs that carry a label."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import local_mode, wait_for
from tests.integration.test_progress_local import ROOT, longjobs


def test_show_list_and_stats_print_what_jobs_cost(tmp_path: Path) -> None:
    with local_mode(ROOT, tmp_path, LONGJOBS_HANDLERS="nap=tests.handlers:sleepy,echo=tests."
                    "handlers:echo", LONGJOBS_TASK_CONCURRENCY="3") as client:
        for n in range(3):
            longjobs(client, "submit", "nap", "--job-id", f"nap{n}", "--payload",
                     '{"seconds": 2}', "--label", "team=night", "--label", "tier=gold")
        longjobs(client, "submit", "echo", "--job-id", "echo0", "--payload", '{"x": 1}',
                 "--label", "team=day")
        ids = ["nap0", "nap1", "nap2", "echo0"]

        def shown(job_id: str) -> dict[str, object]:
            return json.loads(longjobs(client, "jobs", "show", job_id, "--json"))

        # The timeout guards against a hang only: a job's cost is final once its task's stop
        # was handled.
        wait_for(lambda: all((c := shown(j)["cost"]) and c["final"] for j in ids), 180,  # type: ignore[index]
                 "every job's cost settled")
        costs = {j: shown(j)["cost"] for j in ids}
        for c in costs.values():
            assert c["dollars"] > 0 and c["run_seconds"] > 0  # type: ignore[index]
        text = longjobs(client, "jobs", "show", "nap0")
        assert "cost" in text and "its share of their bills" in text
        assert "team=night, tier=gold" in text
        listed = longjobs(client, "jobs", "list", "--wide")
        assert "COST" in listed and "$0.000" in listed
        by_kind = json.loads(longjobs(client, "stats", "--by", "kind", "--json"))
        groups = {g["group"]: g for g in by_kind["groups"]}
        assert {"nap", "echo"} <= set(groups)
        assert groups["nap"]["jobs"] == 3 and groups["echo"]["jobs"] == 1
        # Every stop in the window is a task of these jobs: the kinds add up to the jobs, but
        # for a task that ran none (seen on a loaded machine), whose cost is the group
        # "(no job ran)"'s, no job's (docs/operating.md).
        total = sum(c["dollars"] for c in costs.values())  # type: ignore[index]
        ran = sum(g["dollars"] for g in by_kind["groups"] if g["group"] != "(no job ran)")
        assert ran == pytest.approx(total, rel=0.01)
        table = longjobs(client, "stats", "--by", "kind")
        assert "usage by kind" in table and "nap" in table
        by_team = json.loads(longjobs(client, "stats", "--by", "label:team", "--json"))
        teams = {g["group"]: g for g in by_team["groups"]}
        assert set(teams) == {"team=night", "team=day"} and teams["team=night"]["jobs"] == 3
        assert by_team["total"]["dollars"] == pytest.approx(total, rel=0.01)
        night = json.loads(longjobs(client, "jobs", "list", "--label", "team=night", "--json"))
        assert sorted(j["job_id"] for j in night["jobs"]) == ["nap0", "nap1", "nap2"]
        bad = subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", "submit", "echo",
                              "--label", "team"], env=client, cwd=ROOT, capture_output=True,
                             text=True, timeout=120, check=False)
        assert bad.returncode != 0 and "is not key=value (e.g. customer=acme)" in bad.stderr
        assert "Traceback" not in bad.stderr
