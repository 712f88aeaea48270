"""Writes of a running bundle and its stop: claim, heartbeat, job results, checkpoints, reruns.

Every write a task makes carries its fence (bundle id, attempt, task ARN) as a condition, so a
task that lost its claim (a duplicate, or a stale task after a rerun) can never overwrite the
state of a newer attempt. Kept apart from ``dynamodb.py`` so each file stays one concern.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pynamodb.exceptions import TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from dispatcher.aws.dynamodb.codec import item_bundle
from dispatcher.aws.dynamodb.models import Item, iso
from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import JobState, now
from dispatcher.ports.store import Fence, JobUpdate

# A transaction holds at most 100 actions: the fence check plus 99 job updates (+ the bundle).
JOBS_PER_TRANSACTION = 98


def failed_conditions(exc: TransactWriteError) -> set[int]:
    """Positions of the items whose condition failed (a lost fence, a duplicate)."""
    reasons = exc.cancellation_reasons or []
    return {i for i, r in enumerate(reasons)
            if r is not None and r.code == "ConditionalCheckFailed"}


@contextmanager
def transaction(conn: Any, lost: str, job_id: str | None = None) -> Iterator[TransactWrite]:
    """A TransactWrite whose failed conditions become one ConflictError saying what was lost."""
    try:
        with TransactWrite(connection=conn) as tx:
            yield tx
    except TransactWriteError as exc:
        if failed_conditions(exc):
            raise ConflictError(lost, job_id=job_id) from None
        raise


def _update_jobs(tx: TransactWrite, updates: list[JobUpdate], bundle_id: str, t: float) -> None:
    """Each job changes only from the state it was read in, and only within its own bundle
    (a retried job moved to another bundle is not ours any more)."""
    for u in updates:
        tx.update(Item(f"JOB#{u.job_id}"), actions=_job_actions(u, t),
                  condition=(Item.state == str(u.source)) & (Item.bundle_id == bundle_id))


def _fenced(f: Fence, states: tuple[BundleState, ...] = (BundleState.RUNNING,)) -> Any:
    cond = (Item.attempt == f.attempt) & (Item.task_arn == f.task_arn)
    return cond & Item.state.is_in(*[str(s) for s in states])


def _job_actions(u: JobUpdate, t: float) -> list[Any]:
    if u.via is not None:
        lifecycle.check_job(u.job_id, u.source, u.via)
        lifecycle.check_job(u.job_id, u.via, u.target)
    elif u.source != u.target:  # same state: bookkeeping only (budgets, history)
        lifecycle.check_job(u.job_id, u.source, u.target)
    actions: list[Any] = [Item.state.set(str(u.target)), Item.status_key.set(f"JOB#{u.target}"),
                          Item.updated_at.set(t)]
    if u.attempts_delta:
        actions.append(Item.attempts.add(u.attempts_delta))
    if u.infra_delta:
        actions.append(Item.infra_attempts.add(u.infra_delta))
    if u.history is not None:
        actions.append(Item.history.set(u.history))
    if u.result is not None:
        actions.append(Item.result.set(u.result))
    if u.error is not None:
        actions.append(Item.error.set(u.error))
    if u.reason is not None:
        actions.append(Item.reason.set(u.reason[:2000]))
    if u.checkpoint is not None:
        actions.append(Item.checkpoint.set(u.checkpoint))
    return actions


def _bundle_actions(target: BundleState, t: float, retry_at: float | None) -> list[Any]:
    at = retry_at if retry_at is not None else t
    actions = [Item.state.set(str(target)), Item.status_key.set(f"BUNDLE#{target}"),
               Item.status_at.set(iso(at)), Item.updated_at.set(t)]
    if target == BundleState.PENDING:
        actions += [Item.next_attempt_at.set(at), Item.launch_id.remove()]
    return actions


class RunWrites:
    """Mixin of DynamoStore: needs ``self._conn`` (a pynamodb Connection)."""

    _conn: Any

    def claim(self, fence: Fence) -> Bundle:
        t = now()
        try:
            item = Item(f"BUNDLE#{fence.bundle_id}")
            item.update(actions=[*_bundle_actions(BundleState.RUNNING, t, None),
                                 Item.claimed_at.set(t), Item.heartbeat_at.set(t)],
                        condition=_fenced(fence, (BundleState.LAUNCHED,)))
        except UpdateError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                raise ConflictError(f"task {fence.task_arn} lost the claim of bundle "
                                    f"{fence.bundle_id} attempt {fence.attempt}") from None
            raise
        return item_bundle(item)

    def heartbeat(self, fence: Fence, current_job: str | None) -> set[str]:
        """Prove liveness; return the job ids whose cancellation was requested."""
        t = now()
        item = Item(f"BUNDLE#{fence.bundle_id}")
        try:
            item.update(actions=[Item.heartbeat_at.set(t), Item.current_job.set(current_job)
                                 if current_job else Item.current_job.remove()],
                        condition=_fenced(fence))
        except UpdateError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                raise ConflictError(f"task {fence.task_arn} lost bundle {fence.bundle_id}") \
                    from None
            raise
        return set(item.cancel_jobs or ())

    def apply(self, fence: Fence, updates: list[JobUpdate],
              bundle_to: BundleState | None = None, retry_at: float | None = None) -> None:
        """Job results, grouped: one transaction per 98 jobs, each checking the fence."""
        t = now()
        chunks = [updates[i:i + JOBS_PER_TRANSACTION]
                  for i in range(0, len(updates), JOBS_PER_TRANSACTION)] or [[]]
        for n, chunk in enumerate(chunks):
            last = n == len(chunks) - 1
            with transaction(self._conn, f"task {fence.task_arn} lost bundle "
                             f"{fence.bundle_id}; its results were not written") as tx:
                if last and bundle_to is not None:
                    lifecycle.check_bundle(fence.bundle_id, BundleState.RUNNING, bundle_to)
                    tx.update(Item(f"BUNDLE#{fence.bundle_id}"),
                              actions=_bundle_actions(bundle_to, t, retry_at),
                              condition=_fenced(fence))
                else:
                    tx.condition_check(Item, f"BUNDLE#{fence.bundle_id}",
                                       condition=_fenced(fence))
                _update_jobs(tx, chunk, fence.bundle_id, t)

    def settle(self, bundle: Bundle, updates: list[JobUpdate], target: BundleState,
               retry_at: float | None = None) -> None:
        """A stopped task's bundle: requeue or close it, with its jobs, only if nobody moved it
        since we read it (the fence is the task ARN and attempt we read)."""
        lifecycle.check_bundle(bundle.bundle_id, bundle.state, target)
        t = now()
        cond = (Item.state == str(bundle.state)) & (Item.attempt == bundle.attempt)
        if bundle.task_arn:
            cond = cond & (Item.task_arn == bundle.task_arn)
        with transaction(self._conn, f"bundle {bundle.bundle_id} changed since the stop event "
                         "was read; nothing written") as tx:
            tx.update(Item(f"BUNDLE#{bundle.bundle_id}"),
                      actions=_bundle_actions(target, t, retry_at), condition=cond)
            _update_jobs(tx, updates, bundle.bundle_id, t)  # a bundle has at most 99 jobs
        bundle.state = target

    def save_checkpoint(self, fence: Fence, job_id: str, checkpoint: dict[str, Any]) -> None:
        t = now()
        with transaction(self._conn, f"task {fence.task_arn} lost bundle {fence.bundle_id}; "
                         "checkpoint not written", job_id=job_id) as tx:
            tx.condition_check(Item, f"BUNDLE#{fence.bundle_id}", condition=_fenced(fence))
            tx.update(Item(f"JOB#{job_id}"),
                      actions=[Item.checkpoint.set(checkpoint), Item.updated_at.set(t)],
                      condition=(Item.state == str(JobState.RUNNING))
                      & (Item.bundle_id == fence.bundle_id))
