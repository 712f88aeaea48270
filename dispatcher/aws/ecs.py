"""The ECS adapter of the Launcher port: RunTask with a pinned revision and a deterministic
clientToken; DescribeTasks and StopTask normalized to the port's values.

RunTask is not paced here: the launch stage paces every launcher by Fargate's limits
(``dispatcher.domain.pacing.LaunchPacer``).

ECS ``ClientError``s become domain errors in one place (:func:`ecs_call`, :func:`_domain_error`),
for this adapter and the task-definitions one (:mod:`dispatcher.aws.ecs_revisions`): a definite
refusal is ``LaunchError`` or ``ResourceMissing``; throttling and 5xx are retried. A RunTask
throttled on every try becomes ``RateExceeded`` (ECS's ``ThrottlingException: Rate exceeded``);
anything else that persists is re-raised as it is. Either way the outcome is unknown and the
caller retries with the same token.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError, ConnectionError, ReadTimeoutError
from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from dispatcher.domain.costs import ARM64, X86_64, TaskBill
from dispatcher.domain.errors import LaunchError, LongjobsError, ResourceMissing
from dispatcher.domain.jobs import Resources
from dispatcher.domain.pacing import RateExceeded
from dispatcher.domain.stops import LastStatus
from dispatcher.ports.launcher import (
    MAX_TASKS_PER_CALL,
    Launcher,
    LaunchRequest,
    LaunchResult,
    TaskStatus,
    first_call_tasks,
)

_THROTTLING = {"ThrottlingException", "Throttling", "TooManyRequestsException",
               "RequestLimitExceeded"}
# Error codes that mean "this request was refused; nothing was started by it". RunTask's
# ConflictException is handled before (EcsLauncher.run): it names the tasks an earlier request
# with the same clientToken started.
_REFUSED = {"ClientException", "InvalidParameterException", "AccessDeniedException",
            "PlatformUnknownException", "PlatformTaskDefinitionIncompatibilityException",
            "UnsupportedFeatureException", "ConflictException", "BlockedException"}
_CLUSTER_MISSING = {"ClusterNotFoundException", "ClusterContainsNoInstances"}
# DescribeTasks takes at most 100 task ARNs per call.
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_DescribeTasks.html
DESCRIBE_BATCH = 100
# StopTask's reason is cut to 255 characters.
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_StopTask.html
MAX_REASON = 255


def task_overrides(resources: Resources) -> dict[str, Any]:
    """RunTask's task-level overrides for a job's size: ``cpu`` and ``memory`` as strings
    (CPU units, MiB) and ``ephemeralStorage.sizeInGiB``; none of them when not asked for,
    so the task definition's values hold.
    https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_TaskOverride.html
    https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_EphemeralStorage.html
    """
    out: dict[str, Any] = {}
    if resources.cpu is not None:
        out["cpu"] = str(resources.cpu)
    if resources.memory is not None:
        out["memory"] = str(resources.memory)
    if resources.ephemeral_storage is not None:
        out["ephemeralStorage"] = {"sizeInGiB": resources.ephemeral_storage}
    return out


@dataclass(frozen=True)
class CapacityShare:
    provider: str
    weight: int
    base: int = 0


@dataclass(frozen=True)
class EcsTarget:
    """Where and how tasks run: the few settings the adapter needs."""

    cluster: str
    task_family: str
    container: str = "worker"
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    assign_public_ip: str = "DISABLED"
    capacity_strategy: tuple[CapacityShare, ...] = ()  # empty: launchType FARGATE


class _TokenInUse(Exception):
    """RunTask's ConflictException, with the tasks the clientToken already started."""

    def __init__(self, task_arns: list[str]) -> None:
        super().__init__(f"clientToken already used; tasks {task_arns}")
        self.task_arns = task_arns


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, ReadTimeoutError)):
        return True
    if isinstance(exc, ClientError):
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return code in _THROTTLING or code == "ServerException" or status >= 500
    return False


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _domain_error(exc: ClientError, operation: str, target: EcsTarget,
                  task_definition: str | None = None) -> LongjobsError | None:
    """The domain error for a definite ECS refusal, or None (unknown outcome: re-raise)."""
    code = _code(exc)
    message = str(exc.response.get("Error", {}).get("Message", ""))
    if code in _CLUSTER_MISSING:
        return ResourceMissing(f"ECS cluster {target.cluster!r} not found ({code})")
    if operation == "DescribeTaskDefinition" and code in ("ClientException",
                                                          "InvalidParameterException"):
        if task_definition and task_definition != target.task_family:
            return ResourceMissing(f"task definition {task_definition!r} does not exist "
                                   f"({code})")
        return ResourceMissing(f"task family {target.task_family!r} has no ACTIVE revision "
                               f"({code})")
    if code in _REFUSED:
        return LaunchError(f"{operation} rejected: {code}: {message}")
    return None


def ecs_call(ecs: Any, target: EcsTarget, operation: str, method: str, *,
             retried: bool = False, max_tries: int = 6, **params: Any) -> Any:
    """One ECS call; transient errors retried if ``retried``; refusals as domain errors."""

    def once() -> Any:
        return getattr(ecs, method)(**params)

    call = retry(retry=retry_if_exception(_transient), stop=stop_after_attempt(max_tries),
                 wait=wait_random_exponential(multiplier=0.2, max=5), reraise=True)(once) \
        if retried else once
    try:
        return call()
    except ClientError as exc:
        # "The provided clientToken is already in use with a different RunTask request.
        # The resourceIds are the existing task ARNs which are already associated with
        # the clientToken." https://docs.aws.amazon.com/botocore/latest/reference/services/
        # ecs/client/exceptions/ConflictException.html
        started: Any = dict(exc.response).get("resourceIds")
        if operation == "RunTask" and _code(exc) == "ConflictException" and started:
            raise _TokenInUse([str(a) for a in started]) from exc
        if operation == "RunTask" and _code(exc) in _THROTTLING:
            # https://docs.aws.amazon.com/AmazonECS/latest/APIReference/request-throttling.html
            raise RateExceeded(f"{operation}: {_code(exc)}: "
                               f"{exc.response.get('Error', {}).get('Message', '')}") from exc
        error = _domain_error(exc, operation, target, params.get("taskDefinition"))
        if error is None:
            raise
        raise error from None


class EcsLauncher(Launcher):
    """``ecs`` is a boto3 ECS client; ``target`` says where and how tasks run."""

    def __init__(self, ecs: Any, target: EcsTarget, *, max_tries: int = 6) -> None:
        self._ecs = ecs
        self._target = target
        self._max_tries = max_tries

    @property
    def target(self) -> EcsTarget:
        return self._target

    def _call(self, operation: str, method: str, *, retried: bool = False,
              **params: Any) -> Any:
        return ecs_call(self._ecs, self._target, operation, method, retried=retried,
                        max_tries=self._max_tries, **params)

    def resolve_task_definition(self) -> str:
        # Retried like the other reads: the tick's first call, and every stop event's relaunch
        # (a mass Spot reclaim makes many at once), must not fail on one throttle.
        td = self._call("DescribeTaskDefinition", "describe_task_definition", retried=True,
                        taskDefinition=self._target.task_family)
        arn = str(td["taskDefinition"]["taskDefinitionArn"])
        return arn.rsplit("/", 1)[-1]

    def _params(self, request: LaunchRequest) -> dict[str, Any]:
        t = self._target
        params: dict[str, Any] = {
            "cluster": t.cluster,
            "taskDefinition": request.task_definition,
            "count": request.count,
            "clientToken": request.client_token,
            "startedBy": request.started_by[:128],
            "tags": [{"key": k, "value": v} for k, v in sorted(request.tags.items())],
            "enableECSManagedTags": True,
            "overrides": {"containerOverrides": [{
                "name": t.container,
                "environment": [{"name": k, "value": v} for k, v in sorted(request.env.items())],
            }], **task_overrides(request.resources)},
            "networkConfiguration": {"awsvpcConfiguration": {
                "subnets": list(t.subnets),
                "securityGroups": list(t.security_groups),
                "assignPublicIp": t.assign_public_ip,
            }},
        }
        if t.capacity_strategy and not request.on_demand:
            params["capacityProviderStrategy"] = [
                {"capacityProvider": p.provider, "weight": p.weight, "base": p.base}
                for p in t.capacity_strategy]
        else:
            params["launchType"] = "FARGATE"
        return params

    def run(self, request: LaunchRequest) -> LaunchResult:
        if request.count < 1:
            raise LaunchError(f"RunTask rejected: InvalidParameterException: count must be "
                              f"1..{MAX_TASKS_PER_CALL}, not {request.count}")
        # count > 10 is left to ECS to refuse (InvalidParameterException -> LaunchError), so
        # that the twin and the contract suite hold the adapter to ECS's own answer.
        # Retrying with the same clientToken is safe: ECS returns the first call's tasks.
        try:
            resp = self._call("RunTask", "run_task", retried=True, **self._params(request))
        except _TokenInUse as used:
            # The clientToken's first request (a crashed tick's, recovered after the network
            # or capacity settings changed) started these tasks: this launch's.
            return first_call_tasks(LaunchResult(used.task_arns, []), request.count)
        arns = [str(t["taskArn"]) for t in resp.get("tasks", [])]
        failures = [f"{f.get('reason', 'UNKNOWN')}"
                    + (f" ({f['detail']})" if f.get("detail") else "")
                    for f in resp.get("failures", [])]
        return LaunchResult(arns, failures)

    def _status(self, task: dict[str, Any]) -> TaskStatus:
        exit_code = next((c.get("exitCode") for c in task.get("containers", [])
                          if c.get("name") == self._target.container), None)
        return TaskStatus(str(task["taskArn"]), LastStatus.parse(task.get("lastStatus")),
                          task.get("stopCode"), task.get("stoppedReason"), exit_code,
                          _bill(task))

    def describe(self, task_arns: list[str]) -> list[TaskStatus]:
        found: dict[str, TaskStatus] = {}
        for start in range(0, len(task_arns), DESCRIBE_BATCH):
            chunk = task_arns[start:start + DESCRIBE_BATCH]
            resp = self._call("DescribeTasks", "describe_tasks", retried=True,
                              cluster=self._target.cluster, tasks=chunk)
            for t in resp.get("tasks", []):
                status = self._status(t)
                found[status.task_arn] = status
        # ECS answers an unknown ARN in failures[] (reason MISSING); we answer it in order.
        return [found.get(a) or TaskStatus(a, LastStatus.MISSING) for a in task_arns]

    def stop(self, task_arn: str, reason: str) -> None:
        self._call("StopTask", "stop_task", retried=True, cluster=self._target.cluster,
                   task=task_arn, reason=reason[:MAX_REASON])


def _bill(task: dict[str, Any]) -> TaskBill | None:
    """A stopped task's bill as DescribeTasks shows it (botocore gives its times as
    datetimes): billed from the image pull's start to its stop; None while it runs, without its
    size, or if it never began to pull (Fargate bills from the pull).
    https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Task.html"""
    started, stopped = task.get("pullStartedAt"), task.get("stoppedAt")
    if not isinstance(started, datetime) or not isinstance(stopped, datetime):
        return None
    try:
        cpu, memory = float(task.get("cpu") or ""), float(task.get("memory") or "")
    except ValueError:
        return None
    arch = next((str(a.get("value")) for a in task.get("attributes", [])
                 if a.get("name") == "ecs.cpu-architecture" and a.get("value")), X86_64)
    return TaskBill(cpu, memory, started.timestamp(), stopped.timestamp(),
                    task.get("capacityProviderName"),
                    ARM64 if arch.lower() in ("arm64", "aarch64") else X86_64)
