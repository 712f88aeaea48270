"""Cancelling jobs of an active bundle (LAUNCHING, LAUNCHED or RUNNING): only its task's runner
writes the jobs it runs, so a cancel *requests* each job's stop on the bundle's item
(``cancel_jobs``), which the runner reads at its claim and at each heartbeat. The item keeps at
most ``MAX_CANCEL_REQUESTS`` of them (:mod:`dispatcher.domain.sizes`); a cancel of more jobs of
one bundle than that (an array's children, a bulk cancel) keeps its word all the same:

- the requests go first to the jobs its task runs (RUNNING, or running as its last heartbeat
  said), then to the PENDING ones in bundle order: those its runner reaches first, and so the
  ones it may have read already (it reads a bundle's jobs a page at a time, as it starts them);
- every PENDING job past the room is written CANCELLED in the table, from PENDING and still of
  that bundle (the same conditional write as a job cancelled before its launch): the runner
  skips a job it reads in a finished state, and the table refuses its start or result of it.
  These writes are made before the requests, so that the runner, told of the requests, does
  not hurry past the requested jobs to pages the writes have not reached;
- a RUNNING job past the room cannot be stopped: it is reported (:class:`NotCancelled`), never
  dropped, and runs on until its handler ends. So is a PENDING job past the room that its
  runner may hold read already (among the bundle's first PENDING jobs: :data:`RUNNER_HOLDS`
  and those its last heartbeat said run): written CANCELLED all the same, it may still run
  once (its result is then refused).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from dispatcher.domain import sizes
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.cancels import NotCancelled
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import ConditionFailed, Record, Table
from dispatcher.store import codec as r
from dispatcher.store import job_ops
from dispatcher.store.runner import JOB_PAGE
from dispatcher.store.values import PageOutcome

# PENDING jobs of its bundle a runner may hold read and not started yet, beyond those it runs:
# the page it reads (JOB_PAGE) and up to a page set aside for a kind at its cap
# (job_runner/schedule.py, HELD). They are the bundle's first PENDING jobs in bundle order.
RUNNER_HOLDS = 2 * JOB_PAGE


class TaskCancels(Protocol):
    """What a cancel in tasks uses of :class:`dispatcher.store.OperatorStore`."""

    table: Table
    clock: Callable[[], float]

    def _expiry(self, t: float) -> int | None: ...
    def get_jobs(self, job_ids: list[str]) -> list[Job]: ...
    def job_ids_of(self, bundle: Bundle) -> list[str]: ...
    def _commit_units(self, units: list[job_ops.Unit]) -> tuple[set[str], list[str]]: ...


def cancel_in_tasks(store: TaskCancels, asks: dict[str, list[str]], jobs: dict[str, Job],
                    recs: dict[str, Record], bundles: dict[str, Bundle], *,
                    reason: str | None = None, by: str | None = None
                    ) -> tuple[dict[str, PageOutcome], list[str]]:
    """Cancel ``asks`` (bundle id -> ids of its jobs, each checked by
    :func:`job_ops.check_cancel`), ``jobs``, ``recs`` and ``bundles`` as read: each job's
    outcome, and the jobs to do on their own (their bundle or job moved on meanwhile)."""
    out: dict[str, PageOutcome] = {}
    alone: list[str] = []
    t = store.clock()
    for bid, ids in asks.items():
        rec = recs[r.bundle_key(bid)]
        standing = list(rec.cancel_jobs or [])
        ask = [j for j in dict.fromkeys(ids) if j not in standing]
        room = max(0, sizes.MAX_CANCEL_REQUESTS - len(standing))
        if len(ask) > room:
            order = store.job_ids_of(bundles[bid])
            ask, past = _first_asked(ask, room, jobs, rec, order)
            running = set(rec.running_jobs or ())
            now = [jobs[j] for j in past
                   if jobs[j].state == JobState.PENDING and j not in running]
            full = f"bundle {bid} already holds the most cancel requests its item keeps " \
                f"({sizes.MAX_CANCEL_REQUESTS})"
            for j in past:
                if jobs[j] not in now:
                    out[j] = PageOutcome(j, "error", NotCancelled(
                        f"its task runs it and {full}; it runs on until its handler ends",
                        job_id=j))
            held = _may_be_held(store, order, RUNNER_HOLDS + len(running)) if now else set()
            acted, refused = store._commit_units([job_ops.Unit([j.job_id], [job_ops.cancel_op(
                j, t=t, expires_at=store._expiry(t), reason=reason, by=by, in_bundle=bid)], [])
                for j in now])
            out.update({j: PageOutcome(j, "error", NotCancelled(
                f"written CANCELLED, but its task may have read it before the cancel and "
                f"{full}: it may still run once (its result is then not kept)", job_id=j))
                if j in held else PageOutcome(j, "acted") for j in acted})
            alone += refused  # it started meanwhile: a cancel of its own says what it can
        asked = [j for j in dict.fromkeys(ids) if j in standing] + ask
        op, over = job_ops.request_op(bid, standing, ask)
        out.update({j: PageOutcome(j, "error", exc) for j, exc in over.items()})
        try:
            if op is not None:
                store.table.write(op)
            out.update({j: PageOutcome(j, "requested") for j in asked if j not in over})
        except ConditionFailed:
            alone += [j for j in asked if j not in over]  # the bundle moved on: look again
    return out, alone


def _first_asked(ask: list[str], room: int, jobs: dict[str, Job], rec: Record,
                 order: list[str]) -> tuple[list[str], list[str]]:
    """``ask`` cut into the ``room`` jobs that get a request and the rest: the running ones
    first, then in bundle ``order`` (the order its runner starts them in)."""
    running = set(rec.running_jobs or ())
    at = {j: i for i, j in enumerate(order)}
    ranked = sorted(ask, key=lambda j: (jobs[j].state != JobState.RUNNING and j not in running,
                                        at.get(j, len(at))))
    return ranked[:room], ranked[room:]


def _may_be_held(store: TaskCancels, order: list[str], hold: int) -> set[str]:
    """The bundle's first ``hold`` PENDING jobs in bundle ``order``: those its runner may have
    read and not started, or started since its last heartbeat (a start is written with its
    result). The jobs a cancel wrote CANCELLED in the table count as PENDING still (its
    runner may hold them too), so that a cancel of many pages does not slide past them.
    Read a page at a time, as far as they go."""
    held: list[str] = []
    for start in range(0, len(order), JOB_PAGE):
        held += [j.job_id for j in store.get_jobs(order[start:start + JOB_PAGE])
                 if j.state == JobState.PENDING or (j.state == JobState.CANCELLED
                 and (j.reason or "").startswith(job_ops.BEFORE_ITS_TASK))]
        if len(held) >= hold:
            break
    return set(held[:hold])
