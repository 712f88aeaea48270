"""Urgent jobs handed to running bundles (dispatcher/stages/handoff.py): the table's side.

A handed job *moves* into the running bundle: one transaction sets its ``bundle_id`` to the
host, appends it to the host's ``handed_jobs`` (counted in ``handed``) and takes it out of the
waiting bundle it was recorded in. From then on it is one of the host's jobs like any other:
its runner's writes are fenced by the host's claim, a settle of the host (a crash, a stop)
reruns or fails it with the rest, a rerun of the host runs it (``Reads.job_ids_of`` lists it).
It is never in two bundles, so it can never have two live runs, and it is never lost:

- the host must be RUNNING on the attempt and task read, with a runner that takes handed jobs
  (``handed`` set at its claim) and the count read (two hand-offs cannot overwrite each other);
- the job must be PENDING in the waiting bundle (a cancel meanwhile leaves it there);
- the waiting bundle must still be PENDING on the attempt read (not being launched);
- every write that ends or settles the host checks ``handed`` against what it read
  (``RunnerStore.apply``, ``StageStore.settle``), so none can close it over a job it missed.
"""

from __future__ import annotations

from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState, joined_timeout
from dispatcher.ports.table import (
    MAX_TRANSACTION_ITEMS,
    Action,
    And,
    Eq,
    Op,
    Remove,
    Set,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import Reads
from dispatcher.store.state_writes import bundle_actions

# One transaction: the host, the waiting bundle and the jobs.
JOBS_PER_HANDOFF = MAX_TRANSACTION_ITEMS - 2
# Jobs one bundle may be handed over its life: its item keeps their ids (128 characters at
# most each: 64 KB), under DynamoDB's 400 KB with the rest of the item.
MAX_HANDED = 500
# A hand-off that fails because a job moved on is tried again without it, at most this often.
HANDOFF_TRIES = 3


class Handing(Reads):
    """The hand-off of waiting urgent jobs to running bundles (the tick)."""

    def full_bundles(self, bundle_ids: list[str]) -> list[Bundle]:
        """Bundles read whole (the status index does not hold what a hand-off checks:
        ``handed`` and ``handed_jobs``), one BatchGetItem per 100."""
        return [r.record_bundle(rec) for rec in
                self.table.get_many([r.bundle_key(b) for b in bundle_ids])]

    def full_bundles_now(self, bundle_ids: list[str]) -> list[Bundle]:
        """As :meth:`full_bundles`, and for each that ended DONE on a task and is of a batch,
        the bundle its task runs now (a follow-on it took, dispatcher.store.follow_ons): the
        pointers, and those bundles, one BatchGetItem each per 100."""
        bundles = self.full_bundles(bundle_ids)
        moved = [r.task_key(b.task_arn) for b in bundles
                 if b.state == BundleState.DONE and b.batch is not None and b.task_arn]
        if not moved:
            return bundles
        known = {b.bundle_id for b in bundles}
        now = [rec.bundle_id for rec in self.table.get_many(moved)
               if rec.bundle_id and rec.bundle_id not in known]
        return bundles + self.full_bundles(list(dict.fromkeys(now)))

    def hand(self, source: Bundle, job_ids: list[str], host: Bundle) -> list[str]:
        """Move ``job_ids`` (at most JOBS_PER_HANDOFF) of the PENDING bundle ``source`` into
        the running bundle ``host``; return those moved. A job no longer PENDING there (a
        cancel) is left in ``source``; if ``host`` or ``source`` changed since read, nothing
        moves. ``host`` and ``source`` are updated to what was written. A transaction the
        table refuses for a moment (throttled, a conflict) past :attr:`table_retry`'s tries
        raises its TableUnavailable or TransactionCancelled, nothing moved (or, after an
        ambiguous failure, perhaps moved: the conditions of a later hand-off and of the
        host's writes read it from the table)."""
        moving = [j for j in job_ids[:JOBS_PER_HANDOFF] if j in source.job_ids]
        room = MAX_HANDED - len(host.handed_jobs)
        moving = moving[:max(0, room)]
        if source.state != BundleState.PENDING or host.state != BundleState.RUNNING \
                or not host.takes_handed or source.pages or not moving:
            return []
        for _ in range(HANDOFF_TRIES):
            ops = self._handoff(source, moving, host)
            try:
                # Throttled, or in conflict with another request (the host's heartbeat): tried
                # again as the store's other transactions are.
                self._transact_retrying(ops)
            except TransactionCancelled as exc:
                failed = exc.failed_conditions()
                if not failed:
                    raise  # refused for a moment past the tries: the caller leaves them
                if 0 in failed or 1 in failed:
                    return []  # the host or the waiting bundle moved on: a next tick looks
                gone = {moving[i - 2] for i in failed}
                moving = [j for j in moving if j not in gone]
                if not moving:
                    return []
                continue
            host.handed_jobs = [*host.handed_jobs, *moving]
            host.timeout_seconds = joined_timeout(host.timeout_seconds,
                                                  source.timeout_seconds)
            source.job_ids = [j for j in source.job_ids if j not in moving]
            if not source.job_ids:
                source.state = BundleState.DONE
            return moving
        return []

    def _handoff(self, source: Bundle, moving: list[str], host: Bundle) -> list[Op]:
        t = self.clock()
        handed = [*host.handed_jobs, *moving]
        # The handed jobs' timeouts join the host's (the source's smallest stands for theirs:
        # a look for overdue jobs made for nothing, never one missed).
        joined = joined_timeout(host.timeout_seconds, source.timeout_seconds)
        host_op = Update(r.bundle_key(host.bundle_id), [
            Set("handed_jobs", handed), Set("handed", len(handed)),
            Set("timeout_seconds", joined) if joined is not None else Remove("timeout_seconds")],
            And(Eq("state", str(BundleState.RUNNING)), Eq("attempt", host.attempt),
                Eq("task_arn", host.task_arn), Eq("handed", len(host.handed_jobs))))
        rest = [j for j in source.job_ids if j not in moving]
        actions: list[Action]
        if rest:
            actions = [Set("job_ids", rest), Set("updated_at", t)]
        else:  # every job of it moved: it has nothing left to launch
            lifecycle.check_bundle(source.bundle_id, source.state, BundleState.DONE)
            actions = bundle_actions(BundleState.DONE, t, None, self._expiry(t))
        source_op = Update(r.bundle_key(source.bundle_id), actions,
                           And(Eq("state", str(BundleState.PENDING)),
                               Eq("attempt", source.attempt)))
        jobs: list[Op] = [Update(r.job_key(j), [Set("bundle_id", host.bundle_id),
                                                Set("updated_at", t)],
                                 And(Eq("state", "PENDING"), Eq("bundle_id", source.bundle_id)))
                          for j in moving]
        return [host_op, source_op, *jobs]
