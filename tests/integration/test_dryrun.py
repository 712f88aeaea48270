"""``longjobs dispatch --once --dry-run`` decides everything and changes nothing."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner

from dispatcher.cli.app import app
from dispatcher.ops.client import JobClient
from tests.conftest import Aws
from tests.helpers import client, ecs_tasks, queue_counts, table_items


def _snapshot(aws: Aws) -> tuple[Any, ...]:
    url = aws.proxy.url
    items = sorted(json.dumps(i, sort_keys=True)
                   for i in table_items(url, aws.env["LONGJOBS_TABLE"], ""))
    return (items, queue_counts(url, aws.env["LONGJOBS_QUEUE_URL"]),
            sorted(ecs_tasks(url, aws.env["LONGJOBS_CLUSTER"])))


def test_dry_run_reports_the_plan_and_writes_nothing(aws: Aws) -> None:
    JobClient().submit_many(
        [{"kind": "k", "payload": {}, "job_id": f"small-{i}", "estimated_seconds": 1}
         for i in range(12)] + [{"kind": "k", "payload": {}, "job_id": "long-0"}])
    client("sqs", aws.proxy.url).send_message(QueueUrl=aws.env["LONGJOBS_QUEUE_URL"],
                                              MessageBody="not json")
    before = _snapshot(aws)
    result = CliRunner().invoke(app, ["dispatch", "--once", "--dry-run"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["dry_run"] is True
    actions = {a["would"] for a in out["plan"]}
    assert {"record", "reject", "launch", "run_task", "delete_messages"} <= actions, out
    # A backlog of 14 over 10 free task slots: bundles of 2 small jobs (the even share), and
    # the long job alone; each bundle is recorded as soon as it is full.
    sizes = [len(b["jobs"]) for a in out["plan"] if a["would"] == "record" for b in a["bundles"]]
    assert sorted(sizes) == [1, 2, 2, 2, 2, 2, 2]
    assert out["decision"]["intake"]["rejected"] == 1
    assert _snapshot(aws) == before
    assert aws.proxy.counts()["ecs.RunTask"] == 0
    assert aws.proxy.counts()["dynamodb.TransactWriteItems"] == 0


def test_dry_run_reads_the_priority_queues_too_and_puts_their_messages_back(aws: Aws) -> None:
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"urgent-{i}",
                              "estimated_seconds": 1, "priority": "high"} for i in range(2)]
                            + [{"kind": "k", "payload": {}, "job_id": "later",
                                "estimated_seconds": 1, "priority": "low"}])
    result = CliRunner().invoke(app, ["dispatch", "--once", "--dry-run"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["decision"]["intake"]["received"] == 3
    assert out["decision"]["intake"]["admitted_by_priority"] == {"high": 2, "low": 1}
    for url in ("LONGJOBS_HIGH_QUEUE_URL", "LONGJOBS_LOW_QUEUE_URL"):  # visible again
        assert queue_counts(aws.proxy.url, aws.env[url])[0] > 0


def test_dry_run_judges_schedules_fires_and_writes_no_note(aws: Aws) -> None:
    """A skip schedule's two fires in the queue: the plan runs one and skips the other, and
    neither the schedule's record nor a job is written."""
    schedules = JobClient().schedules()
    schedules.create("sync", "cron(0 * * * ? *)", {"kind": "k", "payload": {}},
                     overlap="skip")
    body = schedules.get("sync").message
    JobClient().submit_many([body("2026-12-05T01:00:00Z"), body("2026-12-05T02:00:00Z")])
    before = _snapshot(aws)
    result = CliRunner().invoke(app, ["dispatch", "--once", "--dry-run"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert out["decision"]["intake"]["record_errors"] == []
    would = [a["would"] for a in out["plan"]]
    assert would.count("note_fire") == 2 and would.count("record_skipped") == 1, out["plan"]
    assert _snapshot(aws) == before


def test_deploy_registers_a_revision_and_running_tasks_keep_theirs(aws: Aws) -> None:
    from dispatcher.wiring import pipeline

    JobClient().submit("k", {}, job_id="on-old")
    pipeline.aws_tick(aws.config()).tick()
    result = CliRunner().invoke(app, ["deploy", "--image", "worker:v2", "--env", "MODE=fast"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "longjobs-worker:2"
    ecs = client("ecs", aws.proxy.url)
    running = ecs.describe_tasks(cluster=aws.env["LONGJOBS_CLUSTER"],
                                 tasks=ecs_tasks(aws.proxy.url, aws.env["LONGJOBS_CLUSTER"]))
    assert [t["taskDefinitionArn"].rsplit("/", 1)[-1] for t in running["tasks"]] == [
        "longjobs-worker:1"]
    new = ecs.describe_task_definition(taskDefinition="longjobs-worker:2")["taskDefinition"]
    container = new["containerDefinitions"][0]
    assert container["image"] == "worker:v2"
    assert {"name": "MODE", "value": "fast"} in container["environment"]
    bad = CliRunner().invoke(app, ["deploy", "--image", "x", "--family", "nope"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_dry_run_of_tenants_work_reads_their_shares_and_writes_nothing(aws: Aws) -> None:
    """Tasks of two tenants running, one capped: a dry run reads their policies, usage and
    batches as a tick would, and writes none of it."""
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"{t}-{i}", "tenant": t}
                             for i in range(3) for t in ("acme", "beta")])
    assert CliRunner().invoke(app, ["dispatch", "--once"]).exit_code == 0
    assert CliRunner().invoke(app, ["tenants", "set", "acme", "--max-running", "1",
                                    "--weight", "2"]).exit_code == 0
    JobClient().submit_many([{"kind": "k", "payload": {}, "job_id": f"{t}-more", "tenant": t}
                             for t in ("acme", "beta")])
    before = _snapshot(aws)
    result = CliRunner().invoke(app, ["dispatch", "--once", "--dry-run"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{"):])
    assert "save_tenant_usage" in {a["would"] for a in out["plan"]}
    assert _snapshot(aws) == before
