"""What job code runs: the deployment, a fact of the job table, not "the latest revision".

Two things register revisions of the worker's task family. The stack registers its own (on
create, and again whenever an update changes the task definition: CPU, memory, the task
concurrency in its environment, the ``Image`` parameter) and hands the functions its current one
(``LONGJOBS_STACK_TASK_DEFINITION``). ``longjobs deploy`` registers copies of the stack's revision
with another image and container environment, and records that in the deployment record. Which
revision a launch runs is then decided by :func:`decide` from the two, never by which revision
happens to be the newest:

- no deployment: the stack's revision;
- a deployment derived from the stack's current revision: its copy;
- a deployment derived from an older stack revision (the stack was updated since): a new copy
  of the stack's current revision with the deployment's image and environment, recorded in
  its place (once: the record is then derived from the current revision).

So a stack update never changes the image that runs, and a deploy never loses a setting the
stack changes later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


def revision_name(task_definition: str) -> str:
    """``family:revision`` of a task definition given as that or as its ARN (what ``!Ref`` of
    an ``AWS::ECS::TaskDefinition`` gives: ``arn:...:task-definition/family:revision``)."""
    return task_definition.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Deployment:
    """The deployed job code: the image and container environment overrides, the revision that
    carries them (``task_definition``, what launches run) and the stack revision it is a copy of
    (``derived_from``); both as ``family:revision``. ``version`` counts the record's writes:
    every write is conditional on the version it read, so two writers never interleave."""

    image: str
    task_definition: str
    derived_from: str
    env: dict[str, str] = field(default_factory=dict)
    version: int = 0
    updated_at: float = 0.0
    updated_by: str = ""  # "deploy" or "tick" (a re-derivation after a stack update)
    # The deployments before it, newest first (at most EARLIER_KEPT): what launches ran then.
    earlier: list[Earlier] = field(default_factory=list)


@dataclass(frozen=True)
class Earlier:
    """A deployment that was replaced: its revision, image and when and by whom it was
    recorded."""

    task_definition: str
    image: str
    updated_at: float
    updated_by: str


# Deployments an operator can look back on (the record's own item holds them: ~150 bytes each).
EARLIER_KEPT = 20


class Source(StrEnum):
    """Where a launch's revision comes from."""

    LATEST = "latest"  # no stack revision known (local mode, an older stack): latest ACTIVE
    STACK = "stack"  # nothing deployed: the stack's own revision
    DEPLOYED = "deployed"  # the deployment's copy, derived from the stack's current revision
    REDERIVE = "rederive"  # the stack changed since the deployment: copy it again


def decide(stack: str | None, deployment: Deployment | None) -> Source:
    """Which revision to launch, given the stack's current revision (None: unknown) and the
    deployment record (None: nothing deployed)."""
    if stack is None:
        return Source.LATEST
    if deployment is None:
        return Source.STACK
    if revision_name(deployment.derived_from) == revision_name(stack):
        return Source.DEPLOYED
    return Source.REDERIVE
