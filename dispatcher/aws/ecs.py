"""The ECS adapter: RunTask with a pinned revision, a deterministic clientToken and pacing."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError, ConnectionError, ReadTimeoutError
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from dispatcher.domain.errors import LaunchError, ResourceMissing
from dispatcher.ports.launcher import (
    MAX_TASKS_PER_CALL,
    Launcher,
    LaunchRequest,
    LaunchResult,
    Pacer,
    TaskStatus,
)
from dispatcher.settings import Config

_THROTTLING = {"ThrottlingException", "Throttling", "TooManyRequestsException",
               "RequestLimitExceeded"}
# DescribeTasks takes at most 100 task ARNs per call.
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeTasks.html
DESCRIBE_BATCH = 100


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, ReadTimeoutError)):
        return True
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return code in _THROTTLING or code == "ServerException" or status >= 500
    return False


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class EcsLauncher(Launcher):
    def __init__(self, ecs: Any, cfg: Config, *, max_tries: int = 6) -> None:
        self._ecs = ecs
        self._cfg = cfg
        self._pacer = Pacer(cfg.runtask_per_second)
        self._max_tries = max_tries

    def resolve_task_definition(self) -> str:
        try:
            td = self._ecs.describe_task_definition(taskDefinition=self._cfg.task_family)
        except ClientError as exc:
            raise ResourceMissing(f"task family {self._cfg.task_family!r} has no ACTIVE revision "
                                  f"({_code(exc)})") from None
        arn = str(td["taskDefinition"]["taskDefinitionArn"])
        return arn.rsplit("/", 1)[-1]

    def _params(self, request: LaunchRequest) -> dict[str, Any]:
        cfg = self._cfg
        params: dict[str, Any] = {
            "cluster": cfg.cluster,
            "taskDefinition": request.task_definition,
            "count": request.count,
            "clientToken": request.client_token,
            "startedBy": request.started_by[:128],
            "tags": [{"key": k, "value": v} for k, v in sorted(request.tags.items())],
            "enableECSManagedTags": True,
            "overrides": {"containerOverrides": [{
                "name": cfg.container,
                "environment": [{"name": k, "value": v} for k, v in sorted(request.env.items())],
            }]},
            "networkConfiguration": {"awsvpcConfiguration": {
                "subnets": list(cfg.subnets),
                "securityGroups": list(cfg.security_groups),
                "assignPublicIp": cfg.assign_public_ip,
            }},
        }
        if cfg.capacity_strategy:
            params["capacityProviderStrategy"] = [
                {"capacityProvider": p.provider, "weight": p.weight, "base": p.base}
                for p in cfg.capacity_strategy]
        else:
            params["launchType"] = "FARGATE"
        return params

    def run(self, request: LaunchRequest) -> LaunchResult:
        if not 1 <= request.count <= MAX_TASKS_PER_CALL:
            raise LaunchError(f"RunTask count must be 1..{MAX_TASKS_PER_CALL}, "
                              f"not {request.count}")
        params = self._params(request)

        @retry(retry=retry_if_exception(_transient), stop=stop_after_attempt(self._max_tries),
               wait=wait_random_exponential(multiplier=0.2, max=5), reraise=True)
        def call() -> Any:
            # Retrying with the same clientToken is safe: ECS returns the first call's tasks.
            self._pacer.wait()
            return self._ecs.run_task(**params)

        try:
            resp = call()
        except ClientError as exc:
            code = _code(exc)
            if code in ("ClusterNotFoundException", "ClusterContainsNoInstances"):
                raise ResourceMissing(f"ECS cluster {self._cfg.cluster!r} not found") from None
            if code in ("ClientException", "InvalidParameterException", "AccessDeniedException",
                        "PlatformUnknownException", "UnsupportedFeatureException"):
                raise LaunchError(f"RunTask rejected: {code}: "
                                  f"{exc.response.get('Error', {}).get('Message', '')}") from None
            raise
        arns = [str(t["taskArn"]) for t in resp.get("tasks", [])]
        failures = [f"{f.get('reason', 'UNKNOWN')}"
                    + (f" ({f['detail']})" if f.get("detail") else "")
                    for f in resp.get("failures", [])]
        return LaunchResult(arns, failures)

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        out: list[TaskStatus] = []
        for start in range(0, len(task_arns), DESCRIBE_BATCH):
            chunk = task_arns[start:start + DESCRIBE_BATCH]
            resp = self._ecs.describe_tasks(cluster=self._cfg.cluster, tasks=chunk)
            seen = set()
            for t in resp.get("tasks", []):
                seen.add(t["taskArn"])
                exit_code = next((c.get("exitCode") for c in t.get("containers", [])
                                  if c.get("name") == self._cfg.container), None)
                out.append(TaskStatus(t["taskArn"], t.get("lastStatus", "UNKNOWN"),
                                      t.get("stopCode"), t.get("stoppedReason"), exit_code))
            out.extend(TaskStatus(a, "MISSING") for a in chunk if a not in seen)
        return out

    def stop(self, task_arn: str, reason: str) -> None:
        self._ecs.stop_task(cluster=self._cfg.cluster, task=task_arn, reason=reason[:255])
