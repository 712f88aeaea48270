"""Ship new job code by registering a task-definition revision; nothing that runs is touched.

A deploy of longjobs is deliberately small: the dispatcher resolves the family's latest ACTIVE
revision once per tick and pins it on every launch, so registering a new revision is all it takes
for the next bundles to run new code. Running tasks keep the revision they were started with, and
the stack (queue, table, functions) is not updated at all.

The new revision is a copy of the current one that differs only in the worker container's image and
the environment overrides given, so CPU, memory, roles, logging and networking set by the
infrastructure template survive every code deploy.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from dispatcher.domain.errors import ConfigError, ResourceMissing

if TYPE_CHECKING:
    from mypy_boto3_ecs import ECSClient

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

# A family name, not an ARN or "family:revision": a deploy always starts from the latest ACTIVE
# revision, so pinning an older one here would silently roll other changes back.
_FAMILY = re.compile(r"^[A-Za-z0-9_-]{1,255}$")

# Error codes ECS answers with when the family has no ACTIVE revision (or never existed).
_MISSING_CODES = frozenset({"ClientException", "InvalidParameterException"})


def register_revision(
    ecs_client: ECSClient,
    family: str,
    image: str,
    env: Mapping[str, str] | None = None,
    container: str | None = None,
) -> str:
    """Register a copy of ``family``'s latest ACTIVE revision with a new image; return its ARN.

    ``container`` names the container whose image (and environment) is replaced; by default the
    first container of the definition, which is the only one in the longjobs template. ``env``
    entries replace variables of the same name and add the others, keeping the existing order, so
    a deploy never drops a variable the template set. Tags of the current revision are carried
    over so cost allocation and access policies keyed on tags keep applying.

    Raises :class:`ResourceMissing` when the family has no ACTIVE revision or the container does
    not exist, and :class:`ConfigError` for an empty image or a malformed family name.
    """
    if not _FAMILY.match(family):
        raise ConfigError(
            f"task family {family!r} must be a family name (letters, digits, '-' and '_'), "
            "not an ARN or family:revision"
        )
    if not image.strip():
        raise ConfigError("image must not be empty")

    try:
        described = ecs_client.describe_task_definition(taskDefinition=family, include=["TAGS"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _MISSING_CODES:
            raise ResourceMissing(
                f"task-definition family {family!r} has no ACTIVE revision to copy; deploy the "
                "infrastructure template first (it registers revision 1)"
            ) from exc
        raise

    current: Mapping[str, Any] = described["taskDefinition"]
    request: dict[str, Any] = {
        name: copy.deepcopy(current[name])
        for name in REGISTERABLE_FIELDS
        if current.get(name) is not None
    }
    target = _container(request["containerDefinitions"], container, family)
    target["image"] = image
    if env:
        target["environment"] = _merged_environment(target.get("environment", []), env)

    tags = described.get("tags")
    if tags:
        request["tags"] = copy.deepcopy(tags)

    registered = ecs_client.register_task_definition(**request)
    return registered["taskDefinition"]["taskDefinitionArn"]


def _container(
    definitions: list[dict[str, Any]], name: str | None, family: str
) -> dict[str, Any]:
    """The container to update: the named one, or the first when no name is given."""
    if not definitions:
        raise ResourceMissing(f"task-definition family {family!r} has no containers")
    if name is None:
        return definitions[0]
    for definition in definitions:
        if definition.get("name") == name:
            return definition
    names = ", ".join(repr(d.get("name")) for d in definitions)
    raise ResourceMissing(
        f"task-definition family {family!r} has no container named {name!r} (it has {names})"
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
