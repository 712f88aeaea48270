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


def judge_all(store: StageStore, jobs: list[Job], now: float) -> dict[str, Judgement]:
    """Each job's judgement (by job id), from its ``depends_on`` and how long it has waited
    since it was recorded."""
    wanted = {j.job_id: [Dependency.from_json(d) for d in j.depends_on or []] for j in jobs}
    ids = sorted({d.job_id for ds in wanted.values() for d in ds})
    states = store.job_states(ids) if ids else {}
    _children_never_made(store, states)
    return {j.job_id: _judge(wanted[j.job_id], states, now - j.created_at) for j in jobs}


def _judge(wanted: list[Dependency], states: dict[str, str | None],
           waited: float) -> Judgement:
    waiting = False
    for dep in wanted:
        state = states.get(dep.job_id)
        said = deps.verdict(dep, state)
        if said == deps.AGAINST or (state is None and waited > deps.UNKNOWN_GRACE_SECONDS):
            return Judgement(deps.AGAINST, deps.against_reason(dep, state))
        waiting = waiting or said == deps.WAITING
    return Judgement(deps.WAITING if waiting else deps.MET)


def _children_never_made(store: StageStore, states: dict[str, str | None]) -> None:
    """Mark NEVER_MADE the unknown dependencies that are children of an array that ended
    (one more BatchGetItem, only when some dependency is unknown)."""
    unknown = [i for i, s in states.items() if s is None and ":" in i]
    if not unknown:
        return
    parents = {p.job_id: p for p in store.get_jobs(sorted({i.rpartition(":")[0]
                                                           for i in unknown}))}
    for job_id in unknown:
        parent = parents.get(job_id.rpartition(":")[0])
        if parent is not None and deps.never_made(job_id, parent.state,
                                                  parent.array_size is not None):
            states[job_id] = deps.NEVER_MADE

