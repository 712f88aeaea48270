"""Which task-definition revision launches run: the deployed job code on the stack's settings.

The rule is :func:`dispatcher.domain.deployment.decide`; this stage applies it over the ports:
the stack's current revision (``LONGJOBS_STACK_TASK_DEFINITION``, handed in), the deployment
record (the store, one GetItem) and the task definitions (to re-derive the deployment after a
stack update). The tick resolves once per tick (:meth:`Revisions.for_tick`) and pins the answer
(with the record's version it was decided on, :attr:`Revisions.pinned_version`) for the whole
tick, relaunches of its reconciliation included; the task-event handler's relaunches ask
:meth:`Revisions.current`, which never registers anything.

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

# The deployment record's versions start at 1 (dispatcher.store.deployments): 0 says there was
# no record; -1, that the version a tick's revision was decided on is not known (a concurrent
# deploy), and no runner takes a follow-on on it.
NO_RECORD = 0
NO_VERSION = -1


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
        # The deployment record's version the tick's revision was decided on (NO_RECORD:
        # there was none; NO_VERSION: not known; None: not decided on the record, the latest
        # ACTIVE revision), kept with the revision for the runners' takes of follow-ons
        # (dispatcher.store.follow_ons): a deploy since ends them.
        self.pinned_version: int | None = NO_VERSION

    @contextmanager
    def pinned(self) -> Iterator[str]:
        """The tick's revision (:meth:`for_tick`), answered by :meth:`current` until exit."""
        self._pinned = self.for_tick()
        try:
            yield self._pinned
        finally:
            self._pinned = None
            self.pinned_version = NO_VERSION

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
            if derive:
                self.pinned_version = None  # latest ACTIVE: not decided on the record
            return self._launcher.resolve_task_definition()
        deployed = self._store.deployment()
        if derive:
            self.pinned_version = deployed.version if deployed is not None else NO_RECORD
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
            self.pinned_version = self._store.save_deployment(
                replace(deployed, task_definition=copy, derived_from=self._stack,
                        updated_by="tick"), deployed).version
        except ConflictError as exc:
            self.pinned_version = NO_VERSION
            # A deploy wrote the record since it was read: this tick launches the copy made
            # (the image deployed when the tick read), the next tick the new deployment.
            log.warning("the deployment changed while it was re-derived",
                        extra={"reason": exc.reason, "task_definition": copy})
        return copy
