"""What held jobs' (or array parents') dependencies say now: met, against them, or still
waiting (the rule is :mod:`dispatcher.domain.dependencies`'). Read by the reconciliation, which
releases or cancels held jobs, and by the fan-out, which offers an array's children only once
its parent's dependencies are met. The dependencies of every job a tick looks at are read at
once (one BatchGetItem per 100, and a GetItem for each one not found, to tell a REJECTED one)."""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.domain import dependencies as deps
from dispatcher.domain.dependencies import Dependency
from dispatcher.domain.jobs import Job
from dispatcher.store import StageStore


@dataclass(frozen=True)
class Judgement:
    verdict: str  # deps.MET, deps.AGAINST or deps.WAITING
    reason: str | None = None  # AGAINST: which dependency, and how it ended
    # WAITING: its dependencies that are children of an array (``A:i``), recorded and not
    # ended: one recorded after its dependent was linked is linked by the look at every held
    # dependent (stages/dependents.py).
    children: tuple[str, ...] = ()


def judge_all(store: StageStore, jobs: list[Job], now: float) -> dict[str, Judgement]:
    """Each job's judgement (by job id), from its ``depends_on`` and how long it has waited
    since it was recorded."""
    wanted = {j.job_id: [Dependency.from_json(d) for d in j.depends_on or []] for j in jobs}
    ids = sorted({d.job_id for ds in wanted.values() for d in ds})
    states = store.job_states(ids) if ids else {}
    sizes = _unrecorded_children(store, states)
    return {j.job_id: _judge(j.job_id, wanted[j.job_id], states, sizes, now - j.created_at)
            for j in jobs}


def _judge(job_id: str, wanted: list[Dependency], states: dict[str, str | None],
           sizes: dict[str, int], waited: float) -> Judgement:
    waiting = False
    children: list[str] = []
    for dep in wanted:
        if deps.own_child(job_id, dep):
            return Judgement(deps.AGAINST, deps.own_child_reason(dep))
        state = states.get(dep.job_id)
        said = deps.verdict(dep, state)
        if said == deps.AGAINST or (state is None and waited > deps.UNKNOWN_GRACE_SECONDS):
            return Judgement(deps.AGAINST, deps.against_reason(dep, state,
                                                               sizes.get(dep.job_id)))
        if said == deps.WAITING:
            waiting = True
            if deps.child_of(dep.job_id) is not None and state not in (None, deps.ON_ITS_WAY):
                children.append(dep.job_id)  # recorded: a link to it may be missing
    return Judgement(deps.WAITING, children=tuple(children)) if waiting \
        else Judgement(deps.MET)


def _unrecorded_children(store: StageStore, states: dict[str, str | None]) -> dict[str, int]:
    """Say what the unknown dependencies that are children of a recorded array stand for
    (NEVER_MADE, NO_SUCH_CHILD, ON_ITS_WAY: :func:`deps.unrecorded_child`), in ``states``; one
    more BatchGetItem, only when some dependency is unknown. Returns their arrays' sizes."""
    unknown = {i: child[0] for i, s in states.items()
               if s is None and (child := deps.child_of(i)) is not None}
    if not unknown:
        return {}
    parents = {p.job_id: p for p in store.get_jobs(sorted(set(unknown.values())))}
    sizes: dict[str, int] = {}
    for job_id, parent_id in unknown.items():
        parent = parents.get(parent_id)
        if parent is None or parent.array_size is None:
            continue  # unknown: a job of that very id may still be on its way
        states[job_id] = deps.unrecorded_child(job_id, parent.state, parent.array_size)
        sizes[job_id] = parent.array_size
    return sizes
