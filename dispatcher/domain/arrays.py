"""Array jobs: one submit, N children, a parent whose state follows theirs.

A producer sends one message with ``array_size`` N (2 to :data:`MAX_ARRAY_SIZE`); the
dispatcher records it as the array's parent, which never runs itself, and materialises its
children a page at a time in later ticks (:mod:`dispatcher.stages.fanout`): child ``i`` is the
job ``<parent id>:<i>``, an ordinary job (bundled, retried, checkpointed on its own) that runs the
parent's kind with the parent's payload and sees ``ctx.array_index`` = i. AWS Batch's array
jobs go to 10,000 children (https://docs.aws.amazon.com/batch/latest/userguide/array_jobs.html);
these go to ten times that.

The parent's state is its children's aggregate (:func:`aggregate`): PENDING until a child is
recorded, RUNNING while any is unfinished, FAILED as soon as more than its tolerated failures
have failed (its other children still run: their results stay readable), SUCCEEDED when every
child has ended and no more than that many failed. A cancelled child counts as failed here: it
did not produce its part.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from dispatcher.domain.jobs import Job, JobState

# Ten times AWS Batch's limit (see the module): the parent records how far its children have
# been materialised, so the size costs nothing until they are.
MAX_ARRAY_SIZE = 100_000
MIN_ARRAY_SIZE = 2
# A child's id is ``<parent>:<index>``: a parent's id leaves room for ":99999" within the
# 128 characters every job id may have.
MAX_PARENT_ID_LENGTH = 128 - 1 - len(str(MAX_ARRAY_SIZE - 1))
# The failed indexes a parent keeps (the first ones): an operator retries them through the
# parent, so the list need not be complete to be useful, and it must fit the parent's item.
KEPT_FAILED_INDEXES = 1000

# A percentage, 0% to 100%, in ASCII digits (Python's \d takes any script's digits; the schema's
# pattern, an ECMA-262 one, does not). No spaces: the schema states this same pattern.
TOLERATED_PERCENTAGE = r"(100(?:\.0+)?|[0-9]{1,2}(?:\.[0-9]+)?)%"
_TOLERATED = re.compile(TOLERATED_PERCENTAGE)


def child_id(parent_id: str, index: int) -> str:
    return f"{parent_id}:{index}"


def tolerated_count(tolerated: int | str, size: int) -> int:
    """How many children may fail with the parent still SUCCEEDED: a count, or a percentage
    of ``size`` written ``"5%"`` (rounded down)."""
    if isinstance(tolerated, str):
        match = _TOLERATED.fullmatch(tolerated)
        if match is None:
            raise ValueError(f"tolerated_failures must be a count (a JSON integer) or a "
                             f"percentage from \"0%\" to \"100%\" such as \"5%\", not "
                             f"{tolerated[:40]!r}")
        return math.floor(size * float(match.group(1)) / 100)
    if tolerated < 0:
        raise ValueError("tolerated_failures must not be negative")
    return tolerated


@dataclass
class Tally:
    """What a tick read of an array's children: ``recorded`` of them were recorded then; those
    below ``settled`` had all ended, this many each way; the first failed indexes."""

    settled: int = 0
    succeeded: int = 0
    failed: int = 0  # FAILED or CANCELLED
    failed_indexes: list[int] = field(default_factory=list)
    recorded: int = 0

    def add(self, index: int, state: JobState) -> None:
        """Child ``index`` (the next one after ``settled``) ended in ``state``."""
        assert index == self.settled
        assert state in (
            JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.REJECTED)
        self.settled += 1
        if state == JobState.SUCCEEDED:
            self.succeeded += 1
        else:
            self.failed += 1
            if len(self.failed_indexes) < KEPT_FAILED_INDEXES:
                self.failed_indexes.append(index)

    def as_json(self) -> dict[str, object]:
        return {"settled": self.settled, "succeeded": self.succeeded, "failed": self.failed,
                "failed_indexes": self.failed_indexes, "recorded": self.recorded}

    @classmethod
    def from_json(cls, value: object) -> Tally:
        if not isinstance(value, dict):
            return cls()
        return cls(int(value.get("settled", 0)), int(value.get("succeeded", 0)),
                   int(value.get("failed", 0)),
                   [int(i) for i in value.get("failed_indexes", [])],
                   int(value.get("recorded", 0)))


def aggregate(size: int, tolerated: int, tally: Tally) -> JobState:
    """The parent's state from what was read of its children (see the module)."""
    if tally.failed > tolerated:
        return JobState.FAILED
    if tally.settled >= size:
        return JobState.SUCCEEDED
    return JobState.RUNNING if tally.recorded > 0 else JobState.PENDING


def child_of(parent: Job, index: int, at: float) -> Job:
    """Child ``index`` of ``parent`` as admission records it from its parent's message (the
    whole-array dependencies were waited for by the parent; an n_to_n one is judged as the
    child is offered, so a child made here names none)."""
    return Job(job_id=child_id(parent.job_id, index), kind=parent.kind, payload=parent.payload,
               estimated_seconds=parent.estimated_seconds, max_attempts=parent.max_attempts,
               timeout_seconds=parent.timeout_seconds, created_at=at,
               enqueued_at=parent.enqueued_at, priority=parent.priority,
               not_before=parent.not_before, resources=parent.resources,
               array_parent=parent.job_id, array_index=index, labels=parent.labels,
               tenant=parent.tenant, uses=parent.uses)


def parent_message(job: Job) -> dict[str, object]:
    """The message (schema v1) that made array parent ``job``: each child's is its parent's
    (:mod:`dispatcher.stages.fanout`), validated again as it is admitted."""
    assert job.array_size is not None
    fields: dict[str, object] = {
        "schema_version": 1, "job_id": job.job_id, "kind": job.kind, "payload": job.payload,
        "max_attempts": job.max_attempts, "priority": str(job.priority),
        # Tolerating more failures than children says no more than tolerating all of them: an
        # array recorded before its message had to say so (one that did not) gives its
        # children a message that is valid today.
        "array_size": job.array_size,
        "tolerated_failures": min(job.array_tolerated, job.array_size),
        "estimated_seconds": job.estimated_seconds, "timeout_seconds": job.timeout_seconds,
        "not_before": job.not_before, "cpu": job.resources.cpu,
        "memory": job.resources.memory, "ephemeral_storage": job.resources.ephemeral_storage,
        "labels": job.labels or None, "tenant": job.tenant, "uses": job.uses or None}
    return {k: v for k, v in fields.items() if v is not None}
