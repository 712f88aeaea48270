"""What a listed or shown job waits for, from its record, its bundle's record and the last
tick's summary (the rule itself is :mod:`dispatcher.domain.waiting`'s): a read of the table,
never of the tick."""

from __future__ import annotations

from dispatcher.domain import rate_limits, tenants
from dispatcher.domain.jobs import JobState
from dispatcher.domain.waiting import (
    CHILDREN,
    DEPENDENCIES,
    BundleFacts,
    TickSummary,
    Waiting,
    waiting_for,
)
from dispatcher.ports.table import Record
from dispatcher.store.codec import FOLLOW_ONS_STATUS


def waiting_of(item: Record, bundle: Record | None, summary: TickSummary | None,
               at: float) -> Waiting | None:
    """What the job of ``item`` waits for: the rule of :mod:`dispatcher.domain.waiting` on its
    record, its bundle's and the last tick's summary."""
    if item.pk.startswith("REJECT#") or item.state != JobState.PENDING:
        return None
    if item.depends_on:  # held until they end (dispatcher.domain.dependencies)
        return Waiting(DEPENDENCIES, detail=", ".join(map(_dependency, item.depends_on)))
    if item.array_size is not None:  # a parent never runs: its children do
        return Waiting(CHILDREN, detail=f"{int(item.array_next or 0)} of "
                       f"{int(item.array_size)} children recorded")
    runs = int(item.attempts or 0) + int(item.infra_attempts or 0)
    return waiting_for(item.state, not_before=item.not_before, runs=runs, reason=item.reason,
                       bundle=None if bundle is None else bundle_facts(bundle),
                       summary=summary, now=at)


def _dependency(dep: object) -> str:
    """One dependency as ``jobs show`` says it: ``id (condition)``, ``, n_to_n`` added for an
    array's element-wise one (its children start as their counterparts end)."""
    if not isinstance(dep, dict):
        return str(dep)
    element_wise = ", n_to_n" if dep.get("n_to_n") else ""
    return f"{dep['job_id']} ({dep.get('condition', 'succeeded')}{element_wise})"


def bundle_facts(bundle: Record) -> BundleFacts:
    """What the waiting rule reads of a bundle's record."""
    return BundleFacts(
        state=bundle.state or "", next_attempt_at=bundle.next_attempt_at,
        launch_failures=int(bundle.launch_failures or 0), last_failure=bundle.last_failure,
        task_arn=bundle.task_arn, launch_id=bundle.launch_id, updated_at=bundle.updated_at,
        kind=bundle.kind, priority=bundle.priority or "normal", slots=int(bundle.slots or 0),
        stopped_task=bundle.reported_stop,
        follow_on=bundle.status_key == FOLLOW_ONS_STATUS,
        tenant=tenants.of_bundle(bundle.pk.removeprefix("BUNDLE#")),
        buckets=_buckets(bundle))


def _buckets(bundle: Record) -> tuple[tuple[str, int], ...]:
    """The buckets a bundle's launch takes tokens of (as its tenant resolves its keys), and
    how many of each."""
    if not isinstance(bundle.uses, dict):
        return ()
    tenant = tenants.of_bundle(bundle.pk.removeprefix("BUNDLE#"))
    return tuple((rate_limits.resolve(str(k), tenant), int(n)) for k, n in bundle.uses.items())
