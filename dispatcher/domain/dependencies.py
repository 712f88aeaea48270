"""Jobs that wait for others: ``depends_on`` and what each dependency's end means for its job.

A job may name up to :data:`MAX_DEPENDENCIES` jobs it depends on (AWS Batch allows 20:
https://docs.aws.amazon.com/batch/latest/APIReference/API_JobDependency.html), each with a
condition: ``succeeded`` (the default), ``finished`` (any end) or ``failed``. An array job's
parent is a job like any other here, so a job depending on it waits for the whole array (fan-in).
An array may instead depend on another array of its size element-wise (``n_to_n``, AWS Batch's
N_TO_N): its child i waits for the other's child i only (:mod:`dispatcher.stages.n_to_n`).

The job is recorded at once, held (it takes no slot), and says it waits for ``dependencies``.
Once every dependency has ended as its condition asks, it becomes due; as soon as one has ended
otherwise (or was REJECTED, or is unknown past :data:`UNKNOWN_GRACE_SECONDS`), the job is
CANCELLED with a reason naming that dependency: nothing waits forever.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dispatcher.domain.arrays import child_id
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState

MAX_DEPENDENCIES = 20
# A dependency the table does not know may still be on its way (SQS does not keep the order
# in which a producer sent the two): the dependent waits this long for it to be recorded.
UNKNOWN_GRACE_SECONDS = 900.0


class Requires(StrEnum):
    SUCCEEDED = "succeeded"
    FINISHED = "finished"
    FAILED = "failed"


@dataclass(frozen=True)
class Dependency:
    job_id: str
    condition: Requires = Requires.SUCCEEDED
    # Element-wise: this array's child i depends on child i of the array ``job_id``.
    n_to_n: bool = False

    def as_json(self) -> dict[str, str | bool]:
        """Its stored form; ``n_to_n`` only when set, so a plain one reads as it always did."""
        out: dict[str, str | bool] = {"job_id": self.job_id, "condition": str(self.condition)}
        if self.n_to_n:
            out["n_to_n"] = True
        return out

    @classmethod
    def from_json(cls, value: object) -> Dependency:
        if isinstance(value, str):
            return cls(value)
        assert isinstance(value, dict)
        return cls(str(value["job_id"]), Requires(value.get("condition", "succeeded")),
                   bool(value.get("n_to_n", False)))

    def element(self, index: int) -> Dependency:
        """An n_to_n dependency as child ``index`` sees it: a plain one on child ``index``."""
        return Dependency(child_id(self.job_id, index), self.condition)


MET, AGAINST, WAITING = "met", "against", "waiting"
REJECTED = "REJECTED"  # a dependency that was never admitted
# A child of an array that ended before it made that child (the n_to_n counterpart of a child
# past where its array stopped): it never will be, so it decides now, not after the grace.
NEVER_MADE = "NEVER_MADE"


def never_made(job_id: str, parent_state: JobState | str | None,
               parent_is_array: bool) -> bool:
    """Whether ``job_id``, not recorded, is a child its array will not make: the id of a
    child (``<parent>:<index>``) of an array that has ended."""
    _, sep, index = job_id.rpartition(":")
    return bool(sep) and index.isdigit() and parent_is_array \
        and parent_state in TERMINAL_JOB_STATES


def verdict(dep: Dependency, state: JobState | str | None) -> str:
    """What the dependency's ``state`` (None: unknown) means for its job: MET, AGAINST or
    WAITING."""
    if state in (REJECTED, NEVER_MADE):
        return AGAINST
    if state is None or state not in TERMINAL_JOB_STATES:
        return WAITING
    if dep.condition == Requires.FINISHED:
        return MET
    wanted = JobState.SUCCEEDED if dep.condition == Requires.SUCCEEDED else JobState.FAILED
    return MET if state == wanted else AGAINST


def against_reason(dep: Dependency, state: JobState | str | None) -> str:
    if state is None:
        return (f"its dependency {dep.job_id} is unknown: no such job was recorded within "
                f"{UNKNOWN_GRACE_SECONDS:.0f} s")
    if state == REJECTED:
        return f"its dependency {dep.job_id} was REJECTED, never admitted"
    if state == NEVER_MADE:
        return (f"its dependency {dep.job_id} was never made: its array "
                f"{dep.job_id.rpartition(':')[0]} ended before it")
    return f"its dependency {dep.job_id} ended {state}; it needed {dep.condition}"
