"""What a held job's (or an array parent's) dependencies say now: met, against it, or still
waiting (the rule is :mod:`dispatcher.domain.dependencies`'). Read by the reconciliation, which
releases or cancels held jobs, and by the fan-out, which offers an array's children only once
its parent's dependencies are met."""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.domain import dependencies as deps
from dispatcher.domain.dependencies import Dependency
from dispatcher.store import StageStore


@dataclass(frozen=True)
class Judgement:
    verdict: str  # deps.MET, deps.AGAINST or deps.WAITING
    reason: str | None = None  # AGAINST: which dependency, and how it ended


def judge(store: StageStore, depends_on: list[dict[str, str]], waited: float) -> Judgement:
    """``depends_on`` as the job stores it; ``waited``: seconds since it was recorded."""
    wanted = [Dependency.from_json(d) for d in depends_on]
    states = store.job_states([d.job_id for d in wanted])
    waiting = False
    for dep in wanted:
        state = states.get(dep.job_id)
        said = deps.verdict(dep, state)
        if said == deps.AGAINST or (state is None and waited > deps.UNKNOWN_GRACE_SECONDS):
            return Judgement(deps.AGAINST, deps.against_reason(dep, state))
        waiting = waiting or said == deps.WAITING
    return Judgement(deps.WAITING if waiting else deps.MET)
