"""A local task's process, started while its task is still "provisioning".

On Fargate each task gets CPUs of its own, and its start latency (30-60 s: placement, image
pull) passes while nothing of it runs. Locally 60 tasks share this machine's cores, and each
Python process spends a second or more of CPU importing the runner; started at the end of their
latencies, those imports would queue behind each other and stretch every task's start far past
the modelled one. So the local launcher starts this wrapper at once: it imports the runner
while the task provisions, waits for the task's modelled start time, then runs the runner
unchanged (``python -m dispatcher.local.task_process START_EPOCH``).
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    start_at = float(argv[1])
    from job_runner import worker  # the imports, paid during the modelled provisioning

    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    return worker.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
