"""Which task-definition revision launches run: the deployed job code on the stack's settings.

The rule is :func:`dispatcher.domain.deployment.decide`; this stage applies it over the ports:
the stack's current revision (``LONGJOBS_STACK_TASK_DEFINITION``, handed in), the deployment
record (the store, one GetItem) and the task definitions (to re-derive the deployment after a
stack update). The tick resolves once per tick (:meth:`Revisions.for_tick`) and pins the answer
for the whole tick, relaunches of its reconciliation included; the task-event handler's
relaunches ask :meth:`Revisions.current`, which never registers anything.

Without a stack revision (local mode, a stack older than the variable) the revision is the
family's latest ACTIVE one, as the launcher resolves it: what the dispatcher always did, and
what a stack update can silently replace.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from dispatcher.domain.deployment import Deployment, Source, decide, revision_name
from dispatcher.domain.errors import ConflictError
from dispatcher.ports.launcher import Launcher
from dispatcher.ports.task_definitions import TaskDefinitions
from dispatcher.store.deployments import Deployments

log = logging.getLogger(__name__)


class Revisions:
    """``stack``: the stack's current revision (ARN or ``family:revision``), None if unknown.
    ``task_definitions`` is needed to re-derive (the tick); without it a stale deployment is
    launched as it is until a tick re-derives it."""

    def __init__(self, store: Deployments, launcher: Launcher,
                 task_definitions: TaskDefinitions | None, stack: str | None) -> None:
        self._store = store
        self._launcher = launcher
        self._task_definitions = task_definitions
        self._stack = revision_name(stack) if stack else None
        self._pinned: str | None = None

    @contextmanager
    def pinned(self) -> Iterator[str]:
        """The tick's revision (:meth:`for_tick`), answered by :meth:`current` until exit."""
        self._pinned = self.for_tick()
        try:
            yield self._pinned
        finally:
            self._pinned = None

    def for_tick(self) -> str:
        """The revision to launch, re-deriving the deployment if the stack changed since it
        was made: a new copy of the stack's revision with the deployed image and environment,
        recorded in its place, so the next ticks find it current. At most one GetItem."""
        return self._resolve(derive=True)

    def current(self) -> str:
        """The tick's pinned revision while a tick runs; else the revision to launch without
        registering anything (a stale deployment's own copy: the deployed image on the
        stack's earlier settings, until the next tick re-derives it)."""
        return self._pinned or self._resolve(derive=False)

    def _resolve(self, *, derive: bool) -> str:
        if self._stack is None:
            return self._launcher.resolve_task_definition()
        deployed = self._store.deployment()
        source = decide(self._stack, deployed)
        if source is Source.STACK or deployed is None:
            return self._stack
        if source is Source.DEPLOYED or not derive or self._task_definitions is None:
            return revision_name(deployed.task_definition)
        return self._rederive(deployed, self._task_definitions)

    def _rederive(self, deployed: Deployment, task_definitions: TaskDefinitions) -> str:
        assert self._stack is not None
        copy = revision_name(task_definitions.register_copy(self._stack, deployed.image,
                                                            deployed.env))
        log.warning("the stack's task definition changed since the deploy: its revision "
                    "copied with the deployed image", extra={
                        "stack_revision": self._stack, "derived_from": deployed.derived_from,
                        "image": deployed.image, "task_definition": copy})
        try:
            self._store.save_deployment(replace(deployed, task_definition=copy,
                                                derived_from=self._stack, updated_by="tick"),
                                        deployed)
        except ConflictError as exc:
            # A deploy wrote the record since it was read: this tick launches the copy made
            # (the image deployed when the tick read), the next tick the new deployment.
            log.warning("the deployment changed while it was re-derived",
                        extra={"reason": exc.reason, "task_definition": copy})
        return copy
