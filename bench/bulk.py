"""A bulk cancel by filter on moto: ``longjobs jobs cancel --status PENDING --yes``'s work
(``dispatcher.ops.bulk.BulkAction``) on N PENDING jobs, with its peak RSS and its DynamoDB calls
per job.

Run: .venv/bin/python bench/bulk.py [N_JOBS] [--per-bundle B]
moto's server runs in a process of its own (``dispatcher.testing.moto.start_moto``, as the
integration tests start it), so the RSS measured is this process's: the bulk action and its
DynamoDB client, behind the counting proxy (``dispatcher.testing.proxy``). The jobs are recorded
as a tick records them (bundles of B, ticks of 1,000 sharing a creation time); the peak is reset
after recording (Linux's ``/proc/self/clear_refs``), so it is the cancel's own. Nothing leaves
this machine. The last line is the headline. ``tests/twins/test_bulk_actions.py`` asserts the
walk's properties (one page of index rows held, calls per job) on the twins at 2,000 jobs.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from dispatcher.domain.bundles import Bundle
from dispatcher.domain.jobs import Job, JobState
from dispatcher.local.provision import provision
from dispatcher.ops.bulk import BulkAction, BulkFilter, BulkVerb
from dispatcher.store import Store
from dispatcher.testing.proxy import AwsProxy
from dispatcher.wiring.adapters import open_store

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
       "AWS_SESSION_TOKEN": "testing", "AWS_DEFAULT_REGION": "us-east-1",
       "AWS_REGION": "us-east-1", "POWERTOOLS_LOG_LEVEL": "WARNING"}
SERVE = ("import sys\nfrom dispatcher.testing.moto import start_moto\n"
         "moto = start_moto()\nprint(moto.url, flush=True)\nsys.stdin.read()\nmoto.stop()\n")
TICK = 1000  # jobs sharing one creation time, as one tick's batch


def record(store: Store, n: int, per_bundle: int, at: float) -> list[str]:
    ids = [f"j{i:06}" for i in range(n)]
    for start in range(0, n, per_bundle):
        chunk = ids[start:start + per_bundle]
        bid = f"b-{start}"
        store.record([Bundle(bid, chunk, created_at=at)],
                     [Job(job_id=j, kind="k", payload={"n": j}, estimated_seconds=1.0,
                          bundle_id=bid, created_at=at + (start + i) // TICK)
                      for i, j in enumerate(chunk)])
    return ids


def rss_peak_kb() -> int:
    """This process's peak RSS since the last reset (VmHWM), in KB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KB; no reset


def reset_rss_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", type=int, nargs="?", default=10_000)
    parser.add_argument("--per-bundle", type=int, default=10, help="jobs per bundle")
    args = parser.parse_args()
    os.environ.update(ENV)
    server = subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        with AwsProxy(url) as proxy:
            env = provision(proxy.url)
            store = open_store(env["LONGJOBS_TABLE"], host=proxy.url)
            t0 = time.time()
            ids = record(store, args.jobs, args.per_bundle, t0 - 3600)
            recorded_s = time.time() - t0
            proxy.reset_counts()
            reset = reset_rss_peak()
            before_kb = rss_peak_kb()
            t1, cpu1 = time.time(), time.process_time()
            report = BulkAction(store).run(BulkFilter(BulkVerb.CANCEL, "PENDING"),
                                           bulk_id="bulk-bench", reason="benchmark")
            run_s, cpu_s = time.time() - t1, time.process_time() - cpu1
            peak_kb = rss_peak_kb()
            calls = Counter(proxy.counts())
            states = Counter(str(j.state) for j in store.get_jobs(ids))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        server.wait(timeout=60)

    n = args.jobs
    print(f"{n} PENDING jobs in bundles of {args.per_bundle}, recorded in {recorded_s:.0f} s")
    print(f"report: matched {report.matched}, acted {report.acted}, skipped {report.skipped}, "
          f"errors {report.errors}; states after: {dict(states)}")
    for api, count in sorted(calls.items()):
        print(f"  {api:40} {count:8} ({count / n:.3f} per job)")
    print(f"the cancel: {run_s:.0f} s wall, {cpu_s:.0f} s CPU in this process; RSS "
          f"{before_kb / 1024:.0f} MB before, peak {peak_kb / 1024:.0f} MB"
          + ("" if reset else " (peak since the process started: no /proc/self/clear_refs)"))
    ok = report.acted == n and states == {str(JobState.CANCELLED): n}
    print(f"bulk cancel of {n} jobs by filter on moto: {sum(calls.values()) / n:.2f} calls per "
          f"job, peak RSS {peak_kb / 1024:.0f} MB ({(peak_kb - before_kb) / 1024:+.0f} MB "
          f"during the cancel), {'every job cancelled once' if ok else 'NOT every job cancelled'}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
