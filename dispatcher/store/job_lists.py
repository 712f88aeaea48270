"""The reads behind ``jobs list/show/stats`` and the console: lists of the status index
(newest first, a page at a time, each partition read only as far as the merge takes from it:
:func:`dispatcher.store.index.query`), a job's record with its bundle's, counts, and the
bundles behind ``stats``. They return table records (:class:`dispatcher.ports.table.Record`):
the operator views in :mod:`dispatcher.ops.queries` show attributes the domain objects do not
carry.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Executor

from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.domain.waiting import TickSummary
from dispatcher.ports.table import And, Condition, Eq, Ge, Gt, Has, Record
from dispatcher.store import codec as r
from dispatcher.store import index
from dispatcher.store.base import Reads

# A finished state's list of one kind without a window reads at most this many index rows of
# each of its partitions (nine), newest first: see JobLists.list_jobs.
FILTERED_READ = 1000


def _where(kind: str | None, scheduled_after: float | None) -> Condition | None:
    """The index filter of the job queries: of this kind; scheduled after (not_before)."""
    where: list[Condition] = []
    if kind:
        where.append(Eq("kind", kind))
    if scheduled_after is not None:
        where.append(Gt("not_before", scheduled_after))
    return And(*where) if len(where) > 1 else (where[0] if where else None)


class JobLists(Reads):
    """The operators' reads.

    ``fan_out``: where a list's or a count's partitions are read at once (an operator's
    client sets one: far from the table's region, a list of every state would otherwise wait
    for a round trip per partition); None reads them one after another."""

    fan_out: Executor | None = None

    def list_jobs(self, state: JobState, *, since: float | None = None,
                  kind: str | None = None, limit: int | None = 50,
                  scheduled_after: float | None = None,
                  after: tuple[str, str] | None = None,
                  prefix: str | None = None) -> list[Record]:
        """Jobs (or REJECTED records) in ``state``, newest first by creation time; with
        ``scheduled_after``, only those whose ``not_before`` is later (SCHEDULED ones); with
        ``after`` (``(status_at, pk)`` of a page's last row), those past it: the next page.

        A finished state's list of one ``kind`` with no ``since`` looks among the newest
        :data:`FILTERED_READ` of each index partition: the filter would otherwise read the
        state's whole history to find a kind that is rare (or gone). An active state's is
        bounded by the active work; a ``since`` bounds it by the window asked for. With
        ``prefix``, only the jobs whose id starts with it, among the newest
        :data:`FILTERED_READ` of each partition, whatever the state (an id is no key of the
        index: this is the bound a filter on it has)."""
        if prefix:
            return self._with_prefix(r.job_statuses(state), prefix, since, kind, limit,
                                     scheduled_after, after)
        if kind and since is None and scheduled_after is None and limit is not None \
                and state in TERMINAL_JOB_STATES:
            return index.newest_matching(self.table, r.job_statuses(state),
                                         lambda rec: rec.kind == kind, limit=limit,
                                         read_at_most=FILTERED_READ, after=after,
                                         fan_out=self.fan_out)
        return index.query(self.table, r.job_statuses(state),
                           at_least=r.iso(since) if since is not None else None,
                           where=_where(kind, scheduled_after), limit=limit, newest_first=True,
                           after=after, fan_out=self.fan_out)

    def list_states(self, states: list[JobState], *, since: float | None = None,
                    limit: int = 50, after: tuple[str, str] | None = None,
                    prefix: str | None = None) -> list[Record]:
        """Jobs (and REJECTED records) in any of ``states``, newest first, as one index: every
        state's partitions in one merge, each read only as far as the merge takes from it
        (with ``prefix``, as :meth:`list_jobs`)."""
        keys = [key for state in states for key in r.job_statuses(state)]
        if prefix:
            return self._with_prefix(keys, prefix, since, None, limit, None, after)
        return index.query(self.table, keys, at_least=r.iso(since) if since is not None
                           else None, limit=limit, newest_first=True, after=after,
                           fan_out=self.fan_out)

    def _with_prefix(self, keys: list[str], prefix: str, since: float | None,
                     kind: str | None, limit: int | None, scheduled_after: float | None,
                     after: tuple[str, str] | None) -> list[Record]:
        at_least = r.iso(since) if since is not None else None

        def match(rec: Record) -> bool:
            return r.ident(rec.pk).startswith(prefix) and (not kind or rec.kind == kind) \
                and (at_least is None or (rec.status_at or "") >= at_least) \
                and (scheduled_after is None or float(rec.not_before or 0) > scheduled_after)

        return index.newest_matching(self.table, keys, match, limit=limit or FILTERED_READ,
                                     read_at_most=FILTERED_READ, after=after,
                                     fan_out=self.fan_out)

    def detail(self, job_id: str) -> tuple[Record, Record | None] | None:
        """A job's record (or its REJECTED record) and its bundle's record."""
        rec = self.table.get(r.job_key(job_id)) or self.table.get(r.rejection_key(job_id))
        if rec is None:
            return None
        bundle = self.table.get(r.bundle_key(rec.bundle_id)) if rec.bundle_id else None
        return rec, bundle

    def dependents(self, job_id: str, limit: int = 100) -> list[str]:
        """The first ``limit`` jobs linked as waiting for ``job_id`` (the links its dependents
        made: dispatcher.store.waiters; the index, eventually consistent)."""
        return [rec.job_id for rec in self.table.query(r.waiters_status(job_id), limit=limit)
                if rec.job_id]

    def tick_summary(self) -> TickSummary | None:
        """The last tick's view of the slots (what a job's ``waiting_for`` is derived from)."""
        rec = self.table.get(r.TICK_KEY)
        return TickSummary.from_json(rec.summary) if rec is not None else None

    def bundle_records(self, bundle_ids: list[str]) -> list[Record]:
        """The bundles' records, one read per 100 (those that exist)."""
        return self.table.get_many([r.bundle_key(b) for b in dict.fromkeys(bundle_ids)])

    def count_jobs(self, state: JobState, *, since: float | None = None,
                   kind: str | None = None, scheduled_after: float | None = None) -> int:
        """Jobs (or REJECTED records) in ``state``; with ``since``, those created since; with
        ``kind`` and ``scheduled_after``, as :meth:`list_jobs` filters."""
        return index.count(self.table, r.job_statuses(state),
                           at_least=r.iso(since) if since is not None else None,
                           where=_where(kind, scheduled_after), fan_out=self.fan_out)

    def job_pages(self, state: JobState, *, since: float | None = None,
                  kind: str | None = None, scheduled_after: float | None = None,
                  page: int = index.PAGE) -> Iterator[list[Record]]:
        """Every job in ``state`` (filtered as :meth:`count_jobs`), page by page, never more
        than ``page`` index rows held (:func:`dispatcher.store.index.pages`)."""
        return index.pages(self.table, r.job_statuses(state),
                           at_least=r.iso(since) if since is not None else None,
                           where=_where(kind, scheduled_after), page=page)

    def job_records(self, job_ids: list[str]) -> list[Record]:
        return self.table.get_many([r.job_key(j) for j in job_ids])

    def launch_failed_since(self, cutoff: float) -> list[Bundle]:
        """PENDING bundles that RunTask refused, changed since ``cutoff``."""
        return [r.record_bundle(rec) for rec in self.table.query(
            r.bundle_status(BundleState.PENDING), where=And(
                Ge("updated_at", cutoff), Gt("launch_failures", 0), Has("last_failure")))]

    def relaunched_since(self, cutoff: float) -> list[Bundle]:
        """Bundles launched more than once whose state changed since ``cutoff``."""
        return [r.record_bundle(rec) for state in BundleState for rec in self.table.query(
            r.bundle_status(state), at_least=r.iso(cutoff), where=Gt("attempt", 1))]
