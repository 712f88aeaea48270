"""A producer in another language, as docs/producing.md shows it: the example Node.js producer
(docs/examples/node-producer: the AWS SDK for JavaScript v3, and ajv judging each message by
``longjobs schema`` first) sends to ``longjobs local``. What ajv refuses is never sent, and the
dispatcher would refuse it too; what it takes runs, its payload measured in the bytes the
producer counted; the one rule here that JSON Schema cannot state (failures tolerated past the
array's size) is found REJECTED by its job id, with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher.domain import message
from dispatcher.domain.errors import InvalidMessage
from tests.helpers import local_exports, wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "node-producer"
NODE, NPM = shutil.which("node"), shutil.which("npm")
pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None,
    reason="node and npm are not installed: the example Node.js producer cannot run")

EUROS = 80_000  # 240,000 bytes of UTF-8: 480,000 as \u escapes, which the limit once counted
JOBS: list[dict[str, Any]] = [
    # U+FFFE: JSON.stringify writes it as it is, SQS refuses it so; the producer escapes it.
    {"job_id": "node-euros", "kind": "measure",
     "payload": {"s": "\u20ac" * EUROS, "odd": "\ufffe"}},
    {"job_id": "node-array", "kind": "measure", "payload": {}, "array_size": 3,
     "tolerated_failures": "5%", "priority": "high"},
    {"job_id": "node-due", "kind": "measure", "payload": {}, "priority": "low",
     "not_before": "2020-01-01t00:00:00z"},  # RFC 3339 allows the lower-case t and z
    # Refused by the schema (ajv), never sent: a count written as a string; a payload over the
    # limit by 2 bytes a character (the producer measures it, as the schema's description says).
    {"job_id": "node-count", "kind": "measure", "payload": {}, "tolerated_failures": "3"},
    {"job_id": "node-big", "kind": "measure",
     "payload": {"s": "\u00e9" * (message.MAX_PAYLOAD_BYTES // 2)}},
    # Taken by the schema, refused by the dispatcher: JSON Schema cannot compare two fields.
    {"job_id": "node-many", "kind": "measure", "payload": {}, "array_size": 2,
     "tolerated_failures": 5},
]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LONGJOBS_", "AWS_"))}
    env.update(PYTHONPATH=str(ROOT), POWERTOOLS_LOG_LEVEL="WARNING", **extra)
    return env


def _longjobs(env: dict[str, str], *argv: str) -> str:
    done = subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", *argv], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def producer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example, installed as its README says (`npm ci`: the versions its lock names)."""
    where = tmp_path_factory.mktemp("node-producer")
    for name in ("package.json", "package-lock.json", "producer.mjs"):
        shutil.copy(EXAMPLE / name, where / name)
    assert NPM is not None
    done = subprocess.run([NPM, "ci", "--no-audit", "--no-fund"], cwd=where,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"npm ci failed (is the npm registry reachable?): " \
        f"{done.stderr[-2000:]}"
    return where / "producer.mjs"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    stderr = tmp_path_factory.mktemp("local") / "stderr"
    env = _clean_env(LONGJOBS_HANDLERS="measure=tests.handlers:measure")
    with stderr.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dispatcher.cli.entry", "local", "--tick-seconds", "0.5"],
            env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=err_file,
            stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        exports = local_exports(proc.stdout)
        assert "LONGJOBS_QUEUE_URL" in exports, stderr.read_text()
        yield {**env, **exports}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_node_producer_sends_what_the_schema_takes_and_each_ends_as_the_dispatcher_says(
        producer: Path, local: dict[str, str], tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(_longjobs(local, "schema"))
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"schema_version": 1, **j}, ensure_ascii=False) + "\n"
                            for j in JOBS), encoding="utf-8")
    assert NODE is not None
    done = subprocess.run([NODE, str(producer), str(schema), str(jobs)], env=local,
                          capture_output=True, text=True, timeout=120, check=False)
    said = {line.split()[1].rstrip(":"): line for line in done.stdout.splitlines()}
    assert done.returncode == 1, (done.stdout, done.stderr)  # two were refused
    assert {j: said[j].split()[0] for j in said} == {
        "node-euros": "sent", "node-array": "sent", "node-due": "sent", "node-many": "sent",
        "node-count": "refused", "node-big": "refused"}, done.stdout
    assert "/tolerated_failures must match pattern" in said["node-count"]
    # Counted alike: JSON.stringify's UTF-8 bytes, and the dispatcher's count of the same.
    big = len('{"s":""}') + message.MAX_PAYLOAD_BYTES
    assert f"/payload is {big} bytes" in said["node-big"]
    with pytest.raises(InvalidMessage, match=f"payload too large: {big} bytes"):
        message.parse(json.dumps({"schema_version": 1, **JOBS[4]}))

    ends = {"node-euros": "SUCCEEDED", "node-array": "SUCCEEDED", "node-due": "SUCCEEDED",
            "node-many": "REJECTED"}

    def states() -> dict[str, str]:
        shown = json.loads(_longjobs(local, "jobs", "list", "--json", "--limit", "100"))
        return {j["job_id"]: j["state"] for j in shown["jobs"] if j["job_id"] in ends}

    wait_for(lambda: states() == ends, 180, f"the sent jobs ended as {ends}")
    euros = json.loads(_longjobs(local, "jobs", "show", "node-euros", "--json"))
    assert euros["result"] == {"s": {"length": EUROS, "characters": ["\u20ac"]},
                               "odd": {"length": 1, "characters": ["\ufffe"]}}
    many = json.loads(_longjobs(local, "jobs", "show", "node-many", "--json"))
    assert "tolerated_failures 5 is more than the array's 2 children" in many["reason"]
    listed = json.loads(_longjobs(local, "jobs", "list", "--json", "--limit", "100"))
    assert not {"node-count", "node-big"} & {j["job_id"] for j in listed["jobs"]}
