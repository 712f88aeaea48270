"""The task-definitions port: copy a revision of the worker's family with other job code.

A deploy, and the tick after a stack update, register a copy of the stack's revision that
differs only in the worker container's image and environment (CPU, memory, roles, logging and
networking stay the stack's). Implementations:

- ``dispatcher.aws.ecs_revisions.EcsTaskDefinitions``: DescribeTaskDefinition and
  RegisterTaskDefinition;
- ``dispatcher.testing.memory_task_definitions.MemoryTaskDefinitions``: the in-memory twin.

Revisions are named ``family:revision`` (an ARN is accepted wherever one is taken).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping


class TaskDefinitions(ABC):
    """Errors: ``ResourceMissing`` when the revision to copy or read does not exist;
    ``LaunchError`` when ECS refuses the registration. Anything else: the outcome is unknown."""

    @abstractmethod
    def register_copy(self, source: str, image: str, env: Mapping[str, str]) -> str:
        """Register a copy of ``source`` whose worker container has ``image`` and ``env`` set
        (replacing variables of the same name, adding the others); return ``family:revision``
        of the new revision. The source's tags are carried over."""

    @abstractmethod
    def image_of(self, revision: str) -> str:
        """The worker container's image in ``revision`` (an INACTIVE one too)."""
