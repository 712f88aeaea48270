"""Held jobs: retries that wait for an earlier run of theirs to end, and jobs that wait for
their dependencies (:mod:`dispatcher.domain.dependencies`).

A job whose run may still be alive in a task (``Job.live_task``: a handler abandoned still
running, or a job failed as overdue while its task ran on) is retried into a bundle held at
:data:`dispatcher.domain.lifecycle.HELD_AT`; the tick's reconciliation finds the held bundles
here and releases each one once its job's task is known stopped (see lifecycle, "Live runs").
A job that waits for others is held at ``DEPENDENTS_HELD_AT``, one second earlier: the tick's
look at held retries does not read it; its dependencies' ends release it
(:mod:`dispatcher.stages.dependents`), and :meth:`HeldRetries.held_dependents` reads them all
for the rare look at every one.
"""

from __future__ import annotations

from dispatcher.domain import lifecycle, sizes
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.dependencies import REJECTED
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import (
    Absent,
    And,
    ConditionFailed,
    Eq,
    In,
    Lacks,
    Lt,
    Or,
    Remove,
    Set,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import Reads, job_state, status
from dispatcher.store.state_writes import bundle_actions

# How a held retry's reason says what it waits for (operator.retry writes it, the release
# replaces it).
WAITING = "; waits until task "


class HeldRetries(Reads):
    """The held bundles, and their release (the tick's reconciliation)."""

    def held_bundles(self) -> list[Bundle]:
        """PENDING bundles due at HELD_AT: retries waiting for a task to stop (and jobs that
        waited for dependencies when they were held there too)."""
        return [r.record_bundle(rec) for rec in self.table.query(
            r.bundle_status(BundleState.PENDING), at_least=r.iso(lifecycle.HELD_AT))]

    def held_dependents(self, among: list[str] | None = None) -> list[tuple[Bundle, Job]]:
        """The jobs held for their dependencies, each with its bundle (of its own): every one
        (a query of the held bundles), or those of ``among`` (batched reads of those jobs and
        their bundles; one released, cancelled or retried meanwhile is left out)."""
        if among is None:
            at = r.iso(lifecycle.DEPENDENTS_HELD_AT)
            bundles = {b.bundle_id: b for b in map(r.record_bundle, self.table.query(
                r.bundle_status(BundleState.PENDING), at_least=at, at_most=at))}
            jobs = self.get_jobs([j for b in bundles.values() for j in b.job_ids])
        else:
            jobs = [j for j in self.get_jobs(among) if j.state == JobState.PENDING
                    and j.depends_on and j.bundle_id]
            bundles = {b.bundle_id: b for b in map(r.record_bundle, self.table.get_many(
                [r.bundle_key(j.bundle_id) for j in jobs if j.bundle_id]))
                if b.state == BundleState.PENDING and b.next_attempt_at in lifecycle.HELD_TIMES}
        return [(bundles[j.bundle_id], j) for j in jobs if j.bundle_id in bundles]

    def claim_sweep(self, every: float) -> float | None:
        """When this tick looks at every held dependent: its claim's time, once per ``every``
        seconds (a conditional write of SWEEP#dependents), None for the other ticks."""
        t = self.clock()
        try:
            # It may expire once it no longer holds a look back (nothing is left behind). An
            # update, not a put: it keeps the time of the last look given back.
            self.table.write(Update(r.SWEEP_KEY, [
                Set("updated_at", t), Set("expires_at", int(t + 2 * every))],
                Or(Absent(), Lt("updated_at", t - every))))
        except ConditionFailed:
            return None
        return t

    def give_back_sweep(self, claimed_at: float, every: float, after: float) -> bool:
        """The look claimed at ``claimed_at`` could not do all it should (the table refused
        some of its reads or writes): the next look may be claimed ``after`` seconds on
        instead of ``every``. At most once per ``every`` seconds (``given_back_at`` keeps
        when it was last), so a table that keeps failing costs one look more a period,
        not one a tick. Conditional on the claim being this one still; whether it was given
        back."""
        try:
            self.table.write(Update(r.SWEEP_KEY, [
                Set("updated_at", claimed_at - every + after), Set("given_back_at", claimed_at)],
                And(Eq("updated_at", claimed_at),
                    Or(Lacks("given_back_at"), Lt("given_back_at", claimed_at - every)))))
        except ConditionFailed:
            return False
        return True

    def release_held(self, bundle: Bundle, job: Job) -> None:
        """Make a held bundle due (at once, or at its job's ``not_before``) and clear the
        job's ``live_task``: that task is known stopped. Conditional: the bundle is still
        held and the job still in it (a cancel meanwhile closed it); ConflictError if not."""
        t = self.clock()
        due = max(t, job.not_before or 0.0)
        reason = [Set("reason", (job.reason or "").split(WAITING)[0]
                      + f"; task {job.live_task} has stopped")] if job.live_task else []
        self._transact([
            Update(r.bundle_key(bundle.bundle_id),
                   [*status(r.bundle_status(BundleState.PENDING), t, at=due),
                    Set("next_attempt_at", due)],
                   And(Eq("state", str(BundleState.PENDING)),
                       In("next_attempt_at", lifecycle.HELD_TIMES))),
            Update(r.job_key(job.job_id), [Remove("live_task"), Remove("depends_on"), *reason],
                   Eq("bundle_id", bundle.bundle_id))],
            f"bundle {bundle.bundle_id} changed while it was released", job_id=job.job_id)

    def cancel_held(self, bundle: Bundle, job: Job, reason: str) -> None:
        """A held job whose dependency decided against it: CANCELLED with ``reason``, its
        bundle (its own) DONE. Conditional as :meth:`release_held`."""
        t = self.clock()
        self._transact([
            Update(r.bundle_key(bundle.bundle_id),
                   bundle_actions(BundleState.DONE, t, None, self._expiry(t)),
                   And(Eq("state", str(BundleState.PENDING)),
                       In("next_attempt_at", lifecycle.HELD_TIMES))),
            Update(r.job_key(job.job_id), [
                *job_state(job.job_id, JobState.CANCELLED, t), Remove("depends_on"),
                Set("reason", sizes.clip_text(reason, sizes.MAX_REASON_BYTES)),
                *self._expires(t)],
                And(Eq("bundle_id", bundle.bundle_id), Eq("state", str(JobState.PENDING))))],
            f"bundle {bundle.bundle_id} changed while it was cancelled", job_id=job.job_id)

    def job_states(self, job_ids: list[str]) -> dict[str, str | None]:
        """Each job's state; REJECTED for one that was never admitted, None if unknown."""
        found: dict[str, str | None] = {j.job_id: str(j.state) for j in self.get_jobs(job_ids)}
        for job_id in job_ids:
            if job_id not in found:
                found[job_id] = REJECTED if self.get_rejection(job_id) is not None else None
        return found
