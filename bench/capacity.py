"""DynamoDB capacity per job and the hottest partition key, from a recorded run.

Run: .venv/bin/python bench/capacity.py [N_JOBS] [--rate JOBS_PER_SECOND]
Runs N small jobs end to end as ``bench/api_calls.py`` does (moto's server behind the recording
proxy, nothing leaves this machine), the proxy keeping each DynamoDB write's items before and
after and each read's sizes; then replays them through DynamoDB's capacity rules
(:mod:`dispatcher.testing.capacity`) and prints WCU and RCU per job, and the WCU/s of the
hottest partition key of the table and of each index at the given admission rate, the last line
``capacity: hottest partition = X WCU/s at R jobs/s``. The same run is also counted as if the
status index were keyed as before sharding (one partition per state, projection ALL).
"""

from __future__ import annotations

import argparse

from dispatcher.aws.dynamodb.model import key_schema
from dispatcher.local.recorded_run import record_end_to_end
from dispatcher.ports.record import INDEX_ATTRIBUTES
from dispatcher.testing.capacity import IndexSpec, model, report, specs, unsharded
from dispatcher.testing.workload import small_jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("jobs", type=int, nargs="?", default=300)
    parser.add_argument("--rate", type=float, default=1000.0, help="admitted jobs per second")
    parser.add_argument("--tasks", type=int, default=2, help="LONGJOBS_MAX_RUNNING_TASKS")
    parser.add_argument("--payload-bytes", type=int, default=1000,
                        help="padding in each job's payload")
    args = parser.parse_args()
    jobs = small_jobs(args.jobs, seconds=0)
    for job in jobs:
        job["payload"]["pad"] = "x" * args.payload_bytes
    calls = record_end_to_end(jobs, wave=args.jobs, tasks=args.tasks, capture_items=True,
                              dispatcher_env={"LONGJOBS_TICK_SECONDS": "900"},
                              runner_env={"LONGJOBS_HEARTBEAT_SECONDS": "30"})
    indexes = specs(key_schema(), INDEX_ATTRIBUTES)
    before = model(calls, args.jobs, [IndexSpec("by_status", "status_key", "status_at", "ALL")],
                   partition=unsharded)
    now = model(calls, args.jobs, indexes)
    print(f"{args.jobs} small jobs ({args.payload_bytes} bytes of payload padding), "
          f"{args.tasks} tasks, {len(calls)} calls recorded")
    print(f"as before sharding (one partition per state, projection ALL): "
          f"{report(before, args.rate)[-1].removeprefix('capacity: ')}")
    print("\n".join(report(now, args.rate)))


if __name__ == "__main__":
    main()
