"""In-memory twin of the task-definitions port, over the launcher twin's revisions.

Revisions are numbered by the :class:`MemoryLauncher` they belong to, so the launcher's latest
ACTIVE revision counts the copies too, as in ECS. Each revision keeps the few fields the tests
look at (:class:`Revision`: image, environment, CPU, memory). :meth:`register` stands in for the
stack registering its own revision; :attr:`copies` lists every copy registered through the port.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from dispatcher.domain.deployment import revision_name
from dispatcher.domain.errors import ResourceMissing
from dispatcher.ports.task_definitions import TaskDefinitions
from dispatcher.testing.memory_launcher import MemoryLauncher

__all__ = ["MemoryTaskDefinitions", "Revision"]


@dataclass(frozen=True)
class Revision:
    image: str
    env: dict[str, str] = field(default_factory=dict)
    cpu: str = "256"
    memory: str = "512"


class MemoryTaskDefinitions(TaskDefinitions):
    def __init__(self, launcher: MemoryLauncher) -> None:
        self._launcher = launcher
        self._lock = threading.Lock()
        self.revisions: dict[str, Revision] = {}  # family:revision -> what it holds
        self.copies: list[str] = []  # every register_copy, in order

    def register(self, revision: Revision) -> str:
        """A revision as the stack registers it; returns ``family:revision``."""
        name = self._launcher.register_task_definition()
        with self._lock:
            self.revisions[name] = revision
        return name

    def get(self, revision: str) -> Revision:
        with self._lock:
            found = self.revisions.get(revision_name(revision))
        if found is None:
            raise ResourceMissing(f"task definition {revision!r} does not exist "
                                  "(ClientException)")
        return found

    def register_copy(self, source: str, image: str, env: Mapping[str, str]) -> str:
        base = self.get(source)
        name = self.register(replace(base, image=image, env={**base.env, **env}))
        with self._lock:
            self.copies.append(name)
        return name

    def image_of(self, revision: str) -> str:
        return self.get(revision).image
