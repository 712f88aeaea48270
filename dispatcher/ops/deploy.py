"""Ship new job code: a copy of the stack's revision with a new image, and the deployment record.

``longjobs deploy --image X`` registers a copy of the stack's task-definition revision
(``LONGJOBS_STACK_TASK_DEFINITION``, the stack's ``StackTaskDefinition`` output) that differs only
in the worker container's image and environment overrides, then records it as the deployment
(``DEPLOY#current`` in the job table: image, environment overrides, the copy, the stack revision it
was derived from). The dispatcher launches what that record says from its next tick on
(:mod:`dispatcher.stages.revision`); running tasks keep the revision they started with, and the
stack (queue, table, functions) is not touched.

So CPU, memory, roles, logging and networking are always the stack's, and the image is always the
deployed one: a stack update that changes a setting makes the stack register a new revision (with
its own ``Image`` parameter), and the next tick copies that revision again with the deployed image
and environment and records the copy. A stack update never rolls job code back, and a setting
changed after a deploy still takes effect.

Environment overrides accumulate: ``--env`` entries are merged into those of the deployment they
replace. A rollback is a deploy of the previous image (``--image``), or of the image of an earlier
revision (``--revision N``). The record is written conditionally on the version read: a deploy that
raced another deploy (or the tick re-deriving the record) fails with ``ConflictError`` having
written nothing but an unused revision, and is run again.

Without a stack revision (an older stack, local mode) the copy is made of the deployment's own
stack revision, or of the family's latest ACTIVE revision for the first deploy; a dispatcher
without the variable launches the latest ACTIVE revision, which is then the copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dispatcher.domain.deployment import Deployment, revision_name
from dispatcher.domain.errors import ConfigError
from dispatcher.ports.task_definitions import TaskDefinitions
from dispatcher.store.deployments import Deployments


@dataclass(frozen=True)
class Deployed:
    """What a deploy did: the deployment written, and the one it replaced (None: the first)."""

    deployment: Deployment
    previous: Deployment | None

    def as_dict(self) -> dict[str, object]:
        d, p = self.deployment, self.previous
        return {"revision": d.task_definition, "image": d.image, "env": d.env,
                "derived_from": d.derived_from, "version": d.version,
                "previous_revision": p.task_definition if p else None,
                "previous_image": p.image if p else None}


def deploy(store: Deployments, task_definitions: TaskDefinitions, *, family: str,
           stack: str | None, latest: Callable[[], str], image: str | None = None,
           revision: int | None = None, env: Mapping[str, str] | None = None) -> Deployed:
    """Deploy ``image`` (or the worker image of ``family:revision``) on the stack's revision.

    ``stack`` is the stack's current revision (None: unknown, see the module docstring);
    ``latest`` answers the family's latest ACTIVE revision. Raises ``ConfigError`` unless
    exactly one of ``image`` and ``revision`` is given, ``ResourceMissing`` for a revision that
    does not exist, ``ConflictError`` when the deployment changed meanwhile.
    """
    if (image is None) == (revision is None):
        raise ConfigError("give the image to deploy (--image) or the revision whose image to "
                          "deploy again (--revision), not both")
    if image is not None and not image.strip():
        raise ConfigError("image must not be empty")
    previous = store.deployment()
    if stack:
        source = revision_name(stack)
        if _family(source) != family:
            raise ConfigError(f"the stack's revision {source} is not of the family {family!r}")
    elif previous is not None and _family(previous.derived_from) == family:
        source = revision_name(previous.derived_from)
    else:
        source = latest()
    if revision is not None:
        image = task_definitions.image_of(f"{family}:{revision}")
    assert image is not None
    merged = {**(previous.env if previous else {}), **(env or {})}
    copy = task_definitions.register_copy(source, image, merged)
    written = store.save_deployment(
        Deployment(image=image, task_definition=revision_name(copy), derived_from=source,
                   env=merged, updated_by="deploy"), previous)
    return Deployed(written, previous)


def _family(revision: str) -> str:
    return revision_name(revision).rsplit(":", 1)[0]
