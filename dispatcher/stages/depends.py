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
