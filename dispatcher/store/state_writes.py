"""The table ops the roles' writes are made of: a job update as actions (each state change
checked against the lifecycle) and its size, the transactions a run of updates is cut into, a
bundle's move to a state, and the expiry its task's pointer and its pages get once it is done
with. The runner (:mod:`dispatcher.store.runner`), the stop handler's settle and the operator's
actions build their transactions from these, so that a job changes state one way whoever
changes it.
"""

from __future__ import annotations

import json
import logging

from dispatcher.domain import lifecycle, sizes
from dispatcher.domain.bundles import BundleState
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.ports.table import (
    MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_ITEMS,
    Action,
    Add,
    And,
    Eq,
    Op,
    Remove,
    Set,
    Table,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import job_state, status
from dispatcher.store.values import JobOutcomes, JobUpdate

log = logging.getLogger(__name__)

# One transaction: the fence check or the bundle's update, plus the job updates, with room to
# spare: at most 100 actions per TransactWriteItems (see dispatcher.ports.table).
JOBS_PER_TRANSACTION = MAX_TRANSACTION_ITEMS - 2
# ... and under TransactWriteItems' 4 MB in all, with room for names and the other attributes:
# 98 results of up to 64 KB each would be 6 MB.
# https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html
UPDATES_BYTES = MAX_TRANSACTION_BYTES - 694_304  # 3,500,000
# A page item at most (PAGE#<bundle>#<n>): a transaction's worth of job ids of up to 128
# characters each (dispatcher.domain.message), and its other attributes.
PAGE_ITEM_BYTES = JOBS_PER_TRANSACTION * 129 + 1024


def job_actions(u: JobUpdate, t: float, expires_at: int | None = None) -> list[Action]:
    """The actions of one job update; a job reaching a terminal state gets ``expires_at``."""
    if u.via is not None:
        lifecycle.check_job(u.job_id, u.source, u.via)
        lifecycle.check_job(u.job_id, u.via, u.target)
    elif u.source != u.target:  # same state: bookkeeping only (budgets, history)
        lifecycle.check_job(u.job_id, u.source, u.target)
    # A same-state update is bookkeeping, not a state change: its sequence stays.
    steps = 2 if u.via is not None else 1 if u.source != u.target else 0
    actions: list[Action] = job_state(u.job_id, u.target, t, steps) if steps else [
        Set("state", str(u.target)), Set("status_key", r.job_status(u.target, u.job_id)),
        Set("updated_at", t)]
    if u.attempts_delta:
        actions.append(Add("attempts", u.attempts_delta))
    if u.infra_delta:
        actions.append(Add("infra_attempts", u.infra_delta))
    # What longjobs writes itself is clipped to its budget (dispatcher.domain.sizes), so no
    # update can overfill the job's item; the result was measured against its own by the runner.
    if u.history is not None:
        actions.append(Set("history", sizes.bound_history(u.history)))
    if u.result is not None:
        actions.append(Set("result", u.result))
    if u.error is not None:
        actions.append(Set("error", sizes.bound_error(u.error)))
    if u.settled_by is not None:
        actions.append(Set("settled_by", u.settled_by))
    if u.drop_checkpoint:
        actions += [Remove("checkpoint"), Remove("progress")]
    if u.live_task is not None:
        actions.append(Set("live_task", u.live_task))
    if u.reason is not None:
        actions.append(Set("reason", sizes.clip_text(u.reason, sizes.MAX_REASON_BYTES)))
    elif u.target == JobState.SUCCEEDED:
        actions.append(Remove("reason"))  # an earlier attempt's reason no longer applies
    # A finished job whose run goes on in its task (``live_task``) is not finished with yet: it
    # gets its expiry when that task's stop is handled (StageStore.end_live_runs), so TTL
    # never deletes the record that keeps a retry or a resubmit from running beside it.
    if expires_at is not None and u.target in TERMINAL_JOB_STATES and u.live_task is None:
        actions.append(Set("expires_at", expires_at))
    return actions


def update_bytes(u: JobUpdate) -> int:
    """An upper estimate of what one job update writes (its JSON values, and 1 KB for the
    rest: keys, states, numbers, the reason)."""
    values = [v for v in (u.result, u.error, u.history) if v is not None]
    return 1024 + (len(json.dumps(values, default=str)) if values else 0) + \
        len((u.reason or "").encode())


def update_chunks(updates: list[JobUpdate]) -> list[list[JobUpdate]]:
    """Job updates cut into transactions' worth: at most JOBS_PER_TRANSACTION and
    UPDATES_BYTES each, in order; at least one (empty) chunk, for the bundle's own write."""
    chunks: list[list[JobUpdate]] = [[]]
    size = 0
    for u in updates:
        n = update_bytes(u)
        if chunks[-1] and (len(chunks[-1]) >= JOBS_PER_TRANSACTION or size + n > UPDATES_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(u)
        size += n
    return chunks


def job_updates(updates: list[JobUpdate], bundle_id: str, t: float,
                expires_at: int | None = None) -> list[Op]:
    """Each job changes only from the state it was read in, and only within its own bundle
    (a retried job moved to another bundle is not ours any more)."""
    return [Update(r.job_key(u.job_id), job_actions(u, t, expires_at),
                   And(Eq("state", str(u.source)), Eq("bundle_id", bundle_id)))
            for u in updates]


def bundle_actions(target: BundleState, t: float, retry_at: float | None,
                   expires_at: int | None = None, key: str | None = None) -> list[Action]:
    """A bundle's move to ``target`` (under the index key ``key``, by default its state's)."""
    at = retry_at if retry_at is not None else t
    actions = status(key or r.bundle_status(target), t, at=at)
    if target == BundleState.PENDING:
        actions += [Set("next_attempt_at", at), Remove("launch_id")]
    if target == BundleState.DONE and expires_at is not None:
        actions.append(Set("expires_at", expires_at))
    return actions


def pointer_expiry(task_arn: str | None, expires_at: int | None,
                   ended: tuple[str, JobOutcomes] | None = None) -> list[Op]:
    """The update giving a task's pointer (``TASK#<arn>``) its expiry, made by the write that
    moves the bundle off that task (DONE, or PENDING to rerun elsewhere). Until then the
    pointer is needed: by the runner looking for its bundle, by the task's stop event, by
    reconciliation; however long the task's jobs run. It costs one small item in that write's
    transaction (which always has room for it), never a call of its own. Unconditional: a
    pointer is written with its bundle's LAUNCHED state, so it exists.

    ``ended``: the bundle moved DONE and how its runner ended its jobs, when it may vouch for
    them (:class:`~dispatcher.store.values.TaskPointer`), carried by the same update."""
    if task_arn is None:
        return []
    counted = [Set("ended_bundle", ended[0]), Set("ended_succeeded", ended[1].succeeded),
               Set("ended_failed", ended[1].failed),
               Set("ended_usage", ended[1].usage.as_dict())] if ended is not None else []
    expiry = [Set("expires_at", expires_at)] if expires_at is not None else []
    if not counted and not expiry:
        return []
    return [Update(r.task_key(task_arn), [*expiry, *counted])]


def page_expiry(bundle_id: str, pages: int, expires_at: int | None) -> list[Op]:
    """The updates giving a DONE bundle's pages its expiry. Pages are written without one:
    a bundle may wait for its ``not_before``, for capacity or for reruns for any time, and
    its jobs are read from its pages until it is DONE (and DONE is final)."""
    if expires_at is None:
        return []
    return [Update(r.page_key(bundle_id, n), [Set("expires_at", expires_at)])
            for n in range(pages)]


def fit_pages(page_ops: list[Op], items: int,
              chunk: list[JobUpdate]) -> tuple[list[Op], list[list[Op]]]:
    """``page_ops`` split into those that fit in the DONE transaction (which holds ``items``
    items, ``chunk``'s job updates among them) and transactions of their own, to be made
    after it commits (:func:`expire_pages_later`): a bundle whose last write has room pays no
    call for its pages, a large one about one call per 100 pages (9,800 jobs)."""
    by_bytes = (UPDATES_BYTES - sum(update_bytes(u) for u in chunk)) // PAGE_ITEM_BYTES
    room = max(0, min(MAX_TRANSACTION_ITEMS - items, by_bytes))
    rest = page_ops[room:]
    return page_ops[:room], [rest[i:i + MAX_TRANSACTION_ITEMS]
                             for i in range(0, len(rest), MAX_TRANSACTION_ITEMS)]


def expire_pages_later(table: Table, bundle_id: str, transactions: list[list[Op]]) -> None:
    """Give the rest of a DONE bundle's pages their expiry. The bundle is DONE already, so
    this can only come late, never early: if it fails (or the process dies first), those
    pages are kept, which costs storage and never a job; the failure is logged, not raised,
    as what it follows (a runner's last write, a stop's settle) has succeeded."""
    for ops in transactions:
        try:
            table.transact(ops)
        except Exception as exc:  # a cleanup: logged, and the pages are kept
            log.warning("the pages of a DONE bundle were not set to expire; they are kept",
                        extra={"bundle_id": bundle_id, "error": repr(exc)})
            return
