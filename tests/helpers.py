"""Assertions on the real table, queue, cluster and processes (read through boto3 and /proc, not
our own code)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3


def client(service: str, endpoint: str) -> Any:
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


def table_items(endpoint: str, table: str, prefix: str) -> list[dict[str, Any]]:
    ddb = client("dynamodb", endpoint)
    items: list[dict[str, Any]] = []
    for page in ddb.get_paginator("scan").paginate(TableName=table):
        items.extend(i for i in page["Items"] if i["pk"]["S"].startswith(prefix))
    return items


def queue_counts(endpoint: str, queue_url: str) -> tuple[int, int]:
    attrs = client("sqs", endpoint).get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages",
                                            "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(
        attrs["ApproximateNumberOfMessagesNotVisible"])


def ecs_tasks(endpoint: str, cluster: str) -> list[str]:
    ecs = client("ecs", endpoint)
    arns: list[str] = []
    for page in ecs.get_paginator("list_tasks").paginate(cluster=cluster):
        arns.extend(page["taskArns"])
    return arns


def s(item: dict[str, Any], key: str) -> Any:
    value = item.get(key)
    if value is None:
        return None
    if "S" in value:
        return value["S"]
    if "N" in value:
        return float(value["N"])
    if "L" in value:
        return [v.get("S") for v in value["L"]]
    return value


def launched(aws: Any, job_id: str, **submit: Any) -> tuple[Any, str, str]:
    """Submit one job and tick once: (store, bundle id, task ARN) of its launched bundle."""
    from dispatcher.ops.client import JobClient
    from dispatcher.wiring import pipeline
    from dispatcher.wiring.adapters import open_store

    JobClient().submit("k", {}, job_id=job_id, **submit)
    pipeline.aws_tick(aws.config()).tick()
    store = open_store(aws.env["LONGJOBS_TABLE"])
    job = store.get_job(job_id)
    assert job is not None and job.bundle_id
    bundle = store.get_bundle(job.bundle_id)
    assert bundle is not None and bundle.task_arn
    return store, bundle.bundle_id, bundle.task_arn


def check_converged(aws: Any, job_ids: list[str], *, max_jobs: int = 50) -> None:
    """On the real table, queue and cluster: every job recorded once, the queue empty, every
    bundle launched once on its own task."""
    url = aws.proxy.url
    jobs = table_items(url, aws.env["LONGJOBS_TABLE"], "JOB#")
    assert sorted(s(i, "job_id") for i in jobs) == sorted(job_ids)
    assert queue_counts(url, aws.env["LONGJOBS_QUEUE_URL"]) == (0, 0)
    bundles = table_items(url, aws.env["LONGJOBS_TABLE"], "BUNDLE#")
    in_bundles = [j for b in bundles for j in s(b, "job_ids")]
    assert sorted(in_bundles) == sorted(job_ids)  # each job in exactly one bundle
    assert all(len(s(b, "job_ids")) <= max_jobs for b in bundles)
    assert {s(b, "state") for b in bundles} == {"LAUNCHED"}
    arns = [s(b, "task_arn") for b in bundles]
    assert len(set(arns)) == len(bundles)
    assert sorted(ecs_tasks(url, aws.env["LONGJOBS_CLUSTER"])) == sorted(arns)


def alive(pid: int) -> bool:
    """The process runs: it exists and is not a zombie (one whose parent died is reaped by
    whatever runs as PID 1, which in a container may never do it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def modules_loaded_after(code: str, cwd: Path) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (what a deployable imports)."""
    result = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\n"
                             "print('\\n'.join(sys.modules))"],
                            cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return set(result.stdout.split())


def local_exports(lines: Iterable[str]) -> dict[str, str]:
    """The ``export NAME=value`` lines ``longjobs local`` prints on stdout, read up to its last
    one (``LONGJOBS_LOCAL_LOG``), so the caller can go on while local mode runs."""
    exports: dict[str, str] = {}
    for line in lines:
        name, _, value = line.removeprefix("export ").strip().partition("=")
        exports[name] = value
        if name == "LONGJOBS_LOCAL_LOG":
            break
    return exports


def clean_env(root: Path, **extra: str) -> dict[str, str]:
    """This process's environment as a fresh shell's for the project in ``root``: no
    ``LONGJOBS_`` or ``AWS_`` settings of the test run, the project importable, quiet
    dispatcher logs; plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LONGJOBS_", "AWS_"))}
    env.update(PYTHONPATH=str(root), POWERTOOLS_LOG_LEVEL="WARNING", **extra)
    return env


def start_local(root: Path, env: dict[str, str], stderr: Path,
                tick_seconds: float = 0.5, args: tuple[str, ...] = ("--no-console",)
                ) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """``longjobs local`` as a user starts it (plus ``args``: by default, without its web
    console), in ``root`` with ``env`` (its stderr to the file ``stderr``): the process and
    the client environment its exports make."""
    with stderr.open("w") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "dispatcher.cli.entry", "local",
                                 "--tick-seconds", str(tick_seconds), *args], env=env, cwd=root,
                                stdout=subprocess.PIPE, stderr=err_file,
                                stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    return proc, {**env, **local_exports(proc.stdout)}


def wait_for(pred: Callable[[], bool], timeout: float = 120.0, what: str = "condition") -> None:
    """Poll until ``pred`` holds. The timeout only guards against a hang (a loaded CI machine
    with four test workers on two cores can take a minute); nothing asserts how long it took."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached in {timeout:.0f} s")
        time.sleep(0.2)


def exits_within(proc: subprocess.Popen[Any], seconds: float, stderr: Path) -> int:
    """``proc``'s exit status once it ends; if it is still running after ``seconds``, kill it
    and fail with the end of its stderr (``longjobs local`` prints every thread's stack there
    when its stop hangs)."""
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        tail = stderr.read_text(errors="replace")[-12000:] if stderr.exists() else ""
        raise AssertionError(f"still running {seconds:.0f} s after the signal; its stderr "
                             f"ends:\n{tail}") from None


def stream_records(table: str, ddb: Any = None, streams: Any = None) -> list[dict[str, Any]]:
    """Every record of the table's stream so far, as Lambda's mapping hands them to a function
    (eventSourceARN set: moto's records lack it). ``ddb``/``streams``: clients (default: the
    environment's endpoint)."""
    ddb = ddb or boto3.client("dynamodb")
    streams = streams or boto3.client("dynamodbstreams")
    arn = ddb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    out: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        it = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                        ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while it and (got := streams.get_records(ShardIterator=it))["Records"]:
            out += [{**r, "eventSourceARN": arn} for r in got["Records"]]
            it = got.get("NextShardIterator")
    return out


def cli(root: Path, env: dict[str, str], *args: str) -> str:
    """``longjobs ARGS`` as a person runs it (a wide terminal); its output, or the test fails
    with its stderr."""
    done = subprocess.run([sys.executable, "-m", "dispatcher.cli.entry", *args], env={
        **env, "COLUMNS": "200"}, cwd=root, capture_output=True, text=True, timeout=120,
        check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def local_mode(root: Path, tmp_path: Path, args: tuple[str, ...] = ("--no-console",),
               **extra: str) -> Iterator[dict[str, str]]:
    """``longjobs local`` started with ``args`` and ``extra`` settings; yields the environment
    its clients use (its exports), and stops it at the end (it must exit within two
    minutes)."""
    stderr = tmp_path / "stderr"
    local, client = start_local(root, clean_env(root, **extra), stderr, args=args)
    try:
        yield client
    finally:
        local.terminate()
        exits_within(local, 120, stderr)
