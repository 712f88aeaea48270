"""The in-memory twin of the job-log port: each task's output lines as CloudWatch would hold
them (one stream per task, named as the awslogs driver names it), filtered by job id."""

from __future__ import annotations

from collections.abc import Iterable

from dispatcher.ports.job_logs import JobLogs, LogLine, LogStream, parse_line, stream_name


class MemoryJobLogs(JobLogs):
    def __init__(self, group: str = "/longjobs/worker", prefix: str = "worker",
                 container: str = "worker") -> None:
        self.group = group
        self.prefix = prefix
        self.container = container
        self.streams: dict[str, list[str]] = {}  # stream name -> raw lines, in order
        self.reads = 0  # read() calls: a job's log costs one per task that ran it

    def put(self, task_arn: str, lines: Iterable[str]) -> None:
        """Append a task's output lines (what its runner wrote to stdout and stderr)."""
        name = stream_name(self.prefix, self.container, task_arn)
        self.streams.setdefault(name, []).extend(line for line in lines if line.strip())

    def locate(self, task_arn: str, task_definition: str | None,
               job_id: str | None = None) -> LogStream | None:
        return LogStream(self.group, stream_name(self.prefix, self.container, task_arn),
                         task_arn)

    def read(self, stream: LogStream, job_id: str, *, since: float | None = None) -> list[LogLine]:
        self.reads += 1
        out = []
        quoted = f'"{job_id}"'  # the server-side filter's part: parse only candidate lines
        for n, text in enumerate(self.streams.get(stream.name, [])):
            line = parse_line(text, f"{stream.name}:{n}") if quoted in text else None
            if line is not None and line.job_id == job_id and (since is None
                                                                or line.at >= since):
                out.append(line)
        return out
