"""The job-log port on local mode's task output: one file that every local task appends its
output to (``longjobs local`` keeps it and exports its path as ``LONGJOBS_LOCAL_LOG``).

A task's "stream" is its lines in that file: the runner's JSON lines carry their task's ARN, so
a job's lines are those with its ``job_id`` and the task's ``task_arn``, in file order. A line
is parsed only if it holds the job id, as CloudWatch's filter would match it.
"""

from __future__ import annotations

from pathlib import Path

from dispatcher.domain.errors import LongjobsError
from dispatcher.ports.job_logs import JobLogs, LogLine, LogStream, parse_line, task_id


class TaskOutputLogs(JobLogs):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def locate(self, task_arn: str, task_definition: str | None,
               job_id: str | None = None) -> LogStream | None:
        return LogStream(str(self.path), task_id(task_arn), task_arn)

    def read(self, stream: LogStream, job_id: str, *, since: float | None = None) -> list[LogLine]:
        quoted = f'"{job_id}"'.encode()
        out: list[LogLine] = []
        offset = 0
        try:
            with self.path.open("rb") as f:
                for raw in f:
                    at, offset = offset, offset + len(raw)
                    if quoted not in raw or not raw.endswith(b"\n"):
                        continue  # not this job's, or a line still being written
                    line = parse_line(raw.decode(errors="replace"), f"{at}")
                    if line is not None and line.job_id == job_id \
                            and line.task_arn == stream.task_arn \
                            and (since is None or line.at >= since):
                        out.append(line)
        except FileNotFoundError:
            raise LongjobsError(f"local task output {self.path} does not exist (is "
                                "`longjobs local` running, and LONGJOBS_LOCAL_LOG its "
                                "export?)") from None
        return out
