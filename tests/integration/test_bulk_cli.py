"""``longjobs jobs cancel|retry --status ... --yes`` on DynamoDB (moto): a few hundred jobs
selected by filter through the status index, each acted on once, the rest untouched."""

from __future__ import annotations

import json
from collections import Counter

from typer.testing import CliRunner

from dispatcher.cli.app import app
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, JobState, now
from dispatcher.ports.table import Put
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.wiring.adapters import open_store
from tests.conftest import Aws

runner = CliRunner()


def record(store: Store, prefix: str, n: int, kind: str, at: float) -> list[str]:
    """``n`` PENDING jobs in PENDING bundles of 10, sharing creation times as a tick's do."""
    ids = [f"{prefix}{i:04}" for i in range(n)]
    for start in range(0, n, 10):
        chunk = ids[start:start + 10]
        bid = f"b-{prefix}{start}"
        store.record([Bundle(bid, chunk, created_at=at)],
                     [Job(job_id=j, kind=kind, payload={}, estimated_seconds=1.0,
                          bundle_id=bid, created_at=at + start // 50) for j in chunk])
    return ids


def states(store: Store, ids: list[str]) -> Counter[str]:
    return Counter(str(j.state) for j in store.get_jobs(ids))


def test_a_bulk_cancel_and_retry_by_filter_through_the_cli(aws: Aws) -> None:
    store = open_store(aws.env["LONGJOBS_TABLE"], host=aws.proxy.url)
    t = now()
    resize = record(store, "r", 150, "resize", t - 60)
    report = record(store, "p", 40, "report", t - 60)
    old = record(store, "o", 40, "resize", t - 3 * 86400)
    failed = [f"f{i:03}" for i in range(20)]
    for j in failed:
        store.table.write(Put(r.job_record(Job(job_id=j, kind="resize", payload={},
                                               state=JobState.FAILED, created_at=t - 30))))

    dry = runner.invoke(app, ["jobs", "cancel", "--status", "PENDING", "--kind", "resize",
                              "--since", "1d", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    shown = json.loads(dry.stdout)
    sample = shown.pop("sample")
    assert shown == {"action": "cancel", "matched": 150, "dry_run": True,
                     "selection": shown["selection"]}
    assert shown["selection"].startswith("status=PENDING kind=resize created since ")
    assert len(sample) == 10 and set(sample) <= set(resize)
    said = runner.invoke(app, ["jobs", "cancel", "--status", "PENDING", "--kind", "resize",
                               "--since", "1d", "--dry-run"])
    assert said.exit_code == 0 and said.stdout.startswith(
        "150 job(s) match status=PENDING kind=resize created since "), said.output
    assert sample[0] in said.stdout and ", ...; nothing done (--dry-run; run it without to " \
        "cancel them)" in said.stdout, said.stdout
    refused = runner.invoke(app, ["jobs", "cancel", "--status", "PENDING"])
    assert refused.exit_code == 2 and "refusing" in refused.output

    done = runner.invoke(app, ["jobs", "cancel", "--status", "PENDING", "--kind", "resize",
                               "--since", "1d", "--yes", "--reason", "bad input", "--json"])
    assert done.exit_code == 0, done.output
    out = json.loads(done.stdout)
    assert (out["matched"], out["acted"], out["errors"], out["skipped"]) == (150, 150, 0, 0)
    assert states(store, resize) == {"CANCELLED": 150}
    assert states(store, report + old) == {"PENDING": 80}
    job = store.get_job(resize[0])
    assert job is not None and job.history[-1]["by"] == out["bulk_id"]
    assert job.bulk_ids == [out["bulk_id"]]  # the mark a resume reads, on the job's item
    assert job.reason is not None and "bad input" in job.reason

    again = runner.invoke(app, ["jobs", "retry", "--status", "FAILED", "--yes",
                                "--bulk-id", "bulk-fixed", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["acted"] == 20
    assert states(store, failed) == {"PENDING": 20}
