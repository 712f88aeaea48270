"""The twin tier (``make test-fast``) and the world it runs in.

The tests of this package run in-process, on the in-memory twins of ``dispatcher/testing/``
and on pure code: no moto server, no AWS endpoint (asking for moto here fails; such a test
belongs in ``tests/contract`` or ``tests/integration``). This module is their world, which the
other tiers use too: an in-process pipeline on the twins, one fake clock, one table, queue and
launcher.

``twins`` gives a :class:`Twins`; ``twins.stages()`` wires the real stages
(``dispatcher.wiring.pipeline.build``) to the twins, ``twins.client()`` is the producer on the twin
queue. State is read through the twins (the table's snapshot, the queue's backlog, the
launcher's tasks), not through what the code under test returns.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher import settings
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job, JobState, Priority
from dispatcher.domain.pacing import LaunchPacer
from dispatcher.ops.client import JobClient
from dispatcher.ports.queue import Queue
from dispatcher.ports.table import Record
from dispatcher.ports.task_definitions import TaskDefinitions
from dispatcher.settings import Config
from dispatcher.stages.dependents import Dependents, DependentsStats
from dispatcher.store import Fence, JobUpdate, Store
from dispatcher.store import codec as r
from dispatcher.testing.ended_jobs_feed import EndedJobsFeed
from dispatcher.testing.memory_launcher import MemoryLauncher
from dispatcher.testing.memory_queue import MemoryQueue
from dispatcher.testing.memory_table import MemoryTable
from dispatcher.wiring import pipeline

FAMILY = "longjobs-worker"
CLUSTER = "longjobs"

# Dummy names: nothing here talks to AWS.
ENV = {
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
    "LONGJOBS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/000000000000/longjobs-jobs",
    "LONGJOBS_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/000000000000/longjobs-dlq",
    "LONGJOBS_TABLE": "longjobs-jobs",
    "LONGJOBS_CLUSTER": CLUSTER,
    "LONGJOBS_TASK_FAMILY": FAMILY,
    "LONGJOBS_CONTAINER": "worker",
    "LONGJOBS_SUBNETS": "subnet-00000000",
    "LONGJOBS_SECURITY_GROUPS": "sg-00000000000000000",
    # As the moto fixture sets them: recover and retry launches at once unless a test says so.
    "LONGJOBS_LAUNCH_RECOVERY_SECONDS": "0",
    "LONGJOBS_LAUNCH_BACKOFF_SECONDS": "0",
}


class FakeClock:
    """Settable, advanceable time shared by the store, the launcher and the stages."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t

    def set(self, t: float) -> None:
        self.t = t


class Twins:
    """One test's world: the twins, wired with a fake clock."""

    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.clock = FakeClock(t)
        self.table = MemoryTable()
        self.store = Store(self.table, clock=self.clock)
        self.queue = MemoryQueue(clock=self.clock)
        self.launcher = MemoryLauncher(family=FAMILY, cluster=CLUSTER, clock=self.clock)
        # Queues of their own for some priorities (the others share ``queue``), if a test
        # gives them.
        self.priority_queues: dict[Priority, Queue] = {}
        # The table's stream as the dependents function reads it: :meth:`flow` delivers it.
        self.feed = EndedJobsFeed(self.table)
        # The worker's task definitions, if a test gives them: the tick then re-derives the
        # deployment after a stack update (dispatcher/stages/revision.py).
        self.task_definitions: TaskDefinitions | None = None

    # -- wiring ---------------------------------------------------------------------------------
    def env(self, **overrides: str) -> dict[str, str]:
        return {**ENV, **overrides}

    def config(self, **overrides: str) -> Config:
        return settings.load("dispatcher", self.env(**overrides))

    def stages(self, **overrides: str) -> pipeline.Stages:
        return pipeline.build(self.config(**overrides), queue=self.queue, store=self.store,
                            launcher=self.launcher, clock=self.clock,
                            pacer=LaunchPacer.simulated(),
                            priority_queues=dict(self.priority_queues) or None,
                            task_definitions=self.task_definitions)

    def flow(self) -> DependentsStats:
        """Deliver the stream's writes so far to the release stage, as its function would a
        moment after them: the jobs that waited for a job that ended are released (or
        cancelled)."""
        return self.feed.deliver(Dependents(self.store, self.clock))

    def client(self, **kwargs: Any) -> JobClient:
        return JobClient(queue_url=ENV["LONGJOBS_QUEUE_URL"], table_name=ENV["LONGJOBS_TABLE"],
                         region="us-east-1", queue=self.queue, store=self.store, **kwargs)

    def launched(self, job_id: str, **submit: Any) -> tuple[str, str]:
        """Submit one job and tick once: (bundle id, task ARN) of its launched bundle."""
        self.client().submit("k", {}, job_id=job_id, **submit)
        self.stages().tick.tick()
        job = self.job(job_id)
        assert job is not None and job.bundle_id
        bundle = self.bundle(job.bundle_id)
        assert bundle is not None and bundle.task_arn
        return bundle.bundle_id, bundle.task_arn

    # -- reading state (through the table twin) -------------------------------------------------
    def items(self, prefix: str) -> list[Record]:
        return [rec for pk, rec in sorted(self.table.snapshot().items())
                if pk.startswith(prefix)]

    def jobs(self) -> list[Job]:
        return [r.record_job(rec) for rec in self.items("JOB#")]

    def job(self, job_id: str) -> Job | None:
        rec = self.table.snapshot().get(r.job_key(job_id))
        return r.record_job(rec) if rec else None

    def bundles(self) -> list[Bundle]:
        """Every bundle, with its job ids (read from its pages if it has any)."""
        out = [r.record_bundle(rec) for rec in self.items("BUNDLE#")]
        for b in out:
            b.job_ids = self.store.job_ids_of(b)
        return out

    def bundle(self, bundle_id: str) -> Bundle | None:
        rec = self.table.snapshot().get(r.bundle_key(bundle_id))
        return r.record_bundle(rec) if rec else None

    def rejections(self) -> list[Record]:
        return self.items("REJECT#")

    def queue_counts(self) -> tuple[int, int]:
        """(visible, in flight), as SQS's approximate counts."""
        backlog = self.queue.backlog()
        return backlog.visible, backlog.in_flight

    def task_arns(self) -> list[str]:
        """Every task the launcher started (ListTasks)."""
        return list(self.launcher.tasks)


@pytest.fixture
def twins() -> Twins:
    return Twins()


def finish_as_runner(store: Store, job_id: str, target: JobState) -> Fence:
    """What a runner does: claim the job's bundle, record its start (``target`` RUNNING)
    or its outcome (the bundle DONE). Returns the fence its task writes with."""
    job = store.get_job(job_id)
    assert job is not None and job.bundle_id
    bundle = store.get_bundle(job.bundle_id)
    assert bundle is not None and bundle.task_arn
    fence = Fence(bundle.bundle_id, bundle.attempt, bundle.task_arn)
    store.claim(fence)
    if target == JobState.RUNNING:
        store.apply(fence, [JobUpdate(job_id, JobState.PENDING, JobState.RUNNING,
                                      attempts_delta=1)])
    else:
        store.apply(fence, [JobUpdate(job_id, JobState.PENDING, target, via=JobState.RUNNING,
                                      attempts_delta=1)], bundle_to=BundleState.DONE)
    return fence
