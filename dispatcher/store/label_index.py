"""The label index: the jobs that carry a label, newest first, without a scan of the table.

A job's labels (dispatcher.domain.labels) are not in the status index (its projection is the
index's and changes only with a new index). Each label of a job gets an item of its own,
``LABEL#<key>=<value>#<job id>``, whose index key ``LABEL#<key>=<value>#<shard>`` (the job's shard:
8 partitions a label, as a job state's, so one label on every job of a burst stays under a
partition's write limit) and ``status_at`` (the job's creation time) list a label's jobs newest
first. A job's tenant is filed as a label too, ``@tenant=<tenant>`` (dispatcher.domain.tenants:
``jobs list --tenant``). The tick writes them just before it records the jobs (one
TransactWriteItems a hundred labels; a job without labels or tenant costs nothing): a label item
whose job was then not recorded, or was recorded from another message with other labels (a
duplicate), or expired, is skipped by its reader, who reads the job's item to know its state
anyway; a duplicate never shortens an entry's life (its write is conditional). A label item expires
twice the retention after its job was due (made, or its ``not_before``; the job's own expiry counts
from its end, which its admission cannot know): a job still waiting or running past that is no
longer found by its labels, only by its id or state.

Reading a label: its index rows a page at a time, then the jobs' items (one BatchGetItem a
hundred), kept if they still carry the label and match the state, kind and window asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from dispatcher.domain import labels, tenants
from dispatcher.domain.jobs import Job, JobState
from dispatcher.ports.table import Absent, Le, Op, Or, Put, Record, TransactionCancelled
from dispatcher.store import codec as r
from dispatcher.store import index
from dispatcher.store.base import Reads

# A list by label looks at most at this many of the label's index rows to find its rows
# (a page of it: from its cursor), this many at a time.
LABEL_READ = 1000
LABEL_RUN = 200


def carried(job_labels: Mapping[str, str] | None, tenant: str | None) -> dict[str, str]:
    """What a job is filed under: its labels, and its tenant as the label
    :data:`~dispatcher.domain.tenants.INDEX_KEY` (no producer's label key)."""
    return {**(job_labels or {}), **({tenants.INDEX_KEY: tenant} if tenant else {})}


def entry(label: str | None, tenant: str | None) -> tuple[str, str] | None:
    """The entry a selection by ``label`` (``key=value``) and ``tenant`` reads: the label's,
    else the tenant's (a tenant given with a label filters the label's jobs); None for
    neither. ValueError saying the form of a bad one."""
    tenant = tenants.checked(tenant)
    if label is not None:
        return labels.parse(label)
    return (tenants.INDEX_KEY, tenant) if tenant else None


def label_key(key: str, value: str, job_id: str) -> str:
    return f"LABEL#{labels.written(key, value)}#{job_id}"


def label_statuses(key: str, value: str) -> list[str]:
    return [f"LABEL#{labels.written(key, value)}#{n}" for n in range(r.JOB_SHARDS)]


def label_expiry(retention: int, made: float) -> int:
    """When a label entry expires: twice the retention after its job was due (made, or its
    ``not_before``), ``retention`` being that time's own expiry."""
    return 2 * retention - int(made)


class LabelIndex(Reads):
    """Write a tick's jobs' label items; read the jobs that carry a label."""

    def index_labels(self, jobs: Sequence[Job]) -> None:
        t = self.clock()
        ops: dict[str, Op] = {}  # by item: a job sent twice in one drain is one entry
        for job in jobs:
            due = max(t, job.not_before or t)
            retention = self._expiry(due)
            expires = None if retention is None else label_expiry(retention, due)
            for key, value in carried(job.labels, job.tenant).items():
                ops[label_key(key, value, job.job_id)] = Put(Record(
                    label_key(key, value, job.job_id),
                    status_key=f"LABEL#{labels.written(key, value)}#{r.shard(job.job_id)}",
                    status_at=r.iso(job.created_at), job_id=job.job_id, expires_at=expires),
                    None if expires is None else Or(Absent(), Le("expires_at", expires)))
        puts = list(ops.values())
        for n in range(0, len(puts), 100):
            self._put_labels(puts[n:n + 100])

    def _put_labels(self, puts: list[Op]) -> None:
        """One transaction of label items, each written only over an item that expires no
        later (its condition): a message sent again with an earlier ``not_before`` (or none)
        would otherwise cut the expiry of its first one's entry, and a job waiting for a time
        months away would lose its labels long before that. Those whose item expires later
        are left as they are, the rest written again (no extra call when none is there)."""
        while puts:
            try:
                self._transact_retrying(puts)
                return
            except TransactionCancelled as exc:
                kept = exc.failed_conditions()
                if not kept:
                    raise
                puts = [op for i, op in enumerate(puts) if i not in kept]

    def labelled(self, key: str, value: str, *, states: Sequence[JobState] | None = None,
                 since: float | None = None, kind: str | None = None,
                 scheduled_after: float | None = None, tenant: str | None = None,
                 page: int = index.PAGE) -> Iterator[list[Record]]:
        """The jobs carrying ``key=value`` (in ``states``, of ``kind``, created since
        ``since``, not before ``scheduled_after``, of ``tenant``), whole, a page of the
        label's index at a time, each of its 8 partitions oldest first."""
        for rows in index.pages(self.table, label_statuses(key, value),
                                at_least=r.iso(since) if since is not None else None,
                                page=page):
            found = self.table.get_many([r.job_key(row.job_id or "") for row in rows])
            yield [rec for rec in found if _matches(rec, key, value, states, kind,
                                                    scheduled_after, since, tenant)]

    def labelled_page(self, key: str, value: str, *, limit: int,
                      after: tuple[str, str] | None = None, look: int = LABEL_READ,
                      states: Sequence[JobState] | None = None, since: float | None = None,
                      kind: str | None = None, scheduled_after: float | None = None,
                      tenant: str | None = None
                      ) -> tuple[list[Record], tuple[str, str] | None, bool]:
        """Up to ``limit`` jobs carrying ``key=value`` (as :meth:`labelled`), newest first,
        past the position ``after`` (a label row's ``(status_at, pk)``), looking at up to
        ``look`` of the label's index rows (its partitions merged), :data:`LABEL_RUN` at a
        time, each run's jobs read whole: the jobs, the position of the last row looked at,
        and whether rows may lie past it. Every job so listed lies at or before that
        position, every one past it after: a next page read from it repeats none and
        misses none."""
        out: list[Record] = []
        looked = 0
        position = after
        bound = max(limit, look)
        while looked < bound:
            run = min(LABEL_RUN, bound - looked)  # the last run reads no row past the bound
            rows = index.query(self.table, label_statuses(key, value),
                               at_least=r.iso(since) if since is not None else None,
                               newest_first=True, limit=run, after=position)
            jobs: dict[str, Record] = {}
            for n in range(0, len(rows), 100):
                jobs.update({rec.pk: rec for rec in self.table.get_many(
                    [r.job_key(row.job_id or "") for row in rows[n:n + 100]])})
            for row in rows:
                looked += 1
                position = (row.status_at or "", row.pk)
                rec = jobs.get(r.job_key(row.job_id or ""))
                if rec is not None and _matches(rec, key, value, states, kind,
                                                scheduled_after, since, tenant):
                    out.append(rec)
                    if len(out) == limit:
                        return out, position, True
            if len(rows) < run:
                return out, position, False
        return out, position, True

    def newest_labelled(self, key: str, value: str, *, limit: int,
                        states: Sequence[JobState] | None = None, since: float | None = None,
                        kind: str | None = None, scheduled_after: float | None = None,
                        tenant: str | None = None) -> list[Record]:
        """The newest ``limit`` jobs carrying ``key=value`` (as :meth:`labelled`), among the
        label's newest ``max(limit, LABEL_READ)``: bounded by what it shows, not by how many
        jobs ever carried the label."""
        return self.labelled_page(key, value, limit=limit, states=states, since=since,
                                  kind=kind, scheduled_after=scheduled_after, tenant=tenant)[0]


def _matches(rec: Record, key: str, value: str, states: Sequence[JobState] | None,
             kind: str | None, scheduled_after: float | None, since: float | None,
             tenant: str | None) -> bool:
    """The job as read still carries the label and matches the rest; ``since`` on its own
    creation time (a duplicate's entry was written later than its job was made)."""
    return carried(rec.labels if isinstance(rec.labels, dict) else None,
                   rec.tenant).get(key) == value \
        and (since is None or (rec.created_at or 0) >= since) \
        and (states is None or rec.state in {str(s) for s in states}) \
        and (kind is None or rec.kind == kind) \
        and (scheduled_after is None or (rec.not_before or 0) > scheduled_after) \
        and (tenant is None or rec.tenant == tenant)
