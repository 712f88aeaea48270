"""Release: a job that waits for others is released, or cancelled, as soon as they decide.

A job recorded with ``depends_on`` is held (its bundle of one due at ``DEPENDENTS_HELD_AT``, it
takes no slot). Right after it is recorded, :meth:`Dependents.recorded` links it to each job it
waits for (:mod:`dispatcher.store.waiters`) and judges it at once: dependencies that had
already ended (or were REJECTED) decide it in that tick. Otherwise the end of the last one
decides it: every write that ends a job with waiters shows in the table's stream, and
:meth:`Dependents.on_changes` (the stream's consumer: a function of its own on AWS, a thread
in local mode) follows that job's links to its dependents, reads their other dependencies,
and releases (due now: the next tick launches it) or cancels each one (the reason names the
dependency). Nothing reads the jobs that wait: a job's end costs a query of its own links,
and batched reads of its dependents, their bundles and their dependencies.

The look at every held dependent (:meth:`Dependents.sweep`, by the tick, once per
:data:`SWEEP_SECONDS`) is the backstop for what a link cannot see: a dependency recorded after
its dependent (SQS keeps no order between two messages: it is linked by the first sweep after
it is recorded), an unknown dependency's grace running out, and a link too new for the
eventually consistent index when its job ended (its stream record finds fewer links than its
``waiters``). A child ``A:i`` of an array is waited for as long as its array lives, and may be
recorded long after its dependent (:mod:`dispatcher.domain.dependencies`): the look reads the
links of the older dependents to the children they wait for that are recorded now, and links
those it finds missing. It cancels the held jobs that wait for each other (a producer's
client does not refuse a dependency not recorded yet, so two jobs can name each other), each
with the reason naming the cycle. It also moves on the expiry of the links of dependents that
have waited long (:meth:`~dispatcher.store.waiters.Waiters.refresh_links`), so no link expires
before the end it waits for.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dispatcher.domain import dependencies as deps
from dispatcher.domain.bundles import Bundle
from dispatcher.domain.dependencies import Dependency
from dispatcher.domain.errors import ConflictError
from dispatcher.domain.job_events import JOB_PREFIX, TableChange
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job
from dispatcher.ports.table import InvalidTransaction, TableUnavailable, TransactionCancelled
from dispatcher.stages.depends import Judgement, judge_all
from dispatcher.store import StageStore

log = logging.getLogger(__name__)

# How often the tick looks at every held dependent (see the module): the longest a dependent
# waits past its dependencies' end in the cases the links cannot see.
SWEEP_SECONDS = 300.0
# A look the table cut short is made again this soon (once a period: see give_back_sweep).
SWEEP_RETRY_SECONDS = 60.0
# Job ids a report names of what it cancelled or released (its log line stays small).
IDS_KEPT = 100


@dataclass
class DependentsStats:
    """What releasing and cancelling dependents did (a tick's, a stream batch's)."""

    released: list[str] = field(default_factory=list)  # held jobs now due
    # Held jobs cancelled as a dependency went against them (how many; the first ids).
    dependents_cancelled: int = 0
    dependents_cancelled_ids: list[str] = field(default_factory=list)
    swept: int = 0  # held dependents the look at every one read (0: no look this tick)
    # Ended jobs whose links the index did not show all of yet: left to the next sweep.
    links_missing: int = 0
    # Held jobs left as they were because the table failed (their judging, link, release or
    # cancel): the next look at them takes them up.
    table_failures: int = 0
    # When the look at every held dependent was last claimed (SWEEP#dependents' time), as the
    # tick knows it: from its lease, then as its own look left it; None: not known.
    sweep_at: float | None = None

    def add(self, other: DependentsStats) -> None:
        self.released += other.released[:max(0, IDS_KEPT - len(self.released))]
        self.dependents_cancelled += other.dependents_cancelled
        room = max(0, IDS_KEPT - len(self.dependents_cancelled_ids))
        self.dependents_cancelled_ids += other.dependents_cancelled_ids[:room]
        self.swept += other.swept
        self.links_missing += other.links_missing
        self.table_failures += other.table_failures


def ended_with_waiters(change: TableChange) -> str | None:
    """The id of the job a change ended, if that job has waiters; None for any other change
    (a write that changes no state, a job without waiters, an item that is no job)."""
    new, old = change.new, change.old
    if new is None or not str(new.get("pk", "")).startswith(JOB_PREFIX):
        return None
    state = new.get("state")
    if not new.get("waiters") or state not in TERMINAL_JOB_STATES:
        return None
    if old is not None and old.get("state") == state:
        return None  # a write that changes no state (a link's count on an ended job)
    return str(new["pk"])[len(JOB_PREFIX):]


class Dependents:
    """The release stage (see the module)."""

    def __init__(self, store: StageStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()
        # Recorded dependents whose dependencies were not all recorded when they were linked,
        # and those: a dependency recorded later in the same drain is linked after it.
        self._late: list[tuple[Bundle, Job, list[str]]] = []

    def recorded(self, bundle: Bundle, job: Job) -> DependentsStats:
        """``job`` was just recorded, held in ``bundle``: link it, then judge it. (Called by
        the record stage from the drain's threads.)"""
        stats = DependentsStats()
        unknown = self._store.link(job.job_id, _ids(job))
        if unknown:
            with self._lock:
                self._late.append((bundle, job, unknown))
        self.release([(bundle, job)], stats)
        return stats

    def link_late(self, stats: DependentsStats) -> None:
        """After a drain: link the dependents recorded in it to the dependencies recorded
        after them in it (a producer's job and the next one that waits for it often share a
        drain, recorded in parallel), and judge them again. What is still unknown is left to
        the look at every held dependent."""
        with self._lock:
            late, self._late = self._late, []
        if not late:
            return
        for _, job, unknown in late:
            self._link(job, unknown)
        self.release([(b, j) for b, j, _ in late], stats)

    def on_changes(self, feed: Sequence[TableChange]) -> DependentsStats:
        """The dependents of every job ``feed`` shows ending, released or cancelled if their
        dependencies now decide. Repeating a change does nothing more (each release and
        cancel is conditional on the job being held still)."""
        stats = DependentsStats()
        ended = {job_id: int(c.new.get("waiters") or 0) for c in feed
                 if c.new is not None and (job_id := ended_with_waiters(c)) is not None}
        waiting: dict[str, None] = {}
        for job_id, count in ended.items():
            found = self._store.waiting_for(job_id)
            if len(found) < count:
                stats.links_missing += 1
            waiting.update(dict.fromkeys(found))
        self.release(self._store.held_dependents(list(waiting)), stats)
        return stats

    def sweep(self, stats: DependentsStats) -> None:
        """Once per :data:`SWEEP_SECONDS` (the first tick after it passed): judge every held
        dependent, and link again the young ones (see the module)."""
        known = stats.sweep_at
        if known is not None and self._clock() - known < SWEEP_SECONDS:
            return  # the table would refuse the claim (claim_sweep's condition)
        stats.sweep_at = None  # another's look since, maybe: the claim's answer says
        claimed: float | None = None
        try:
            claimed = self._store.claim_sweep(SWEEP_SECONDS)
            if claimed is None:
                return
            stats.sweep_at = claimed
            held = self._store.held_dependents()
        except TableUnavailable as exc:  # the table's trouble: a later tick looks
            log.error("looking at the held dependents failed; a later tick looks again",
                      extra={"reason": exc.reason})
            self._give_back(claimed, stats)
            return
        stats.swept = len(held)
        failures = stats.table_failures
        young = self._clock() - deps.UNKNOWN_GRACE_SECONDS - 2 * SWEEP_SECONDS
        for _, job in held:
            if job.created_at >= young:  # a dependency unknown at its link may exist now
                self._link(job, _ids(job), stats)
        waiting = self._break_cycles(self.release(held, stats), stats)
        self._link_children([w for w in waiting if w[1].created_at < young], stats)
        try:  # the look every period sees each crossing (within two periods)
            self._store.refresh_links([j for _, j, _ in waiting], 2 * SWEEP_SECONDS)
        except TableUnavailable as exc:
            stats.table_failures += 1
            log.error("moving on the expiry of links failed; a later look moves it",
                      extra={"reason": exc.reason})
        if stats.table_failures > failures:  # left as they were: look again in a minute
            self._give_back(claimed, stats)

    def _break_cycles(self, waiting: list[tuple[Bundle, Job, Judgement]],
                      stats: DependentsStats) -> list[tuple[Bundle, Job, Judgement]]:
        """Cancel the held jobs that wait for each other (:func:`deps.cycles`), each with a
        reason naming such a cycle; the others of ``waiting``."""
        reasons = deps.cycles({j.job_id: _ids(j) for _, j, _ in waiting})
        for bundle, job, _ in waiting:
            if job.job_id in reasons:
                self._cancel(bundle, job, reasons[job.job_id], stats)
        return [w for w in waiting if w[1].job_id not in reasons]

    def _link_children(self, waiting: list[tuple[Bundle, Job, Judgement]],
                       stats: DependentsStats) -> None:
        """Link the held jobs of ``waiting`` (past the relinking of the young ones) to the
        array children they wait for that were recorded after they were linked (one read
        of those links), then judge again those that were: their dependencies are read after
        the link, so a child that ended meanwhile is seen (see store/waiters.py)."""
        pairs = [(child, job.job_id) for _, job, said in waiting for child in said.children]
        if not pairs:
            return
        try:
            missing = self._store.unlinked(pairs)
        except TableUnavailable as exc:  # the next look reads them again
            stats.table_failures += 1
            log.error("reading the links of held dependents failed; the next look reads them",
                      extra={"reason": exc.reason})
            return
        unlinked: dict[str, list[str]] = {}
        for child, dependent in missing:
            unlinked.setdefault(dependent, []).append(child)
        linked = [(b, j) for b, j, _ in waiting if j.job_id in unlinked
                  and len(self._link(j, unlinked[j.job_id], stats)) < len(unlinked[j.job_id])]
        if linked:
            self.release(linked, stats)

    def _give_back(self, claimed: float | None, stats: DependentsStats) -> None:
        if claimed is None:
            return
        # If even that fails, the look after the period takes them up.
        with contextlib.suppress(TableUnavailable):
            if self._store.give_back_sweep(claimed, SWEEP_SECONDS, SWEEP_RETRY_SECONDS):
                # The claim's time as written back: the next look may come that much sooner.
                stats.sweep_at = claimed - SWEEP_SECONDS + SWEEP_RETRY_SECONDS

    def _link(self, job: Job, job_ids: list[str], stats: DependentsStats | None = None
              ) -> list[str]:
        """Link ``job`` to ``job_ids``; a table that refuses leaves it to a later look. The
        ids not linked (not recorded, or refused)."""
        try:
            return self._store.link(job.job_id, job_ids)
        except (TableUnavailable, TransactionCancelled, InvalidTransaction) as exc:
            # Refused for a moment, or for good (the job waited for is at DynamoDB's item
            # limit, so its count cannot grow): the look at every held dependent judges it.
            if stats is not None and isinstance(exc, TableUnavailable):
                stats.table_failures += 1
            log.error("linking a dependent failed; a later look judges it",
                      extra={"job_id": job.job_id, "reason": str(exc)})
            return job_ids

    def release(self, held: list[tuple[Bundle, Job]], stats: DependentsStats
                ) -> list[tuple[Bundle, Job, Judgement]]:
        """Release the held jobs whose dependencies are met; cancel those one went against.
        The held jobs that still wait, with their judgement."""
        ready, waiting = self._judged(held, stats)
        for bundle, job in ready:
            try:
                self._store.release_held(bundle, job)
            except ConflictError:
                continue  # released, cancelled or retried meanwhile
            except TableUnavailable as exc:  # the next sweep looks again
                stats.table_failures += 1
                log.error("releasing a dependent failed; the next look releases it",
                          extra={"job_id": job.job_id, "reason": exc.reason})
                continue
            if len(stats.released) < IDS_KEPT:
                stats.released.append(job.job_id)
        return waiting

    def judge(self, held: list[tuple[Bundle, Job]],
              stats: DependentsStats) -> list[tuple[Bundle, Job]]:
        """The held jobs with nothing left to wait for (no dependencies, or all met); one
        whose dependency decided against it is cancelled, one still undecided stays held."""
        return self._judged(held, stats)[0]

    def _judged(self, held: list[tuple[Bundle, Job]], stats: DependentsStats
                ) -> tuple[list[tuple[Bundle, Job]], list[tuple[Bundle, Job, Judgement]]]:
        """:meth:`judge`'s, and the held jobs that still wait with their judgement (none
        when the table failed: they are judged again by the next look)."""
        dependents = [j for _, j in held if j.depends_on]
        if not dependents:
            return held, []
        try:
            said = judge_all(self._store, dependents, self._clock())
        except TableUnavailable as exc:  # they stay held: the next look judges them
            stats.table_failures += len(dependents)
            log.error("reading held jobs' dependencies failed; the next look judges them",
                      extra={"reason": exc.reason})
            return [(b, j) for b, j in held if not j.depends_on], []
        out, waiting = [], []
        for bundle, job in held:
            verdict = said[job.job_id] if job.depends_on else None
            if verdict is None or verdict.verdict == deps.MET:
                out.append((bundle, job))
            elif verdict.verdict == deps.WAITING:
                waiting.append((bundle, job, verdict))
            else:
                self._cancel(bundle, job, verdict.reason or "a dependency failed", stats)
        return out, waiting

    def _cancel(self, bundle: Bundle, job: Job, reason: str, stats: DependentsStats) -> None:
        try:
            self._store.cancel_held(bundle, job, reason)
        except ConflictError:
            return  # cancelled or changed meanwhile
        except TableUnavailable:
            stats.table_failures += 1  # the next look cancels it
            return
        stats.dependents_cancelled += 1
        if len(stats.dependents_cancelled_ids) < IDS_KEPT:
            stats.dependents_cancelled_ids.append(job.job_id)


def _ids(job: Job) -> list[str]:
    return [Dependency.from_json(d).job_id for d in job.depends_on or []]
