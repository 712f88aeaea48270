"""What every Store role shares: the table, the clock, the reads, and the write helpers that
turn a lost condition into a ``ConflictError`` saying what was lost."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from dispatcher.domain.bundle_sizes import BundleSizes
from dispatcher.domain.bundles import ACTIVE_BUNDLE_STATES, Bundle
from dispatcher.domain.costs import Usage
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.jobs import Job, JobState, Rejection, now
from dispatcher.ports.table import (
    Absent,
    Action,
    Add,
    ConditionFailed,
    Delete,
    Eq,
    Op,
    Put,
    Record,
    Set,
    Table,
    TableUnavailable,
    TransactionCancelled,
    Update,
    transient,
)
from dispatcher.store import codec as r
from dispatcher.store.values import JobOutcomes, TaskPointer

log = logging.getLogger(__name__)

# LONGJOBS_RETENTION_DAYS's default: how long finished jobs stay queryable.
DEFAULT_RETENTION_DAYS = 30.0


T = TypeVar("T")
U = TypeVar("U")


def _told(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning("table call failed for a moment; trying again",
                extra={"error": repr(exc), "try": state.attempt_number})


def pack_groups(units: Iterable[U], items_of: Callable[[U], int], bytes_of: Callable[[U], int],
                max_items: int, max_bytes: int) -> list[list[U]]:
    """``units`` in order, grouped greedily for transactions: a group closes before the unit
    that would take it past ``max_items`` actions or ``max_bytes``; a unit is never split."""
    groups: list[list[U]] = []
    items = size = 0
    for unit in units:
        u_items, u_size = items_of(unit), bytes_of(unit)
        if not groups or items + u_items > max_items or size + u_size > max_bytes:
            groups.append([])
            items = size = 0
        groups[-1].append(unit)
        items += u_items
        size += u_size
    return groups


def status(status_key: str, t: float, at: float | None = None) -> list[Action]:
    """The actions of a state change: state, index keys (``at``, default ``t``), updated_at."""
    return [Set("state", r.state_of(status_key)), Set("status_key", status_key),
            Set("status_at", r.iso(t if at is None else at)), Set("updated_at", t)]


def job_state(job_id: str, target: JobState, t: float, steps: int = 1) -> list[Action]:
    """The actions of a job's state change: state, index key, updated_at, and its sequence
    number advanced by ``steps`` (the transitions written at once: 2 for a start and an end
    written together). Every write that changes a job's state goes through here, so the
    sequence its state-change events carry (:mod:`dispatcher.domain.job_events`) costs no
    call of its own: it is part of the write that changes the state."""
    return [Set("state", str(target)), Set("status_key", r.job_status(target, job_id)),
            Set("updated_at", t), Add("sequence", steps)]


@dataclass(frozen=True)
class TableRetry:
    """How a store transaction that failed for a moment (:func:`transient`: throttled, a 5xx,
    a conflict with another request) is tried again before its caller hears of it: jittered
    exponential waits (each random up to ``first_wait`` doubled per try, at most ``max_wait``
    seconds), ``attempts`` in all: at most 1.5 s of waiting with the defaults, beside
    botocore's own quick retries of throttling and 5xx. Short on purpose: the tick must record
    and delete a message well within LONGJOBS_HOLD_SECONDS, and what still fails is given back
    to the queue at once."""

    attempts: int = 5
    first_wait: float = 0.1
    max_wait: float = 2.0
    sleep: Callable[[float], None] = time.sleep


class Reads:
    """Reads every role needs (strongly consistent, except the index queries)."""

    table_retry = TableRetry()
    # How an operator's retry packs the jobs it retries into bundles, as admission would
    # (dispatcher.store.job_ops.retry_groups): the composition root and the client set the
    # deployment's settings; the settings' defaults otherwise.
    bundle_sizes = BundleSizes()

    def __init__(self, table: Table, clock: Callable[[], float] | None = None, *,
                 retention_days: float = DEFAULT_RETENTION_DAYS,
                 table_retry: TableRetry | None = None) -> None:
        self.table = table
        self.clock: Callable[[], float] = clock or now
        self.retention_days = retention_days
        if table_retry is not None:
            self.table_retry = table_retry

    def change_versioned(self, pk: str, change: Callable[[Record | None], Record],
                         busy: Callable[[], Exception]) -> None:
        """Rewrite one item an operator changes whole (the tenants' policies, the rate
        limits): ``change`` gets the item as read (None: none yet) and returns the item to
        put; the put is conditional on the ``version`` read, and is read and applied again
        when another change came between (five times, then ``busy()`` is raised): two changes
        made at once never lose one."""
        for _ in range(5):
            rec = self.table.get(pk)
            new = change(rec)
            version = int(rec.version or 0) if rec is not None else 0
            new.version = version + 1
            try:
                self.table.write(Put(new, Absent() if rec is None else Eq("version", version)))
            except ConditionFailed:
                continue  # another change came first: read it and apply this one on top
            return
        raise busy()

    def _expiry(self, t: float) -> int | None:
        """``expires_at`` of an item that reaches its end now (a terminal job, a REJECTED
        record, a DONE bundle): DynamoDB's TTL deletes it after the retention period. None
        (kept forever) when the retention is 0.

        TTL only on what is finished: no item a live, pending or scheduled job needs ever
        carries ``expires_at``, so no clock, however far ahead, lets DynamoDB delete it
        (``tests/twins/test_ttl.py`` checks this after every step of a mixed life). Every
        ``expires_at`` the store writes, and why it is safe:

        - a job: set only with a terminal state (SUCCEEDED, FAILED, CANCELLED: ``job_actions``,
          ``fail_overdue``, ``_cancel_now``); a retry (the only way out of FAILED/CANCELLED)
          removes it in the same write. Bundle-mates never need a finished job's item: their
          reads skip a job that is gone.
        - a REJECTED record: never admitted; nothing refers to it.
        - a bundle: set only with DONE, which is final (``bundle_actions``, ``_cancel_now``,
          the commit of a recording that kept no job).
        - a page (``PAGE#``): written without one, however far ahead its bundle is scheduled;
          it gets one in its bundle's DONE write (``state_writes.page_expiry``): in the same
          transaction when it has room, else in the transactions right after it, as DONE is
          final (a crash between only keeps them). No extra call where there is room; one per
          100 pages where there is not.
        - a task's pointer (``TASK#``): written without one, however long its jobs run; the
          write that moves its bundle off that task (DONE, or PENDING to rerun elsewhere) sets
          it (``state_writes.pointer_expiry``), one small item in a transaction made anyway.
        - a launch (``LAUNCH#``): only when it goes DONE (``finish_launch``); a STARTING one,
          which a crashed tick's recovery reads, has none.
        - the lease: none (one item, rewritten every tick).
        - a link (``WAIT#``): one at its making, moved on while its dependent waits
          (``waiters.Waiters.refresh_links``), so it outlives the wait; once its dependent
          is released or cancelled, nothing needs it.
        """
        return int(t + self.retention_days * 86400) if self.retention_days > 0 else None

    def _expires(self, t: float) -> list[Action]:
        """The action setting ``expires_at`` (none when items are kept forever)."""
        expires_at = self._expiry(t)
        return [] if expires_at is None else [Set("expires_at", expires_at)]

    # -- write helpers --------------------------------------------------------------------------
    def _transact_retrying(self, ops: list[Op], patience: TableRetry | None = None) -> None:
        """One transaction, tried again (:attr:`table_retry`, or ``patience``'s tries and
        waits on its sleep) while it fails for a moment; the last failure is raised as it is
        (its code and per-item reasons say why).

        Every try of these same ops carries one ClientRequestToken, so a try after an
        ambiguous failure (a 5xx, a lost connection: it may have committed) is done at most
        once by DynamoDB, and succeeds instead of finding its own items. The callers'
        conditions (``Absent()`` on the items a recording creates, the state fences) guard
        what the token cannot: a twin or endpoint that ignores tokens, a retry after its
        10 minutes, another tick. A definite cancellation wrote nothing, so the next try
        gets a new token (DynamoDB promises replays only of a request that succeeded) — but
        only while no earlier try was ambiguous: once one may have committed, every later try
        keeps its token, else a cancellation between (a conflict, a throttled replay) would
        send the ops afresh and apply an unconditioned ``Add`` twice."""
        token = uuid.uuid4().hex
        ambiguous = False

        def once() -> None:
            nonlocal token, ambiguous
            try:
                self.table.transact(ops, token=token)
            except TransactionCancelled:
                if not ambiguous:
                    token = uuid.uuid4().hex
                raise
            except Exception:
                ambiguous = True
                raise

        def tell(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning("table transaction failed for a moment; trying again",
                        extra={"error": repr(exc), "try": state.attempt_number,
                               "code": exc.code if isinstance(exc, TableUnavailable) else None,
                               "reasons": getattr(exc, "reasons", None)})

        self._patiently(patience or self.table_retry, once, before_sleep=tell)

    def _transact(self, ops: list[Op], lost: str, job_id: str | None = None) -> None:
        """One transaction (tried again while it fails for a moment); a failed condition
        becomes ConflictError(lost). A cancellation for another reason (TransactionConflict,
        throttling) that persists is re-raised as it is."""
        try:
            self._transact_retrying(ops)
        except TransactionCancelled as exc:
            if exc.failed_conditions():
                raise ConflictError(lost, job_id=job_id) from None
            raise

    def _write(self, op: Put | Update | Delete, lost: str,
               job_id: str | None = None) -> Record | None:
        try:
            return self.table.write(op)
        except ConditionFailed:
            raise ConflictError(lost, job_id=job_id) from None

    def _patiently(self, patience: TableRetry, call: Callable[..., T], *args: Any,
                   before_sleep: Callable[[RetryCallState], None] | None = None) -> T:
        """``call(*args)``, tried again while the table fails it for a moment
        (:func:`transient`: throttled past botocore's own attempts, a 5xx) as ``patience``
        says, waiting on :attr:`table_retry`'s sleep (the model's is virtual); any other
        error (a failed condition's ConflictError) at once; each wait logged
        (``before_sleep``, else a warning naming the error). Only for a call a second try
        leaves harmless: a read, a write whose condition refuses a second effect, a
        transaction with its token."""
        return Retrying(retry=retry_if_exception(transient),
                        stop=stop_after_attempt(patience.attempts),
                        wait=wait_random_exponential(multiplier=patience.first_wait,
                                                     max=patience.max_wait),
                        sleep=self.table_retry.sleep, before_sleep=before_sleep or _told,
                        reraise=True)(call, *args)

    # -- reads ----------------------------------------------------------------------------------
    def get_job(self, job_id: str) -> Job | None:
        rec = self.table.get(r.job_key(job_id))
        return r.record_job(rec) if rec else None

    def get_jobs(self, job_ids: list[str]) -> list[Job]:
        """The jobs that exist, in the order asked."""
        found = {rec.pk: rec for rec in self.table.get_many([r.job_key(j) for j in job_ids])}
        return [r.record_job(found[r.job_key(j)]) for j in dict.fromkeys(job_ids)
                if r.job_key(j) in found]

    def get_bundle(self, bundle_id: str) -> Bundle | None:
        """The bundle with all its job ids (read from its pages if it has any)."""
        rec = self.table.get(r.bundle_key(bundle_id))
        if rec is None:
            return None
        bundle = r.record_bundle(rec)
        bundle.job_ids = self.job_ids_of(bundle)
        return bundle

    def job_ids_of(self, bundle: Bundle) -> list[str]:
        """A bundle's job ids in bundle order. A paged bundle read from the status index has
        none on its item: they are read from its pages (one BatchGetItem per 100 pages). A
        page that is missing was never written (its transaction did not commit): its jobs
        were not recorded in this bundle. Jobs handed to it while it ran come last: they
        are its jobs too (a rerun runs them, a settle settles them)."""
        if not bundle.pages or bundle.job_ids:
            own = list(bundle.job_ids)
        else:
            keys = [r.page_key(bundle.bundle_id, n) for n in range(bundle.pages)]
            found = {rec.pk: rec for rec in self.table.get_many(keys)}
            own = [j for k in keys if k in found for j in found[k].job_ids or ()]
        return list(dict.fromkeys([*own, *bundle.handed_jobs]))

    def bundle_for_task(self, task_arn: str) -> Bundle | None:
        """The bundle a task was assigned, read strongly consistent (the runner polls this)."""
        pointer = self.task_pointer(task_arn)
        return self.get_bundle(pointer.bundle_id) if pointer is not None else None

    def task_pointer(self, task_arn: str) -> TaskPointer | None:
        """A task's pointer: the bundle it runs or ran last, and what its runner counted of
        how their jobs ended (:class:`~dispatcher.store.values.TaskPointer`); None if no
        bundle was assigned to it. One read."""
        pointer = self.table.get(r.task_key(task_arn))
        if pointer is None or not pointer.bundle_id:
            return None
        ended = JobOutcomes(int(pointer.ended_succeeded or 0), int(pointer.ended_failed or 0),
                            Usage.of(pointer.ended_usage)) \
            if pointer.ended_bundle == pointer.bundle_id else None
        took = bool(pointer.ran_succeeded or pointer.ran_failed)
        return TaskPointer(pointer.bundle_id, JobOutcomes(int(pointer.ran_succeeded or 0),
                                                          int(pointer.ran_failed or 0),
                                                          Usage.of(pointer.ran_usage)), ended,
                           settled=pointer.cost is not None,
                           before_usage_known=pointer.ran_usage is not None or not took,
                           ended_usage_known=ended is None or pointer.ended_usage is not None)

    def get_rejection(self, key: str) -> Rejection | None:
        rec = self.table.get(r.rejection_key(key))
        return r.record_rejection(rec) if rec else None

    def active_count(self) -> int:
        """How many bundles are active (the running tasks), by COUNT queries: no item read."""
        return sum(self.table.count(r.bundle_status(s)) for s in ACTIVE_BUNDLE_STATES)

    def active_bundles(self) -> list[Bundle]:
        """Bundles launched (or being launched) and not finished: the running-task count, and
        the candidates reconciliation checks against ECS."""
        return [r.record_bundle(rec) for s in ACTIVE_BUNDLE_STATES
                for rec in self.table.query(r.bundle_status(s))]
