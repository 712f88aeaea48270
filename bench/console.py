"""The web console's jobs page and a job's page, timed at 1,000,000 jobs recorded.

Run: .venv/bin/python bench/console.py [N_JOBS] [--requests R]
N jobs (default 1,000,000) of 20 kinds, created over the last 7 days, in the states a busy
table holds (mostly SUCCEEDED; FAILED ones with a traceback; some PENDING, RUNNING,
CANCELLED), are put into the table twin, whose status index is then held sorted, as
DynamoDB's is (the twin's own query scans its items: fine for tests, not for a million). The
console app is driven in-process (Starlette's test client: routing, the guard, the operator
API, the templates, no socket) with R requests of each kind: the jobs page (every state,
newest first; one state; one state and kind; a page reached by its cursor) and a job's page
(a random job, its attempts and its logs). Each request's table calls and the items they
return are counted: what a page reads is what it shows, never a scan. The overview's job
items read are counted too (none). On AWS each table call is a round trip of a few ms; the
calls per page are printed beside the times so the two can be added. The last line is the
headline.
"""

from __future__ import annotations

import argparse
import bisect
import random
import resource
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starlette.testclient import TestClient

from dispatcher.console.guard import Guard
from dispatcher.console.routes import console_app
from dispatcher.console.source import ConsoleSource
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ops.client import JobClient
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top
from dispatcher.ports.table import Condition, Record
from dispatcher.store import Store
from dispatcher.store import codec as r
from dispatcher.testing.memory_logs import MemoryJobLogs
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable, _index_order, _projected, evaluate
from tests.twins import ENV

NOW = 1_800_000_000.0
WEEK = 7 * 86400
KINDS = [f"kind-{k:02d}" for k in range(20)]
# The states of a busy table, as shares of its jobs.
MIX = [(JobState.SUCCEEDED, 0.90), (JobState.FAILED, 0.04), (JobState.PENDING, 0.03),
       (JobState.RUNNING, 0.01), (JobState.CANCELLED, 0.02)]


class SortedIndex(MemoryTable):
    """The table twin with its status index held sorted per partition, as DynamoDB's is,
    built once after loading (the bench only reads): a query finds its start by bisection
    and reads on from there, as DynamoDB's does, rather than scan the twin's items."""

    def build(self) -> None:
        parts: dict[str, list[Record]] = defaultdict(list)
        for rec in self._items.values():
            if rec.status_key is not None and rec.status_at is not None:
                parts[rec.status_key].append(rec)
        self._parts = {k: sorted(v, key=_index_order) for k, v in parts.items()}
        self._orders = {k: [_index_order(x) for x in v] for k, v in self._parts.items()}

    def query(self, status_key: str, *, at_most: str | None = None,
              at_least: str | None = None, limit: int | None = None,
              newest_first: bool = False, where: Condition | None = None,
              after: Record | None = None) -> list[Record]:
        rows, orders = self._parts.get(status_key, []), self._orders.get(status_key, [])
        lo = 0 if at_least is None else bisect.bisect_left(orders, (at_least, ""))
        hi = len(rows) if at_most is None else bisect.bisect_right(orders, (at_most, "\uffff"))
        if after is not None:
            mark = _index_order(after)
            if newest_first:
                hi = min(hi, bisect.bisect_left(orders, mark))
            else:
                lo = max(lo, bisect.bisect_right(orders, mark))
        out: list[Record] = []
        for i in (range(hi - 1, lo - 1, -1) if newest_first else range(lo, hi)):
            if limit is not None and len(out) >= limit:
                break
            p = _projected(rows[i])
            if evaluate(where, p):
                out.append(p)
        return out


class Counted:
    """The table's calls and the items they return, per request."""

    def __init__(self, table: MemoryTable) -> None:
        self.calls: Counter[str] = Counter()
        self.items = 0
        self.job_items = 0
        for name in ("get", "get_many", "query", "count"):
            self._wrap(table, name)

    def _wrap(self, table: MemoryTable, name: str) -> None:
        inner = getattr(table, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            self.calls[name] += 1
            found = out if isinstance(out, list) else [out] if isinstance(out, Record) else []
            self.items += len(found)
            self.job_items += sum(1 for x in found if x.pk.startswith("JOB#"))
            return out
        setattr(table, name, counted)

    def reset(self) -> None:
        self.calls.clear()
        self.items = self.job_items = 0


def load(table: SortedIndex, n: int, rng: random.Random) -> list[str]:
    states = [s for s, _ in MIX]
    weights = [w for _, w in MIX]
    ids = []
    for i in range(n):
        state = rng.choices(states, weights)[0]
        created = NOW - WEEK + WEEK * i / n
        job_id = f"job-{i:07d}"
        history = [] if state == JobState.PENDING else [{
            "attempt": 1, "task_arn": f"arn:aws:ecs:us-east-1:1:task/c/{i:032x}",
            "task_definition": "longjobs-worker:7", "started_at": created + 30,
            **({} if state == JobState.RUNNING else {"ended_at": created + 95,
                                                     "outcome": str(state)})}]
        error = {"type": "RuntimeError", "message": "upstream said 503",
                 "traceback": "Traceback (most recent call last):\n  File \"jobs.py\", line 9"
                              "\nRuntimeError: upstream said 503\n"} \
            if state == JobState.FAILED else None
        job = Job(job_id, KINDS[i % len(KINDS)], {"n": i, "key": f"input/{i}.csv"}, state=state,
                  created_at=created, attempts=0 if state == JobState.PENDING else 1,
                  history=history, error=error, bundle_id=f"b{i // 25:06d}",
                  result={"rows": i % 997} if state == JobState.SUCCEEDED else None)
        rec = r.job_record(job)
        table._items[rec.pk] = rec
        ids.append(job_id)
    table.build()
    return ids


def timed(web: TestClient, counted: Counted, url: str) -> tuple[float, str, int, int]:
    counted.reset()
    start = time.perf_counter()
    page = web.get(url)
    took = (time.perf_counter() - start) * 1000
    if page.status_code != 200:
        raise SystemExit(f"{url}: {page.status_code} {page.text[:300]}")
    return took, page.text, sum(counted.calls.values()), counted.items


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else values[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jobs", nargs="?", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=200)
    args = ap.parse_args()
    rng = random.Random(20261205)
    started = time.monotonic()
    table = SortedIndex(clock=lambda: NOW)
    ids = load(table, args.jobs, rng)
    print(f"loaded {args.jobs:,} jobs in {time.monotonic() - started:.0f} s", flush=True)
    counted = Counted(table)
    store = Store(table, clock=lambda: NOW)
    queue = MemoryQueue(clock=lambda: NOW)
    client = JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"], table_name=ENV["LONGJOBS_TABLE"],
                       region="us-east-1", queue=queue, store=store)
    source = ConsoleSource(client, Queries(store, queue=queue, clock=lambda: NOW,
                                           logs=MemoryJobLogs()),
                           Top(store, queue=queue, clock=lambda: NOW), has_dead_letters=False)
    web = TestClient(console_app(source, Guard.serving("127.0.0.1", 8765), clock=lambda: NOW),
                     base_url="http://127.0.0.1:8765")

    lists = ["/jobs", "/jobs?state=FAILED", "/jobs?state=SUCCEEDED&kind=kind-07",
             "/jobs?state=PENDING&since=1d"]
    # Pages reached by their cursor: the fifth page of every state.
    url = "/jobs"
    for _ in range(4):
        _, text, _, _ = timed(web, counted, url)
        url = text.split('" rel="next"')[0].rsplit('href="', 1)[1].replace("&amp;", "&")
    lists.append(url)
    jobs_ms: list[float] = []
    job_ms: list[float] = []
    by_list: dict[str, list[float]] = defaultdict(list)
    reads: dict[str, tuple[int, int]] = {}
    for n in range(args.requests):
        which = lists[n % len(lists)]
        name = "/jobs (5th page, by cursor)" if "after=" in which else which
        took, _, calls, items = timed(web, counted, which)
        jobs_ms.append(took)
        by_list[name].append(took)
        reads[name] = (calls, items)
        took, _, calls, items = timed(web, counted, "/jobs/" + rng.choice(ids))
        job_ms.append(took)
        by_list["/jobs/ID"].append(took)
        reads["/jobs/ID"] = (calls, items)
    _, _, calls, _ = timed(web, counted, "/")
    overview_job_items = counted.job_items
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"jobs page: median {statistics.median(jobs_ms):.1f} ms, p95 {p95(jobs_ms):.1f} ms "
          f"over {len(jobs_ms)} requests ({len(lists)} kinds of list)")
    print(f"job page: median {statistics.median(job_ms):.1f} ms, p95 {p95(job_ms):.1f} ms "
          f"over {len(job_ms)} requests")
    for page, (c, items) in sorted(reads.items()):
        print(f"  {page}: median {statistics.median(by_list[page]):.1f} ms; {c} table calls, "
              f"{items} items read")
    print(f"overview: {calls} table calls, {overview_job_items} job items read")
    print(f"peak RSS {rss:,.0f} MiB (the table twin holds every job)")
    print(f"console: p95 jobs page = {p95(jobs_ms):.0f} ms, job page = {p95(job_ms):.0f} ms "
          f"at {args.jobs:,} jobs")


if __name__ == "__main__":
    main()
