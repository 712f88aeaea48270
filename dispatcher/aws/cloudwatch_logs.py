"""The job-log port on CloudWatch Logs: a job's lines in its tasks' awslogs streams.

Where a task's output is comes from its task definition, as ECS itself reads it: the worker
container's ``logConfiguration`` (``awslogs-group``, ``awslogs-stream-prefix``) names the group,
and the stream is ``<prefix>/<container>/<task id>``
(https://docs.aws.amazon.com/AmazonECS/latest/developerguide/using_awslogs.html). Each task
definition is described once per reader. A read is FilterLogEvents on that one stream with the
JSON filter ``{ $.job_id = "ID" }`` (the service matches, the group is never scanned), followed
page by page; each line is checked again here, so a store that ignores the pattern (moto does)
still returns only the job's lines.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from dispatcher.domain.errors import LongjobsError
from dispatcher.ports.job_logs import (
    JobLogs,
    LogLine,
    LogStream,
    job_filter,
    parse_line,
    stream_name,
)


def console_url(region: str, group: str, stream: str, pattern: str | None = None) -> str:
    """The CloudWatch console's page of one stream (the console escapes its fragment's path
    parts twice, with ``$`` for ``%``)."""
    def part(text: str) -> str:
        return quote(quote(text, safe=""), safe="").replace("%", "$")

    url = (f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
           f"#logsV2:log-groups/log-group/{part(group)}/log-events/{part(stream)}")
    if pattern:
        url += "$3FfilterPattern$3D" + part(pattern)
    return url


class CloudWatchJobLogs(JobLogs):
    def __init__(self, logs: Any, ecs: Any, *, container: str, task_family: str,
                 region: str | None, page_limit: int | None = None) -> None:
        self._logs = logs
        self._page_limit = page_limit  # events per FilterLogEvents page (None: the service's)
        self._ecs = ecs
        self._container = container
        self._family = task_family
        self._region = region
        self._configs: dict[str, tuple[str, str] | None] = {}
        self.calls = 0  # FilterLogEvents pages read

    def locate(self, task_arn: str, task_definition: str | None,
               job_id: str | None = None) -> LogStream | None:
        config = self._log_config(task_definition or self._family)
        if config is None:
            return None
        group, prefix = config
        name = stream_name(prefix, self._container, task_arn)
        url = console_url(self._region, group, name, job_filter(job_id) if job_id else None) \
            if self._region else None
        return LogStream(group, name, task_arn, url)

    def read(self, stream: LogStream, job_id: str, *, since: float | None = None) -> list[LogLine]:
        request: dict[str, Any] = {"logGroupName": stream.group,
                                   "logStreamNames": [stream.name],
                                   "filterPattern": job_filter(job_id)}
        if since is not None:
            request["startTime"] = int(since * 1000)
        if self._page_limit:
            request["limit"] = self._page_limit
        out: list[LogLine] = []
        while True:
            try:
                page = self._logs.filter_log_events(**request)
            except self._logs.exceptions.ResourceNotFoundException:
                return out  # no such group or stream (yet): the task wrote nothing so far
            self.calls += 1
            for event in page.get("events", []):
                line = parse_line(str(event.get("message", "")), str(event.get("eventId", "")),
                                  at=float(event["timestamp"]) / 1000 if "timestamp" in event
                                  else None)
                if line is not None and line.job_id == job_id:
                    out.append(line)
            token = page.get("nextToken")
            if not token or token == request.get("nextToken"):
                return out
            request["nextToken"] = token

    def _log_config(self, task_definition: str) -> tuple[str, str] | None:
        """(group, stream prefix) of the worker container, from its task definition."""
        if task_definition not in self._configs:
            try:
                td = self._ecs.describe_task_definition(taskDefinition=task_definition)
            except Exception as exc:  # botocore's ClientError, or no such revision
                raise LongjobsError(f"cannot read task definition {task_definition} to find "
                                    f"its log group: {type(exc).__name__}: {exc}") from None
            found: tuple[str, str] | None = None
            for c in td["taskDefinition"].get("containerDefinitions", []):
                config = c.get("logConfiguration") or {}
                options = config.get("options") or {}
                # Without a stream prefix awslogs names streams by container id, which no
                # record keeps: such a task's stream cannot be found from its ARN.
                if c.get("name") == self._container and config.get("logDriver") == "awslogs" \
                        and options.get("awslogs-group") and options.get("awslogs-stream-prefix"):
                    found = (options["awslogs-group"], options["awslogs-stream-prefix"])
            self._configs[task_definition] = found
        return self._configs[task_definition]
