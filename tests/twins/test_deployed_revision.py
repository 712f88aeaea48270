"""Which revision launches run: the deployed job code on the stack's revision, on the twins.

Every case of the resolution policy (``dispatcher/stages/revision.py``): no stack revision
(latest ACTIVE, as before), no deployment (the stack's), a deployment of the current stack
revision (its copy), one of an older stack revision (re-derived once), a deploy racing the
re-derivation; and the deploy flow (``dispatcher/ops/deploy.py``) over the same twins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.domain.deployment import Deployment
from dispatcher.domain.errors import ConfigError, ConflictError, ResourceMissing
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.ops.deploy import Deployed, deploy
from dispatcher.ports.table import Record
from dispatcher.store import codec as r
from dispatcher.testing.memory_task_definitions import MemoryTaskDefinitions, Revision
from dispatcher.wiring import pipeline
from tests.twins import FAMILY, Twins


class World:
    """The twins plus the worker's task definitions; ``stack`` is the stack's current revision
    as the functions' environment names it (an ARN, as ``!Ref`` gives it)."""

    def __init__(self, twins: Twins, monkeypatch: pytest.MonkeyPatch) -> None:
        self.twins = twins
        self.defs = MemoryTaskDefinitions(twins.launcher)
        self.stack = self.stack_update(Revision("registry/worker:A", cpu="256"))
        self.deploy_reads = 0
        get = twins.table.get

        def counted(pk: str) -> Record | None:
            if pk == r.DEPLOY_KEY:
                self.deploy_reads += 1
            return get(pk)

        monkeypatch.setattr(twins.table, "get", counted)

    def stack_update(self, revision: Revision) -> str:
        """The stack registers a revision of its own (create, or an update changing it)."""
        self.stack = self.defs.register(revision)
        return self.stack

    def arn(self, revision: str) -> str:
        return f"arn:aws:ecs:us-east-1:000000000000:task-definition/{revision}"

    def stages(self, stack: str | None = "current") -> pipeline.Stages:
        env = {} if stack is None else {
            "LONGJOBS_STACK_TASK_DEFINITION": self.arn(self.stack if stack == "current"
                                                       else stack)}
        return pipeline.build(self.twins.config(**env), queue=self.twins.queue,
                              store=self.twins.store, launcher=self.twins.launcher,
                              clock=self.twins.clock, pacer=LaunchPacer.simulated(),
                              task_definitions=self.defs)

    def deploy(self, **kwargs: Any) -> Deployed:
        kwargs.setdefault("stack", self.arn(self.stack))
        return deploy(self.twins.store, self.defs, family=FAMILY,
                      latest=self.twins.launcher.resolve_task_definition, **kwargs)

    def launch_one(self, job_id: str, stages: pipeline.Stages | None = None) -> str:
        """Submit a job and tick: the revision its bundle was launched with."""
        self.twins.client().submit("k", {}, job_id=job_id)
        (stages or self.stages()).tick.tick()
        job = self.twins.job(job_id)
        assert job is not None and job.bundle_id
        bundle = self.twins.bundle(job.bundle_id)
        assert bundle is not None and bundle.task_definition
        request = next(q for q in self.twins.launcher.requests
                       if q.task_definition == bundle.task_definition)
        return request.task_definition

    def record(self) -> Deployment:
        """The deployment record, read through the table's snapshot (not counted)."""
        rec = self.twins.table.snapshot().get(r.DEPLOY_KEY)
        assert rec is not None
        return r.record_deployment(rec)


@pytest.fixture
def world(twins: Twins, monkeypatch: pytest.MonkeyPatch) -> World:
    return World(twins, monkeypatch)


def test_without_a_stack_revision_the_latest_active_one_runs(world: World) -> None:
    """Local mode and stacks older than the variable: as before, latest ACTIVE, which a
    stack update replaces (the behaviour the deployment record exists to end)."""
    world.deploy(image="registry/worker:B", stack=None)
    newer = world.stack_update(Revision("registry/worker:A", cpu="512"))
    assert world.launch_one("j1", world.stages(stack=None)) == newer
    assert world.deploy_reads == 1  # the deploy's own read; the tick reads no record


def test_nothing_deployed_runs_the_stacks_revision(world: World) -> None:
    stack = world.stack
    world.defs.register(Revision("registry/worker:stray"))  # newer, not the stack's
    assert world.launch_one("j1") == stack
    assert world.defs.copies == []
    assert world.deploy_reads == 1


def test_a_deployment_of_the_current_stack_revision_runs_its_copy(world: World) -> None:
    done = world.deploy(image="registry/worker:B", env={"FEATURE": "on"})
    copy = done.deployment.task_definition
    assert world.defs.get(copy) == Revision("registry/worker:B", {"FEATURE": "on"}, "256")
    assert (done.deployment.derived_from, done.deployment.version) == (world.stack, 1)
    world.defs.register(Revision("registry/worker:stray"))  # newer, not the deployment
    reads = world.deploy_reads
    stages = world.stages()
    assert world.launch_one("j1", stages) == copy
    assert world.launch_one("j2", stages) == copy
    assert world.deploy_reads - reads == 2  # one GetItem per tick
    assert world.defs.copies == [copy]  # the deploy's; the ticks registered nothing


def test_a_stack_update_after_a_deploy_is_re_derived_once(world: World) -> None:
    """The stack's new revision has the stack's Image and new settings: the tick copies it
    with the deployed image and env, records the copy, and the next ticks just use it."""
    world.deploy(image="registry/worker:B", env={"FEATURE": "on"})
    updated = world.stack_update(Revision("registry/worker:A", cpu="1024", memory="2048"))
    stages = world.stages()
    reads = world.deploy_reads

    first = world.launch_one("j1", stages)
    assert world.defs.get(first) == Revision("registry/worker:B", {"FEATURE": "on"},
                                             "1024", "2048")
    record = world.record()
    assert (record.task_definition, record.derived_from, record.version,
            record.updated_by) == (first, updated, 2, "tick")
    copies = list(world.defs.copies)

    assert world.launch_one("j2", stages) == first
    assert world.launch_one("j3", world.stages()) == first  # a new process: same answer
    assert world.defs.copies == copies  # re-derived once, not every tick
    assert world.deploy_reads - reads == 3  # one GetItem per tick, the re-deriving one too


def test_a_relaunch_outside_a_tick_never_registers(world: World) -> None:
    """The task-event handler's relaunch (no RegisterTaskDefinition in its role): a stale
    deployment's own copy, the deployed image, until the next tick re-derives it."""
    copy = world.deploy(image="registry/worker:B").deployment.task_definition
    world.stack_update(Revision("registry/worker:A", cpu="1024"))
    stages = world.stages()
    assert stages.revisions.current() == copy
    assert world.defs.copies == [copy]
    stages.tick.tick()
    assert stages.revisions.current() == world.record().task_definition != copy


def test_the_tick_pins_one_revision_for_its_reconciliation_relaunches(world: World) -> None:
    stages = world.stages()
    reads = world.deploy_reads
    with stages.revisions.pinned() as pinned:
        assert [stages.revisions.current() for _ in range(3)] == [pinned] * 3
    assert world.deploy_reads - reads == 1


def test_a_deploy_racing_the_re_derivation_wins_and_runs_next(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tick read the record, a deploy writes a new one, the tick's conditional write
    loses: this tick launches its copy (the image it read), the next tick the new deploy."""
    world.deploy(image="registry/worker:B")
    world.stack_update(Revision("registry/worker:A", cpu="1024"))
    register: Callable[..., str] = world.defs.register_copy
    raced: list[Deployed] = []

    def racing(source: str, image: str, env: Any) -> str:
        copy = register(source, image, env)
        if image == "registry/worker:B" and not raced:  # the tick's copy: a deploy now
            raced.append(world.deploy(image="registry/worker:C"))
        return copy

    monkeypatch.setattr(world.defs, "register_copy", racing)
    stages = world.stages()
    first = world.launch_one("j1", stages)
    assert world.defs.get(first).image == "registry/worker:B"
    assert world.defs.get(first).cpu == "1024"
    assert world.record() == raced[0].deployment  # the deploy's write stands
    second = world.launch_one("j2", stages)
    assert second == raced[0].deployment.task_definition
    assert world.defs.get(second) == Revision("registry/worker:C", cpu="1024")


def test_two_deploys_from_one_read_do_not_interleave(world: World) -> None:
    read = world.twins.store.deployment()
    world.deploy(image="registry/worker:B")
    with pytest.raises(ConflictError, match="deployment changed"):
        world.twins.store.save_deployment(
            Deployment("registry/worker:X", "f:9", world.stack), read)
    assert world.record().image == "registry/worker:B"


def test_a_deploy_keeps_the_stacks_settings_and_the_env_of_earlier_deploys(
        world: World) -> None:
    world.deploy(image="registry/worker:B", env={"FEATURE": "on"})
    updated = world.stack_update(Revision("registry/worker:A", {"STACK": "1"}, cpu="2048"))
    done = world.deploy(image="registry/worker:C", env={"OTHER": "x"})
    assert done.deployment.derived_from == updated
    assert world.defs.get(done.deployment.task_definition) == Revision(
        "registry/worker:C", {"STACK": "1", "FEATURE": "on", "OTHER": "x"}, "2048")
    assert done.previous is not None and done.previous.image == "registry/worker:B"
    assert done.deployment.version == 2


def test_rollback_by_revision_deploys_that_revisions_image(world: World) -> None:
    b = world.deploy(image="registry/worker:B").deployment.task_definition
    world.deploy(image="registry/worker:C")
    number = int(b.rsplit(":", 1)[1])
    done = world.deploy(revision=number)
    assert done.deployment.image == "registry/worker:B"
    assert done.deployment.derived_from == world.stack
    assert world.launch_one("j1") == done.deployment.task_definition
    with pytest.raises(ResourceMissing):
        world.deploy(revision=999)


def test_a_deploy_needs_exactly_one_of_image_and_revision(world: World) -> None:
    for kwargs in ({}, {"image": "registry/worker:B", "revision": 1}, {"image": " "}):
        with pytest.raises(ConfigError):
            world.deploy(**kwargs)
    assert world.twins.store.deployment() is None
    assert world.defs.copies == []


def test_a_deploy_copies_only_a_revision_of_its_family(world: World) -> None:
    with pytest.raises(ConfigError, match="not of the family"):
        world.deploy(image="registry/worker:B", stack=world.arn("other-family:3"))
    assert world.defs.copies == []
