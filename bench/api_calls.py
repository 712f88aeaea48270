"""AWS API calls per job for 500 small bundled jobs (producer + dispatcher), by API.

Run: .venv/bin/python bench/api_calls.py [N_JOBS]
Starts moto's server behind the counting proxy; nothing leaves this machine.
"""

from __future__ import annotations

import logging
import os
import sys

from dispatcher import settings, wiring
from dispatcher.local.provision import provision
from dispatcher.testing.moto import start_moto
from dispatcher.testing.proxy import AwsProxy
from dispatcher.testing.workload import api_calls_for_small_jobs


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
                 "POWERTOOLS_LOG_LEVEL": "WARNING"}.items():
        os.environ.setdefault(k, v)
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    with start_moto() as moto, AwsProxy(moto.url) as proxy:
        moto.pin_ecs_tasks()
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        os.environ.update(provision(proxy.url))
        env = {**os.environ, "LONGJOBS_BUNDLE_MAX_JOBS": "50", "LONGJOBS_MAX_RUNNING_TASKS": "100"}
        d = wiring.dispatcher(settings.load("dispatcher", env))
        counts = api_calls_for_small_jobs(proxy, d, n, wave=100)
    print(f"{'API':34} {'calls':>7} {'per job':>8}")
    for api, calls in counts.items():
        print(f"{api:34} {calls:>7} {calls / n:>8.3f}")
    print(f"calls per job: {sum(counts.values()) / n:.2f}")


if __name__ == "__main__":
    main()
