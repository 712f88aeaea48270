"""Retried jobs that wait for an earlier run of theirs to end.

A job whose run may still be alive in a task (``Job.live_task``: a handler abandoned still
running, or a job failed as overdue while its task ran on) is retried into a bundle held at
:data:`dispatcher.domain.lifecycle.HELD_AT`; the tick's reconciliation finds the held bundles
here and releases each one once its job's task is known stopped (see lifecycle, "Live runs").
"""

from __future__ import annotations

from dispatcher.domain import lifecycle
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Job
from dispatcher.ports.table import And, Eq, Remove, Set, Update
from dispatcher.store import codec as r
from dispatcher.store.base import Reads, status

# How a held retry's reason says what it waits for (operator.retry writes it, the release
# replaces it).
WAITING = "; waits until task "


class HeldRetries(Reads):
    """The held bundles, and their release (the tick's reconciliation)."""

    def held_bundles(self) -> list[Bundle]:
        """PENDING bundles due at HELD_AT: retries waiting for a task to stop."""
        return [r.record_bundle(rec) for rec in self.table.query(
            r.bundle_status(BundleState.PENDING), at_least=r.iso(lifecycle.HELD_AT))]

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
                       Eq("next_attempt_at", lifecycle.HELD_AT))),
            Update(r.job_key(job.job_id), [Remove("live_task"), *reason],
                   Eq("bundle_id", bundle.bundle_id))],
            f"bundle {bundle.bundle_id} changed while it was released", job_id=job.job_id)
