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

A child ``A:i`` of a recorded array ``A`` is on its way until its array records it, which may
be long after the grace (``A`` itself may wait for dependencies, and records its children a
page at a time): while ``A`` lives, a job waits for ``A:i`` as for any job not ended yet
(:func:`unrecorded_child`, as an n_to_n dependency waits for its counterparts). An index past
``A``'s size names no child, and the job is CANCELLED saying the size at once; so is an array
that waits for a child of its own (it records none until its dependencies are met).
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
# What a dependency not recorded is, when its id is a child's (``<parent>:<index>``) of a
# recorded array (see :func:`unrecorded_child`): these stand for its state.
# A child of an array that ended before it made that child (the n_to_n counterpart of a child
# past where its array stopped): it never will be, so it decides now, not after the grace.
NEVER_MADE = "NEVER_MADE"
# An index past its array's size: no such child will ever be.
NO_SUCH_CHILD = "NO_SUCH_CHILD"
# A child its live array has not recorded yet: waited for like a job not ended, with no grace.
ON_ITS_WAY = "ON_ITS_WAY"


def child_of(job_id: str) -> tuple[str, int] | None:
    """The parent id and index ``job_id`` would have as an array's child (``<parent>:<index>``,
    as :func:`~dispatcher.domain.arrays.child_id` writes it); None for an id of another form.
    Any job id may contain ``:``: whether it is a child depends on its parent being an array."""
    parent, sep, index = job_id.rpartition(":")
    if not (sep and parent and index.isdigit() and str(int(index)) == index):
        return None
    return parent, int(index)


def unrecorded_child(job_id: str, parent_state: JobState | str | None,
                     parent_size: int | None) -> str | None:
    """What ``job_id``, not recorded, stands for when its parent (``parent_state`` and
    ``parent_size``: its array's, None when no such job is recorded, or it is no array) says
    more than "unknown": NEVER_MADE (its array ended before it), NO_SUCH_CHILD (its index is
    past the size) or ON_ITS_WAY (its live array records it later). None: an unknown job like
    any other (no array is its parent, and a job of that very id may still be sent)."""
    child = child_of(job_id)
    if child is None or parent_size is None or parent_state is None:
        return None
    if child[1] >= parent_size:
        return NO_SUCH_CHILD
    return NEVER_MADE if parent_state in TERMINAL_JOB_STATES else ON_ITS_WAY


def own_child(dependent_id: str, dep: Dependency) -> bool:
    """Whether ``dep`` names a child of the job that waits for it: an array records no child
    before its dependencies are met, so it would wait forever."""
    child = child_of(dep.job_id)
    return child is not None and child[0] == dependent_id


def verdict(dep: Dependency, state: JobState | str | None) -> str:
    """What the dependency's ``state`` (None: unknown) means for its job: MET, AGAINST or
    WAITING."""
    if state in (REJECTED, NEVER_MADE, NO_SUCH_CHILD):
        return AGAINST
    if state is None or state not in TERMINAL_JOB_STATES:
        return WAITING
    if dep.condition == Requires.FINISHED:
        return MET
    wanted = JobState.SUCCEEDED if dep.condition == Requires.SUCCEEDED else JobState.FAILED
    return MET if state == wanted else AGAINST


def against_reason(dep: Dependency, state: JobState | str | None,
                   array_size: int | None = None) -> str:
    """Why ``dep``, in ``state``, cancels its job; ``array_size``: its array's, for
    NO_SUCH_CHILD."""
    parent = dep.job_id.rpartition(":")[0]
    if state is None:
        return (f"its dependency {dep.job_id} is unknown: no such job was recorded within "
                f"{UNKNOWN_GRACE_SECONDS:.0f} s")
    if state == REJECTED:
        return f"its dependency {dep.job_id} was REJECTED, never admitted"
    if state == NEVER_MADE:
        return f"its dependency {dep.job_id} was never made: its array {parent} ended before it"
    if state == NO_SUCH_CHILD:
        return no_such_child(dep.job_id, array_size or 0)
    return f"its dependency {dep.job_id} ended {state}; it needed {dep.condition}"


def no_such_child(job_id: str, array_size: int, quote: bool = False) -> str:
    """Why ``job_id`` (``<parent>:<index>``) can never be waited for: its array is smaller."""
    parent = job_id.rpartition(":")[0]
    q = "'" if quote else ""
    return (f"its dependency {q}{job_id}{q} is no child of array {q}{parent}{q}: it has "
            f"{array_size} children, {parent}:0 to {parent}:{array_size - 1}")


def own_child_reason(dep: Dependency) -> str:
    parent = dep.job_id.rpartition(":")[0]
    return (f"its dependency {dep.job_id} is a child of its own: array {parent} records its "
            "children only once its dependencies are met")


def cycles(waits: dict[str, list[str]]) -> dict[str, str]:
    """The jobs of ``waits`` (held jobs, by id, and the ids they wait for) that wait for
    themselves through others of ``waits``, each with the reason naming such a cycle. None of
    them can ever start: each waits for another that waits. A producer's client accepts a
    dependency not recorded yet (it may be on its way), so nothing before the dispatcher
    stops two jobs from waiting for each other. Linear in the jobs and their dependencies
    (Tarjan's strongly connected components, then one walk per component)."""
    edges = {j: [d for d in ds if d in waits] for j, ds in waits.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: dict[str, str] = {}
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(edges[node]):
                work.append((node, i + 1))
                nxt = edges[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.update(_reasons(node, edges, component))
    return out


# The ids a cycle's reason names at most (a reason stays readable).
CYCLE_IDS_NAMED = 10


def _reasons(root: str, edges: dict[str, list[str]], component: set[str]) -> dict[str, str]:
    """Each member's reason, naming one cycle through ``root``: from the member when it is
    on it (every member reaches that cycle, and it reaches every member)."""
    ring = _cycle_from(root, edges, component)
    at = {job_id: n for n, job_id in enumerate(ring)}
    out = {}
    for member in component:
        start = at.get(member, 0)
        named = [ring[(start + k) % len(ring)] for k in range(min(len(ring), CYCLE_IDS_NAMED))]
        more = f" -> ... ({len(ring) - len(named)} more)" if len(ring) > len(named) else ""
        cycle = " -> ".join(named) + more + " -> " + ring[start]
        out[member] = (f"its dependencies wait for it in turn ("
                       f"{'' if member in at else 'through '}{cycle}): none of them can "
                       "start; `longjobs jobs retry` runs it without waiting")
    return out


def _cycle_from(start: str, edges: dict[str, list[str]], component: set[str]) -> list[str]:
    """The ids of a shortest way from ``start`` back to it within its component (breadth
    first), each waiting for the next, the last waiting for ``start``."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while start not in came_from:
        nxt = []
        for job_id in frontier:
            for dep in edges[job_id]:
                if dep in component and dep not in came_from:
                    came_from[dep] = job_id
                    nxt.append(dep)
        frontier = nxt
    path = [came_from[start]]
    while path[-1] != start:
        path.append(came_from[path[-1]])
    return path[::-1]
