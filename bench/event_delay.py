"""Local mode's job-event delay: to the event's delivery to the local consumer, through
moto's DynamoDB stream and the publisher's own stage (``dispatcher.local.event_feed``), from
the write's commit (the stream record's ApproximateCreationDateTime) and from the time the
writer stamped on it (``updated_at``, before its request reached a busy moto). Local figures:
the stream is moto's, polled every 0.1 s; on AWS the delay is the stream's and Lambda's
(docs/operating.md).

    PYTHONPATH=. python bench/event_delay.py --jobs 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ["PYTHONPATH"] = str(ROOT)
    sys.path.insert(0, str(ROOT))
    from dispatcher.domain.job_events import JobStateChange
    from dispatcher.domain.jobs import TERMINAL_JOB_STATES
    from dispatcher.local.environment import LocalEnv
    from dispatcher.local.event_feed import PrintingSink
    from dispatcher.ops.client import JobClient

    sink = PrintingSink()
    env = LocalEnv(tick_seconds=0.5, job_events=sink,
                   settings={"LONGJOBS_HANDLERS": "echo=tests.handlers:echo"})
    env.start()
    feed = env._feed
    assert feed is not None
    try:
        ids = JobClient().submit_many([{"kind": "echo", "payload": {"n": i},
                                        "job_id": f"d{i}", "estimated_seconds": 0.1}
                                       for i in range(args.jobs)])
        deadline = time.time() + 600
        while time.time() < deadline:
            done = {e.job_id for e in sink.events if isinstance(e, JobStateChange)
                    and e.state in map(str, TERMINAL_JOB_STATES)}
            if done >= set(ids):
                break
            time.sleep(0.5)
    finally:
        env.stop()
    lags = sorted(feed.lags)
    print(f"{len(lags)} stream records: commit to delivery p50 {statistics.median(lags):.2f} s, "
          f"p95 {lags[int(len(lags) * 0.95) - 1]:.2f} s, max {lags[-1]:.2f} s")
    told = [(e, t) for e, t in sink.delivered if isinstance(e, JobStateChange)]  # no bills
    delays = sorted(t - e.at for e, t in told)
    print(f"{len(delays)} events of {args.jobs} jobs: updated_at to delivery p50 "
          f"{statistics.median(delays):.2f} s, p95 {delays[int(len(delays) * 0.95) - 1]:.2f} s, "
          f"max {delays[-1]:.2f} s")
    for state in sorted({e.state for e, _ in told}):
        mine = sorted(t - e.at for e, t in told if e.state == state)
        print(f"  {state}: {len(mine)} events, p50 {statistics.median(mine):.2f} s, "
              f"max {mine[-1]:.2f} s")


if __name__ == "__main__":
    main()
