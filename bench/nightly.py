"""The reference nightly batch, end to end through local mode, with real runner processes.

The reference batch (the load longjobs was built for): 200,000 jobs of ~2 s of I/O wait, at
most 60 tasks of 20 jobs at once: a floor of 200,000 x 2 s / 1,200 = 333 s of work, plus one
Fargate start (30-60 s). Scaled down by ``--scale`` S (N = 200,000 / S jobs, default 6,000) and
``--time-scale`` F (the floor of work is F x 333 s, default 0.45: 150 s; that sets the job
length D, 30 s by default, and Fargate's start latency is scaled by F too; or give ``--jobs``
and ``--seconds``). Why fewer, longer jobs than the reference batch's: the local endpoints
(moto, MiniStack) admit a few hundred jobs a second where AWS takes thousands, so 20,000 jobs of
0.2 s would measure the emulator, not the dispatcher; this keeps admission about as small a
share of the floor as it is on AWS. It runs through
:class:`dispatcher.local.environment.LocalEnv`: the producer enqueues N jobs of D
seconds (a handler that sleeps), then the dispatcher ticks every ``--tick-interval`` seconds,
launching tasks as runner processes (forked from a process that imported the runner, as local
mode starts them) with the modelled Fargate start latency (30-60 s times F), until every job is
terminal.

Where things run: moto (DynamoDB, ECS) in a child process of its own, SQS on MiniStack (its own
venv, `make ministack`; ``--sqs moto`` keeps it on moto, fine for a few thousand jobs), the
dispatcher (ticks and task events), the producer and four counting proxies in this process.
Each component talks to AWS through its own ``AwsProxy``, so calls are counted per component
even while all run at once: producer (SQS), dispatcher (SQS; DynamoDB and ECS), runner
(DynamoDB, from the task processes).

Prints: drain time (end of enqueueing to the last job terminal, from the jobs' own
``updated_at``), the floor for the same parameters, admitted jobs/s, launched tasks/s, this
process's peak RSS (VmHWM from /proc/self/status: the dispatcher plus the producer and the
proxies; moto's and MiniStack's are shown apart), AWS calls per job end to end, the check that
every job SUCCEEDED exactly once (job records and the handlers' own execution log), and last
``nightly: drain/floor = X.XX``.

``--backlog-only`` measures instead the dispatcher's peak RSS while it admits a backlog of 5,000
and of 20,000 messages (each in a fresh process; tasks are launched but never start).

Run: .venv/bin/python bench/nightly.py [--scale S | --jobs N --seconds D] [--concurrency C]
"""

from __future__ import annotations

# Only the standard library at module level: the task processes import this module for its
# handler (LONGJOBS_HANDLERS=nightly.sleep=bench.nightly:sleep).
import argparse
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_JOBS, REFERENCE_SECONDS = 200_000, 2.0
JOB_ID_WIDTH = 7  # "n000001": fixed, so the execution log's size counts its lines
LOG_VAR = "LONGJOBS_NIGHTLY_LOG"
RUNS_VAR = "LONGJOBS_NIGHTLY_RUNS"  # --faults: each run's start and end (bench/nightly_faults.py)


def _append(path: str, line: str) -> None:
    """One short O_APPEND write: atomic, whatever the concurrency."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def sleep(payload: dict[str, Any], ctx: Any) -> None:
    """The nightly job: D seconds of I/O wait; then one line in the execution log. Under
    ``--faults`` it also logs its run's start and end, and stops when told to (SIGTERM), as a
    well-behaved handler does: a run that stopped so is not an execution."""
    runs = os.environ.get(RUNS_VAR)
    if not runs:
        time.sleep(float(payload["seconds"]))
    else:
        _append(runs, f"S {ctx.job_id} {os.getpid()} {time.time():.3f}\n")
        end = time.monotonic() + float(payload["seconds"])
        while (left := end - time.monotonic()) > 0 and not ctx.cancelled():
            time.sleep(min(0.2, left))
        _append(runs, f"E {ctx.job_id} {os.getpid()} {time.time():.3f}\n")
        if left > 0:
            return
    path = os.environ.get(LOG_VAR)
    if path:
        _append(path, f"{ctx.job_id}\n")


def vm_hwm_kib(pid: int | str = "self", field: str = "VmHWM") -> int:
    """Peak resident set size (VmHWM) of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int | str = "self", children: bool = False) -> float:
    """CPU time (user + system) of a process, or of its reaped children, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    first = 13 if children else 11  # cutime, cstime (fields 16-17) or utime, stime (14-15)
    return (int(fields[first]) + int(fields[first + 1])) / os.sysconf("SC_CLK_TCK")


def vm_rss_kib(pid: int | str = "self") -> int:
    return vm_hwm_kib(pid, "VmRSS")


# -- moto in a process of its own ----------------------------------------------------------------
def serve_moto() -> int:
    """Child mode: moto's server (with the project's patches); prints its URL; runs until its
    standard input closes. Frees moto's dashboard registry now and then, as local mode does."""
    import logging

    from dispatcher.testing.moto import release_model_copies, start_moto

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    moto = start_moto()
    moto.pin_ecs_tasks()
    print(moto.url, flush=True)
    done = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        done.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    while not done.wait(5):
        release_model_copies()
    moto.stop()
    return 0


class Stack:
    """moto (child process), the SQS endpoint, the four proxies and the local environment."""

    def __init__(self, args: argparse.Namespace, settings: dict[str, str], workdir: Path) -> None:
        from dispatcher.local.environment import LocalEnv
        from dispatcher.testing.proxy import AwsProxy

        self.workdir = workdir
        self.moto = subprocess.Popen([sys.executable, str(Path(__file__).resolve()),
                                      "--serve-moto"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.moto.stdout is not None
        moto_url = self.moto.stdout.readline().strip()
        if not moto_url.startswith("http"):
            raise SystemExit("moto did not start")
        self.moto_url = moto_url
        self.ministack: Any = None
        sqs_url = moto_url
        if args.sqs == "ministack":
            from dispatcher.local.ministack import start_ministack

            self.ministack = start_ministack("sqs", log=workdir / "ministack.log")
            sqs_url = self.ministack.url
        self.proxies = {"producer": AwsProxy(sqs_url).start(),
                        "dispatcher": AwsProxy(moto_url).start(),
                        "dispatcher-sqs": AwsProxy(sqs_url).start(),
                        "runner": AwsProxy(moto_url).start()}
        self.tasks_log = open(workdir / "tasks.log", "wb")  # noqa: SIM115
        self.env = LocalEnv(
            endpoint=self.proxies["dispatcher"].url,
            sqs_endpoint=self.proxies["dispatcher-sqs"].url,
            stream_endpoint=moto_url,  # Lambda's reads of the stream: not the dispatcher's
            tick_seconds=3600,  # the benchmark ticks itself, once the jobs are enqueued
            settings=settings, output=self.tasks_log.fileno(),
            task_env={"AWS_ENDPOINT_URL": self.proxies["runner"].url,
                      "PYTHONPATH": os.pathsep.join(filter(None, [
                          str(ROOT), os.environ.get("PYTHONPATH", "")]))})
        self.env.start()
        for proxy in self.proxies.values():
            proxy.reset_counts()  # provisioning is not the batch's

    def producer(self) -> Any:
        """A JobClient whose SQS client goes to the producer's proxy."""
        import boto3

        from dispatcher.aws.sqs import SqsQueue
        from dispatcher.ops.client import JobClient

        sqs = boto3.client("sqs", endpoint_url=self.proxies["producer"].url,
                           region_name="us-east-1")
        return JobClient(queue=SqsQueue(sqs, self.env.env["LONGJOBS_QUEUE_URL"]))

    def calls(self) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {"producer": Counter(), "dispatcher": Counter(),
                                        "runner": Counter()}
        for name, proxy in self.proxies.items():
            out[name.removesuffix("-sqs")].update(proxy.counts())
        return out

    def ddb(self) -> Any:
        """A DynamoDB client straight to moto (not counted)."""
        import boto3

        return boto3.client("dynamodb", endpoint_url=self.moto_url, region_name="us-east-1")

    def stop(self) -> None:
        import socketserver

        # Tasks killed at shutdown drop their connections mid-request: not worth a traceback.
        socketserver.BaseServer.handle_error = lambda *_: None  # type: ignore[method-assign]
        self.env.stop()
        for proxy in self.proxies.values():
            proxy.stop()
        if self.ministack is not None:
            self.ministack.stop()
        assert self.moto.stdin is not None
        self.moto.stdin.close()
        self.moto.wait(timeout=60)
        self.tasks_log.close()


def enqueue(stack: Stack, n: int, seconds: float, producers: int = 4) -> None:
    """N jobs from ``producers`` threads, each with a client of its own (to the producer's
    proxy)."""
    send([stack.producer() for _ in range(producers)], n, seconds)


def send(clients: list[Any], n: int, seconds: float) -> None:
    from concurrent.futures import ThreadPoolExecutor

    jobs = [{"kind": "nightly.sleep", "job_id": f"n{i:0{JOB_ID_WIDTH - 1}d}",
             "payload": {"seconds": seconds}, "estimated_seconds": seconds} for i in range(n)]
    chunk = 10 * max(1, -(-n // (len(clients) * 100)))  # whole batches, ~10 per client
    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(lambda i: clients[i % len(clients)].submit_many(
            jobs[i * chunk:(i + 1) * chunk]), range(-(-n // chunk))))


def produce(args: argparse.Namespace) -> int:
    """Child mode: send ``--produce`` N jobs to ``--queue-url`` on ``--endpoint`` (so that the
    producer's memory is not the dispatcher's)."""
    import boto3

    from dispatcher.aws.sqs import SqsQueue
    from dispatcher.ops.client import JobClient

    def client() -> Any:
        sqs = boto3.client("sqs", endpoint_url=args.endpoint, region_name="us-east-1")
        return JobClient(args.queue_url, "unused", queue=SqsQueue(sqs, args.queue_url))

    send([client() for _ in range(4)], args.produce, args.seconds)
    return 0


def job_records(ddb: Any, table: str) -> dict[str, tuple[str, float]]:
    """job id -> (state, updated_at) for every job record, read through the status index."""
    from dispatcher.aws.dynamodb.model import STATUS_INDEX
    from dispatcher.store.codec import job_statuses

    out: dict[str, tuple[str, float]] = {}
    for state, key in ((s, k) for s in ("PENDING", "RUNNING", "SUCCEEDED", "FAILED",
                                        "CANCELLED", "REJECTED") for k in job_statuses(s)):
        pages = ddb.get_paginator("query").paginate(
            TableName=table, IndexName=STATUS_INDEX,
            KeyConditionExpression="status_key = :s",
            ExpressionAttributeValues={":s": {"S": key}},
            ProjectionExpression="pk, updated_at")
        for page in pages:
            for item in page["Items"]:
                job_id = item["pk"]["S"].removeprefix("JOB#")
                out[job_id] = (state, float(item.get("updated_at", {}).get("N", "0")))
    return out


def critical_path(stack: Stack, n: int, enqueued_at: float, enqueued_mono: float) -> list[str]:
    """Where the drain's time went, for the task that finished last: when it was launched, its
    modelled start latency, the runner's start-up to its first job, its jobs, and the wait from
    its last job's end to the last record written. Read from the table (outside the proxies)
    and the local launcher's own task records."""
    from dispatcher.wiring.adapters import open_store

    store = open_store(stack.env.env["LONGJOBS_TABLE"], "us-east-1", stack.moto_url)
    ids = [f"n{i:0{JOB_ID_WIDTH - 1}d}" for i in range(n)]
    jobs = [j for k in range(0, n, 100) for j in store.get_jobs(ids[k:k + 100])]
    spans: dict[str, list[tuple[float, float]]] = {}
    for job in jobs:
        for h in job.history[-1:]:
            if job.bundle_id and h.get("started_at") and h.get("ended_at"):
                spans.setdefault(job.bundle_id, []).append(
                    (float(h["started_at"]), float(h["ended_at"])))
    if not spans:
        return []
    last = max(spans, key=lambda b: max(e for _, e in spans[b]))
    bundle = store.get_bundle(last)
    task = stack.env.launcher.tasks.get(bundle.task_arn or "") if bundle else None
    if task is None or task.started_at is None:
        return []
    launched = task.created_at - enqueued_mono
    first = min(s for s, _ in spans[last]) - task.started_at
    work = max(e for _, e in spans[last]) - min(s for s, _ in spans[last])
    ends = sorted(e for _, e in (x for v in spans.values() for x in v))
    waves = sorted(spans[last])
    c = max(1, int(stack.env.cfg.task_concurrency))
    groups = [waves[k:k + c] for k in range(0, len(waves), c)]
    starts = ", ".join(f"{g[0][0] - task.started_at:.0f}-{g[-1][0] - task.started_at:.0f}"
                       for g in groups)
    return [f"critical path (the task that finished last, {len(spans[last])} jobs): launched "
            f"+{launched:.1f} s, modelled start {task.start_delay:.1f} s, runner start-up to "
            f"its first job {first:.1f} s, its jobs {work:.1f} s, last job ended "
            f"+{ends[-1] - enqueued_at:.1f} s",
            f"  its jobs started, {c} at a time (s after its process started): {starts}",
            f"job ends: median +{ends[len(ends) // 2] - enqueued_at:.1f} s, 99th percentile "
            f"+{ends[int(len(ends) * 0.99)] - enqueued_at:.1f} s, last "
            f"+{ends[-1] - enqueued_at:.1f} s"]


class Ticker:
    """Ticks the dispatcher every ``interval`` seconds (after the previous tick ends)."""

    def __init__(self, stack: Stack, interval: float) -> None:
        self.stack, self.interval = stack, interval
        self.admitted = 0
        self.admitted_all_at: float | None = None
        self.target = 0
        self.ticks = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-ticker")

    def start(self, target: int) -> Ticker:
        self.target = target
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                d = self.stack.env.tick()
                self.ticks += 1
                self.admitted += d.intake.admitted
                if self.admitted_all_at is None and self.admitted >= self.target:
                    self.admitted_all_at = time.time()
            except Exception as exc:  # a failed tick is retried, as in AWS
                self.errors.append(repr(exc))
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=300)


def nightly(args: argparse.Namespace) -> int:
    import tempfile

    n, d, c, tasks = args.jobs, args.seconds, args.concurrency, args.max_tasks
    # Fargate's 30-60 s start, scaled like the work: by this run's floor of work over the
    # reference batch's (200,000 x 2 s over 60 x 20 = 333 s).
    factor = (n * d / (tasks * c)) / (REFERENCE_JOBS * REFERENCE_SECONDS / (60 * 20))
    start_low, start_high = 30.0 * factor, 60.0 * factor
    settings = {
        "LONGJOBS_MAX_RUNNING_TASKS": str(tasks), "LONGJOBS_TASK_CONCURRENCY": str(c),
        "LONGJOBS_LOCAL_START_SECONDS": f"{start_low:g}-{start_high:g}",
        "LONGJOBS_HANDLERS": "nightly.sleep=bench.nightly:sleep",
        "LONGJOBS_LOG_LEVEL": "WARNING", "LONGJOBS_TICK_SECONDS": str(args.tick_budget),
        "LONGJOBS_HEARTBEAT_SECONDS": str(max(5.0, 10 * d)),
    }
    settings.update(dict(kv.split("=", 1) for kv in args.set))
    workdir = Path(tempfile.mkdtemp(prefix="nightly-"))
    log = workdir / "executions.log"
    settings[LOG_VAR] = str(log)
    runs_log = workdir / "runs.log"
    if args.faults:
        settings[RUNS_VAR] = str(runs_log)
    print(f"nightly: {n} jobs of {d:g} s, {tasks} tasks x {c} at once, start latency "
          f"{start_low:g}-{start_high:g} s, tick every {args.tick_interval:g} s, SQS on "
          f"{args.sqs} (work dir {workdir})", flush=True)
    t0 = time.time()
    stack = Stack(args, settings, workdir)
    ok = False
    injector: Any = None
    try:
        if args.faults:
            import nightly_faults  # beside this file (the script's directory is on sys.path)

            nightly_faults.throttle(stack.proxies)
            injector = nightly_faults.Injector(stack.env.launcher, factor).start()
        print(f"setup: {time.time() - t0:.1f} s", flush=True)
        rss_before = vm_hwm_kib()
        cpu_before = {"moto": cpu_seconds(stack.moto.pid), "this process": cpu_seconds(),
                      "MiniStack": cpu_seconds(stack.ministack.process.pid)
                      if stack.ministack is not None else 0.0}
        t = time.time()
        enqueue(stack, n, d)
        enqueued_at, enqueued_mono = time.time(), time.monotonic()
        print(f"enqueue: {n} jobs in {enqueued_at - t:.1f} s "
              f"({n / (enqueued_at - t):.0f} jobs/s)", flush=True)
        ticker = Ticker(stack, args.tick_interval).start(n)
        deadline = enqueued_at + args.timeout
        ddb, table = stack.ddb(), stack.env.env["LONGJOBS_TABLE"]
        records: dict[str, tuple[str, float]] = {}
        last_report = time.time()
        while time.time() < deadline:
            executed = log.stat().st_size // (JOB_ID_WIDTH + 1) if log.exists() else 0
            if time.time() - last_report > 15:
                last_report = time.time()
                print(f"  +{time.time() - enqueued_at:.0f} s: admitted {ticker.admitted}, "
                      f"tasks {len(stack.env.launcher.tasks)}, executed {executed}", flush=True)
            if executed >= n:
                records = job_records(ddb, table)
                terminal = sum(1 for s, _ in records.values()
                               if s in ("SUCCEEDED", "FAILED", "CANCELLED"))
                if terminal >= n:
                    break
                time.sleep(1.0)  # results are flushed every few seconds; look again
            else:
                time.sleep(0.25)
        ticker.stop()
        if injector is not None:
            injector.stop()
        rss_after = vm_hwm_kib()
        records = job_records(ddb, table)
        calls = stack.calls()
        tasks_made = list(stack.env.launcher.tasks.values())
        decisions = list(stack.env.decisions)
        path = critical_path(stack, n, enqueued_at, enqueued_mono)
        starter = stack.env.launcher.warm.pid if stack.env.launcher.warm else None
        cpu = {"moto": cpu_seconds(stack.moto.pid) - cpu_before["moto"],
               "this process": cpu_seconds() - cpu_before["this process"],
               "tasks": cpu_seconds(starter, children=True) if starter else float("nan")}
        if stack.ministack is not None:
            cpu["MiniStack"] = cpu_seconds(stack.ministack.process.pid) - cpu_before["MiniStack"]
        moto_rss = vm_hwm_kib(stack.moto.pid)
        ms_rss = vm_hwm_kib(stack.ministack.process.pid) if stack.ministack else 0
    finally:
        stack.stop()

    executions = Counter(log.read_text().split()) if log.exists() else Counter()
    states = Counter(s for s, _ in records.values())
    expected = {f"n{i:0{JOB_ID_WIDTH - 1}d}" for i in range(n)}
    succeeded = {j for j, (s, _) in records.items() if s == "SUCCEEDED"}
    done_at = max((u for s, u in records.values() if s == "SUCCEEDED"), default=float("nan"))
    drained = succeeded == expected
    drain = done_at - enqueued_at
    floor = n * d / (tasks * c) + (start_low + start_high) / 2
    print(f"jobs: {len(records)} recorded, states {dict(states)}; executions "
          f"{sum(executions.values())} of {len(executions)} jobs, "
          f"{sum(1 for v in executions.values() if v > 1)} run more than once, "
          f"{len(expected - set(executions))} never run")
    if injector is None:
        ok = drained and set(executions) == expected and all(
            v == 1 for v in executions.values())
        print(f"exactly once: {'yes' if ok else 'NO'} (every job SUCCEEDED once in the table "
              f"and ran once by the handlers' log)")
    else:  # a job whose task died after its run may run again: never at once, within budget
        verdict = nightly_faults.verdict(runs_log, stack.env.launcher,
                                         {j: s for j, (s, _) in records.items()},
                                         sorted(expected), stack.env.env)
        ok = drained and verdict.holds
        print(nightly_faults.describe(injector, stack.proxies))
        print(f"runs: {verdict.line()}")
    if not drained:
        print(f"not drained within {args.timeout:.0f} s")
    print(f"drain: {drain:.1f} s (end of enqueueing to the last job terminal)")
    mean_start = (start_low + start_high) / 2
    print(f"floor: {floor:.1f} s = {n} x {d:g} s / ({tasks} x {c}) + {mean_start:g} s mean "
          "start latency")
    if ticker.admitted_all_at is not None:
        admit = ticker.admitted_all_at - enqueued_at
        print(f"admitted: {n} jobs in {admit:.1f} s = {n / admit:.0f} jobs/s "
              f"({ticker.ticks} ticks)")
    else:
        print(f"admitted: {ticker.admitted} of {n} ({ticker.ticks} ticks)")
    created = [v for v in (getattr(x, "created_at", None) for x in tasks_made)
               if isinstance(v, float)]
    if tasks_made and len(created) == len(tasks_made):
        span, last = max(created) - min(created), max(created) - enqueued_mono
        rate = f"{len(tasks_made) / span:.1f} tasks/s" if span > 0 else "all at once"
        print(f"launched: {len(tasks_made)} tasks over {span:.1f} s ({rate}), the last "
              f"{last:.1f} s after enqueueing ended")
    else:
        print(f"launched: {len(tasks_made)} tasks")
    for line in path:
        print(line)
    busy = [x for x in decisions if x.intake.received or x.launch.bundles_launched]
    for x in busy[:args.show_ticks]:
        print(f"  tick {x.tick_id}: {x.elapsed_ms / 1000:.1f} s, received "
              f"{x.intake.received}, admitted {x.intake.admitted}, bundles "
              f"{x.new_bundles} new + {x.due_bundles} due, launched "
              f"{x.launch.bundles_launched} in {x.launch.runtask_calls} RunTask "
              f"(paced {x.launch.paced_seconds:.1f} s)")
    if ticker.errors:
        print(f"tick errors: {len(ticker.errors)}, first {ticker.errors[0]}")
    print(f"peak RSS (VmHWM) of this process (dispatcher + producer + proxies): "
          f"{rss_after / 1024:.0f} MiB (before enqueueing {rss_before / 1024:.0f} MiB); "
          f"moto {moto_rss / 1024:.0f} MiB, MiniStack {ms_rss / 1024:.0f} MiB")
    print(f"CPU seconds from enqueueing to the end (2 cores x {drain:.0f} s = {2 * drain:.0f} "
          "available): " + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items()))
    total = sum(sum(cnt.values()) for cnt in calls.values())
    parts = ", ".join(f"{k} {sum(v.values()) / n:.3f}" for k, v in calls.items())
    print(f"AWS calls per job: {total / n:.3f} end to end ({parts})")
    for k, v in calls.items():
        print(f"  {k}: " + ", ".join(f"{api} {cnt}" for api, cnt in sorted(v.items())))
    under = " under faults" if injector is not None else ""
    print(f"nightly{under}: drain/floor = {drain / floor:.2f}")
    return 0 if ok else 1


# -- the dispatcher's memory with a backlog -----------------------------------------------------
def backlog_child(args: argparse.Namespace) -> int:
    """Admit a backlog of ``--backlog-depth`` messages; print this process's peak RSS."""
    import tempfile

    depth, d = args.backlog_depth, REFERENCE_SECONDS
    settings = {"LONGJOBS_MAX_RUNNING_TASKS": str(args.max_tasks),
                "LONGJOBS_TASK_CONCURRENCY": str(args.concurrency),
                "LONGJOBS_LOCAL_START_SECONDS": "3600",  # launched, never started
                "LONGJOBS_HANDLERS": "nightly.sleep=bench.nightly:sleep",
                "LONGJOBS_TICK_SECONDS": str(args.tick_budget)}
    stack = Stack(args, settings, Path(tempfile.mkdtemp(prefix="backlog-")))
    try:
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--produce", str(depth),
                        "--seconds", str(d), "--endpoint", stack.proxies["producer"].url,
                        "--queue-url", stack.env.env["LONGJOBS_QUEUE_URL"]],
                       cwd=ROOT, check=True)
        before = vm_hwm_kib()
        t = time.time()
        admitted = ticks = 0
        while admitted < depth and time.time() - t < args.timeout:
            admitted += stack.env.tick().intake.admitted
            ticks += 1
        after, rss = vm_hwm_kib(), vm_rss_kib()
        took = time.time() - t
        print(f"backlog {depth}: admitted {admitted} in {took:.1f} s ({admitted / took:.0f} "
              f"jobs/s, {ticks} ticks); VmHWM {before / 1024:.0f} MiB before the ticks, "
              f"{after / 1024:.0f} MiB after (+{(after - before) / 1024:.0f} MiB; VmRSS now "
              f"{rss / 1024:.0f} MiB)", flush=True)
    finally:
        stack.stop()
    return 0


def backlog(args: argparse.Namespace) -> int:
    for depth in (5_000, 20_000):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--backlog-depth", str(depth),
               "--sqs", args.sqs, "--max-tasks", str(args.max_tasks), "--concurrency",
               str(args.concurrency), "--timeout", str(args.timeout)]
        done = subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True, text=True)
        lines = [x for x in done.stdout.splitlines() if x.startswith("backlog")]
        print(lines[-1] if lines else f"backlog {depth}: failed\n{done.stderr[-2000:]}",
              flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=200_000 / 6_000,
                        help="S times fewer jobs than the reference batch's 200,000 "
                             "(default: 6,000)")
    parser.add_argument("--time-scale", type=float, default=0.45,
                        help="the run's floor of work as a share of the reference batch's 333 s "
                             "(default 0.45: 150 s); sets the job length (6,000 jobs: 30 s) and "
                             "scales Fargate's 30-60 s start latency alike")
    parser.add_argument("--jobs", type=int, help="N jobs (overrides --scale)")
    parser.add_argument("--seconds", type=float, help="D seconds per job (overrides --scale)")
    parser.add_argument("--concurrency", type=int, default=20, help="jobs at once per task")
    parser.add_argument("--max-tasks", type=int, default=60, help="LONGJOBS_MAX_RUNNING_TASKS")
    parser.add_argument("--tick-interval", type=float, default=1.0,
                        help="seconds between the end of a tick and the next")
    parser.add_argument("--tick-budget", type=float, default=30.0,
                        help="LONGJOBS_TICK_SECONDS: how long one tick may drain")
    parser.add_argument("--sqs", choices=("ministack", "moto"), default=None,
                        help="SQS endpoint (default: ministack if installed, else moto)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="give up this long after enqueueing")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="another setting for the dispatcher and tasks (repeatable)")
    parser.add_argument("--show-ticks", type=int, default=5,
                        help="print this many of the ticks that admitted or launched")
    parser.add_argument("--faults", action="store_true",
                        help="under faults (bench/nightly_faults.py): 5 %% of the tasks "
                        "reclaimed (SIGTERM, then SIGKILL), 1 %% crashed, 1 %% of the DynamoDB "
                        "and ECS calls throttled; the runs are judged by their own log")
    parser.add_argument("--backlog-only", action="store_true",
                        help="measure the dispatcher's peak RSS admitting 5,000 and 20,000 "
                             "messages instead")
    parser.add_argument("--backlog-depth", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-moto", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--produce", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--queue-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_moto:
        return serve_moto()
    args.jobs = args.jobs or round(REFERENCE_JOBS / args.scale)
    args.seconds = args.seconds or round(
        args.time_scale * REFERENCE_JOBS * REFERENCE_SECONDS / args.jobs, 3)
    if args.sqs is None:
        from dispatcher.local.ministack import MiniStackUnavailable, find_ministack

        try:
            find_ministack()
            args.sqs = "ministack"
        except MiniStackUnavailable:
            args.sqs = "moto"
            print("(MiniStack not installed: `make ministack`; SQS stays on moto, which is "
                  "slow beyond a few thousand messages)", flush=True)
    for k, v in {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                 "POWERTOOLS_LOG_LEVEL": "WARNING", "POWERTOOLS_METRICS_DISABLED": "true"
                 }.items():
        os.environ.setdefault(k, v)
    if args.produce:
        return produce(args)
    if args.backlog_depth:
        return backlog_child(args)
    if args.backlog_only:
        return backlog(args)
    return nightly(args)


if __name__ == "__main__":
    sys.exit(main())
