"""The job runner's role: a running bundle's writes, each fenced by the claim.

Every write a task makes carries its fence (bundle id, attempt, task ARN) as a condition, so a
task that lost its claim (a duplicate, or a stale task after a rerun) can never overwrite the
state of a newer attempt.
"""

from __future__ import annotations

from typing import Any

from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import JobState
from dispatcher.ports.store import records as r
from dispatcher.ports.store.base import Reads, status
from dispatcher.ports.store.values import Fence, JobUpdate
from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    Action,
    Add,
    And,
    Check,
    Condition,
    Eq,
    In,
    Op,
    Remove,
    Set,
    Update,
)

# One transaction: the fence check or the bundle's update, plus the job updates, with room to
# spare: at most 100 actions per TransactWriteItems (see dispatcher.ports.table).
JOBS_PER_TRANSACTION = MAX_TRANSACTION_ITEMS - 2


def fenced(f: Fence, states: tuple[BundleState, ...] = (BundleState.RUNNING,)) -> Condition:
    return And(Eq("attempt", f.attempt), Eq("task_arn", f.task_arn),
               In("state", [str(s) for s in states]))


def job_actions(u: JobUpdate, t: float) -> list[Action]:
    if u.via is not None:
        lifecycle.check_job(u.job_id, u.source, u.via)
        lifecycle.check_job(u.job_id, u.via, u.target)
    elif u.source != u.target:  # same state: bookkeeping only (budgets, history)
        lifecycle.check_job(u.job_id, u.source, u.target)
    actions: list[Action] = [Set("state", str(u.target)),
                             Set("status_key", r.job_status(u.target)), Set("updated_at", t)]
    if u.attempts_delta:
        actions.append(Add("attempts", u.attempts_delta))
    if u.infra_delta:
        actions.append(Add("infra_attempts", u.infra_delta))
    if u.history is not None:
        actions.append(Set("history", u.history))
    if u.result is not None:
        actions.append(Set("result", u.result))
    if u.error is not None:
        actions.append(Set("error", u.error))
    if u.reason is not None:
        actions.append(Set("reason", u.reason[:2000]))
    return actions


def job_updates(updates: list[JobUpdate], bundle_id: str, t: float) -> list[Op]:
    """Each job changes only from the state it was read in, and only within its own bundle
    (a retried job moved to another bundle is not ours any more)."""
    return [Update(r.job_key(u.job_id), job_actions(u, t),
                   And(Eq("state", str(u.source)), Eq("bundle_id", bundle_id)))
            for u in updates]


def bundle_actions(target: BundleState, t: float, retry_at: float | None) -> list[Action]:
    at = retry_at if retry_at is not None else t
    actions = status(r.bundle_status(target), t, at=at)
    if target == BundleState.PENDING:
        actions += [Set("next_attempt_at", at), Remove("launch_id")]
    return actions


class RunnerStore(Reads):
    """A running bundle's writes, each fenced by the claim (the job runner)."""

    def claim(self, fence: Fence) -> Bundle:
        """LAUNCHED -> RUNNING for exactly this task and attempt; ConflictError if lost."""
        t = self.clock()
        rec = self._write(Update(r.bundle_key(fence.bundle_id), [
            *bundle_actions(BundleState.RUNNING, t, None), Set("heartbeat_at", t)],
            fenced(fence, (BundleState.LAUNCHED,))),
            f"task {fence.task_arn} lost the claim of bundle {fence.bundle_id} "
            f"attempt {fence.attempt}")
        assert rec is not None  # an Update returns the item
        return r.record_bundle(rec)

    def heartbeat(self, fence: Fence) -> set[str]:
        """Prove liveness; return the job ids whose cancellation was requested."""
        rec = self._write(Update(r.bundle_key(fence.bundle_id),
                                 [Set("heartbeat_at", self.clock())], fenced(fence)),
                          f"task {fence.task_arn} lost bundle {fence.bundle_id}")
        return set(rec.cancel_jobs or ()) if rec else set()

    def apply(self, fence: Fence, updates: list[JobUpdate],
              bundle_to: BundleState | None = None, retry_at: float | None = None) -> None:
        """Job results, grouped: one transaction per 98 jobs, each checking the fence; the
        last one also moves the bundle to ``bundle_to``."""
        t = self.clock()
        chunks = [updates[i:i + JOBS_PER_TRANSACTION]
                  for i in range(0, len(updates), JOBS_PER_TRANSACTION)] or [[]]
        key = r.bundle_key(fence.bundle_id)
        for n, chunk in enumerate(chunks):
            ops: list[Op]
            if n == len(chunks) - 1 and bundle_to is not None:
                lifecycle.check_bundle(fence.bundle_id, BundleState.RUNNING, bundle_to)
                ops = [Update(key, bundle_actions(bundle_to, t, retry_at), fenced(fence))]
            else:
                ops = [Check(key, fenced(fence))]
            self._transact(ops + job_updates(chunk, fence.bundle_id, t),
                           f"task {fence.task_arn} lost bundle {fence.bundle_id}; "
                           "its results were not written")

    def save_checkpoint(self, fence: Fence, job_id: str, checkpoint: dict[str, Any]) -> None:
        """Persist a running job's progress, fenced like every other write of its task."""
        self._transact([
            Check(r.bundle_key(fence.bundle_id), fenced(fence)),
            Update(r.job_key(job_id), [Set("checkpoint", checkpoint),
                                       Set("updated_at", self.clock())],
                   And(Eq("state", str(JobState.RUNNING)), Eq("bundle_id", fence.bundle_id)))],
            f"task {fence.task_arn} lost bundle {fence.bundle_id}; checkpoint not written",
            job_id=job_id)

