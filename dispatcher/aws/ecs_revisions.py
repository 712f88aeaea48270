"""The ECS adapter of the task-definitions port: copy a revision with another image and env.

The copy is the described revision's registerable fields, unchanged but for the worker
container's image and environment, so CPU, memory, roles, logging and networking set by the
infrastructure template are kept; its tags are carried over so cost allocation and access
policies keyed on tags keep applying. ECS errors become domain errors where the launcher's do
(:func:`dispatcher.aws.ecs.ecs_call`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dispatcher.aws.ecs import EcsTarget, ecs_call
from dispatcher.domain.deployment import revision_name
from dispatcher.domain.errors import ConfigError, ResourceMissing
from dispatcher.ports.task_definitions import TaskDefinitions

# Fields of a described task definition that RegisterTaskDefinition accepts back. Everything else
# DescribeTaskDefinition returns (revision, status, arn, registeredAt, compatibilities,
# requiresAttributes, ...) is assigned by ECS and is rejected or meaningless on registration.
# The last two are newer API members; botocore only returns them when it also accepts them.
REGISTERABLE_FIELDS: tuple[str, ...] = (
    "containerDefinitions",
    "family",
    "taskRoleArn",
    "executionRoleArn",
    "networkMode",
    "volumes",
    "placementConstraints",
    "requiresCompatibilities",
    "cpu",
    "memory",
    "runtimePlatform",
    "ephemeralStorage",
    "pidMode",
    "ipcMode",
    "proxyConfiguration",
    "inferenceAccelerators",
    "enableFaultInjection",
    "trustedExecutionConfiguration",
)


class EcsTaskDefinitions(TaskDefinitions):
    """``ecs`` is a boto3 ECS client; ``target.container`` names the worker container (None
    would mean the first one, the only one in the longjobs template)."""

    def __init__(self, ecs: Any, target: EcsTarget, *, max_tries: int = 6) -> None:
        self._ecs = ecs
        self._target = target
        self._max_tries = max_tries

    def _describe(self, revision: str) -> dict[str, Any]:
        described: dict[str, Any] = ecs_call(
            self._ecs, self._target, "DescribeTaskDefinition", "describe_task_definition",
            retried=True, max_tries=self._max_tries, taskDefinition=revision, include=["TAGS"])
        return described

    def register_copy(self, source: str, image: str, env: Mapping[str, str]) -> str:
        if not image.strip():
            raise ConfigError("image must not be empty")
        described = self._describe(source)
        request = copy_request(described, image, env, self._target.container)
        # Not retried: a registration whose answer was lost may have registered a revision,
        # and a retry would register a second one. The caller's next try copies again.
        registered = ecs_call(self._ecs, self._target, "RegisterTaskDefinition",
                              "register_task_definition", **request)
        return revision_name(str(registered["taskDefinition"]["taskDefinitionArn"]))

    def image_of(self, revision: str) -> str:
        td = self._describe(revision)["taskDefinition"]
        return str(_container(td.get("containerDefinitions", []), self._target.container,
                              revision)["image"])


def copy_request(described: Mapping[str, Any], image: str, env: Mapping[str, str],
                 container: str | None = None) -> dict[str, Any]:
    """RegisterTaskDefinition's request for a copy of a described revision (with its tags)
    whose ``container`` (default: the first) has ``image``; ``env`` entries replace variables
    of the same name and add the others, keeping the existing order, so a copy never drops a
    variable the template set."""
    current: Mapping[str, Any] = described["taskDefinition"]
    request: dict[str, Any] = {
        name: copy.deepcopy(current[name])
        for name in REGISTERABLE_FIELDS
        if current.get(name) is not None
    }
    target = _container(request["containerDefinitions"], container,
                        str(current.get("family", "")))
    target["image"] = image
    if env:
        target["environment"] = _merged_environment(target.get("environment", []), env)
    tags = described.get("tags")
    if tags:
        request["tags"] = copy.deepcopy(tags)
    return request


def _container(
    definitions: list[dict[str, Any]], name: str | None, family: str
) -> dict[str, Any]:
    """The container to update: the named one, or the first when no name is given."""
    if not definitions:
        raise ResourceMissing(f"task definition {family!r} has no containers")
    if name is None:
        return definitions[0]
    for definition in definitions:
        if definition.get("name") == name:
            return definition
    names = ", ".join(repr(d.get("name")) for d in definitions)
    raise ResourceMissing(
        f"task definition {family!r} has no container named {name!r} (it has {names})"
    )


def _merged_environment(
    current: list[dict[str, str]], overrides: Mapping[str, str]
) -> list[dict[str, str]]:
    """Existing variables in their order with overridden values, then the new ones."""
    merged = [
        {"name": item["name"], "value": overrides.get(item["name"], item.get("value", ""))}
        for item in current
    ]
    known = {item["name"] for item in current}
    merged.extend({"name": k, "value": v} for k, v in overrides.items() if k not in known)
    return merged
