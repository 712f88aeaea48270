"""Links from a job to the jobs that wait for it: how a job's end finds its dependents without
reading every job that waits.

A job D recorded with ``depends_on`` [A, ...] is linked to each A once it is recorded (held): one
transaction per A puts ``WAIT#A#D`` (index key ``WAIT#A``) and adds 1 to A's ``waiters``, both
or neither: the put is conditional on the link being new (a link made again, after a crash or a
redelivery, counts once) and the add on A existing (an A not recorded yet is linked by the look
at every held dependent, once it is). Every write that ends A afterwards carries ``waiters`` in
its new image (an UpdateItem keeps the attributes it does not name), so the table's stream
shows the end of a job that has dependents, and :meth:`Waiters.waiting_for` lists them.

The order makes it race-free: the link commits first, and D's dependencies' states are read
after it (strongly consistent). An A that ended before the link is seen ended by that read; one
that ends after it ends with ``waiters`` set, and its stream record releases D.

A link expires (DynamoDB's TTL) a retention period after it was made, not with what it
links: D may wait for A longer than that (A scheduled far ahead, or an array's child recorded
late), and a link gone before A ends would leave D to the look at every held dependent.
:meth:`Waiters.refresh_links` moves the expiry of a long-waiting D's links on before it comes
(the look at every held dependent calls it), so a link lives as long as its dependent waits
and expires a retention period after that, never while it is needed.
"""

from __future__ import annotations

from dispatcher.domain.dependencies import Dependency
from dispatcher.domain.jobs import Job
from dispatcher.ports.record import Record
from dispatcher.ports.table import (
    Absent,
    Add,
    ConditionFailed,
    Exists,
    Put,
    Set,
    TransactionCancelled,
    Update,
)
from dispatcher.store import codec as r
from dispatcher.store.base import Reads


class Waiters(Reads):
    """Linking dependents to the jobs they wait for (part of :class:`StageStore`)."""

    def link(self, dependent_id: str, job_ids: list[str]) -> list[str]:
        """Link ``dependent_id`` to each of ``job_ids`` (see the module); the ids that could
        not be linked because no such job is recorded (yet)."""
        t = self.clock()
        unknown = []
        for job_id in job_ids:
            edge = Record(r.waiter_key(job_id, dependent_id), status_key=r.waiters_status(job_id),
                          status_at=r.iso(t), job_id=dependent_id, created_at=t,
                          expires_at=self._expiry(t))
            try:
                self._transact_retrying([
                    Put(edge, Absent()),
                    Update(r.job_key(job_id), [Add("waiters", 1)], Exists())])
            except TransactionCancelled as exc:
                failed = exc.failed_conditions()
                if not failed:
                    raise
                if 1 in failed and 0 not in failed:
                    unknown.append(job_id)
                # 0 failed: linked already (the count has it)
        return unknown

    def waiting_for(self, job_id: str) -> list[str]:
        """The ids of the jobs linked as waiting for ``job_id`` (the index: eventually
        consistent, so a link made a moment ago may be missing; see the stage)."""
        return [rec.job_id for rec in self.table.query(r.waiters_status(job_id))
                if rec.job_id]

    def unlinked(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Of ``pairs`` (a job waited for, its dependent), those with no link (a BatchGetItem
        per 100, strongly consistent)."""
        keys = [r.waiter_key(job_id, dependent_id) for job_id, dependent_id in pairs]
        found = {rec.pk for start in range(0, len(keys), 100)
                 for rec in self.table.get_many(keys[start:start + 100])}
        return [p for p, key in zip(pairs, keys, strict=True) if key not in found]

    def refresh_links(self, dependents: list[Job], within: float) -> int:
        """Move on the expiry of the links of the ``dependents`` (held, with their
        ``depends_on``) whose wait crossed a multiple of half the retention period in the last
        ``within`` seconds: to a retention period from now (see the module). A link is made
        at or after its dependent was recorded and each move gives it a whole period, so the
        next move comes half a period before it expires. Called at least once per ``within``
        seconds, so no crossing goes unseen; a link never made (its job unknown) is left so.
        How many links it moved."""
        expires_at = self._expiry(self.clock())
        if expires_at is None:  # nothing expires
            return 0
        half = self.retention_days * 86400 / 2
        moved = 0
        for job in dependents:
            age = self.clock() - job.created_at
            if age < half or age // half == (age - within) // half:
                continue
            for job_id in (Dependency.from_json(d).job_id for d in job.depends_on or []):
                try:
                    self.table.write(Update(r.waiter_key(job_id, job.job_id),
                                            [Set("expires_at", expires_at)], Exists()))
                except ConditionFailed:
                    continue
                moved += 1
        return moved
