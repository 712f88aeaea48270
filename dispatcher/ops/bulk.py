"""Operator actions on many jobs at once: cancel or retry every job a filter selects.

``longjobs jobs cancel|retry --status S [--kind K] [--since D]`` and ``JobClient.bulk_cancel``
/ ``bulk_retry`` are thin layers over :class:`BulkAction`. It walks the status index page by
page (:meth:`OperatorStore.job_pages`: one page of index rows held at a time, so 100,000 jobs
take the memory of 100) and acts on each page at once (:meth:`OperatorStore.cancel_page` /
:meth:`OperatorStore.retry_page`): a few BatchGetItem reads and a few transactions of up to
100 actions a page, not a few calls a job, with the very ops and conditions of the single-job
operations (:mod:`dispatcher.store.job_ops`); a job that moved on meanwhile is done on its own
by :meth:`OperatorStore.cancel` / :meth:`OperatorStore.retry`, as a single ``jobs cancel``
would be. One page at a time, each call waiting for the one before, far below the table's
limits; botocore and the store's own retry absorb throttling. A retry's jobs share bundles,
packed as admission packs them (:func:`dispatcher.store.job_ops.retry_groups`), so its pages
are regrouped into whole bundles' worth (:func:`_whole_bundles`).

Resumable: each action has an id (``bulk_id``), which every job it acts on keeps as its mark,
in an attribute of its own written by the very write that acts (and in its ``reason`` and
history, for the operator to read); a run given the same id skips the jobs that carry it
(``AlreadyActed``), so a run interrupted anywhere and run again acts on every remaining job
once and on none twice, however long the job ran since. A job keeps the marks of its latest
bulk actions only (:mod:`dispatcher.store.bulk_marks`): a resumed run that cannot tell whether
it acted on a job (one acted on by that many other bulk actions) refuses it, an error
reported with the job's id, rather than act on it twice.
A job that changed meanwhile (no longer in the state it was selected in, gone) is counted as
an error and reported, not fatal; a table that does not answer stops the run (run it again).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dispatcher.domain.errors import LongjobsError
from dispatcher.domain.jobs import JobState
from dispatcher.ports.table import Record
from dispatcher.store import OperatorStore, job_ops
from dispatcher.store.bulk_marks import check_bulk_id
from dispatcher.store.codec import iso
from dispatcher.store.label_index import entry

# The first few errors are kept whole in the report; the rest only counted.
ERROR_SAMPLES = 10
SCHEDULED = "SCHEDULED"  # PENDING with its not_before ahead (as `jobs list` says)


class BulkVerb(StrEnum):
    CANCEL = "cancel"
    RETRY = "retry"


# The states each action can select: what the single-job operation accepts.
SELECTABLE: dict[BulkVerb, tuple[str, ...]] = {
    BulkVerb.CANCEL: (str(JobState.PENDING), SCHEDULED, str(JobState.RUNNING)),
    BulkVerb.RETRY: (str(JobState.FAILED), str(JobState.CANCELLED)),
}


@dataclass(frozen=True)
class BulkFilter:
    """Which jobs: in ``status`` (required: an action never means "every job"), of ``kind``,
    created within the last ``since_seconds``, carrying ``label`` (``key=value``), of
    ``tenant`` (either read through the label index, dispatcher.store.label_index)."""

    verb: BulkVerb
    status: str
    kind: str | None = None
    since_seconds: float | None = None
    label: str | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        status = self.status.strip().upper()
        if status not in SELECTABLE[self.verb]:
            raise LongjobsError(f"jobs {self.verb} --status {self.status!r}: one of "
                                + ", ".join(SELECTABLE[self.verb]))
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "tenant", self.tenant or None)
        try:
            entry(self.label, self.tenant)  # a bad label or tenant, said here
        except ValueError as exc:
            raise LongjobsError(str(exc)) from None

    @property
    def indexed(self) -> tuple[str, str] | None:
        """The label index entry the filter reads (its label's, else its tenant's), if any."""
        return entry(self.label, self.tenant)

    def describe(self, since: float | None) -> str:
        return " ".join([f"status={self.status}", *([f"kind={self.kind}"] if self.kind else []),
                         *([f"label {self.label}"] if self.label else []),
                         *([f"tenant {self.tenant}"] if self.tenant else []),
                         *([f"created since {iso(since)}"] if since is not None else [])])


@dataclass
class BulkReport:
    """What a bulk action did (or, ``dry_run``, would select: ``matched`` only)."""

    bulk_id: str
    verb: str
    selection: str
    matched: int  # counted before acting (the index, eventually consistent)
    dry_run: bool = False
    acted: int = 0  # cancelled or retried now
    requested: int = 0  # cancels requested from the job's running task
    skipped: int = 0  # already acted on by this bulk id (an earlier run of it)
    errors: int = 0  # changed meanwhile, or refused: counted, not fatal
    error_samples: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"bulk_id": self.bulk_id, "action": self.verb, "selection": self.selection,
                "matched": self.matched, "dry_run": self.dry_run, "acted": self.acted,
                "requested": self.requested, "skipped": self.skipped, "errors": self.errors,
                "error_samples": list(self.error_samples)}


def _whole_bundles(pages: Iterator[list[str]], page: int) -> Iterator[list[str]]:
    """A retry's pages regrouped into pages of whole bundles' worth (``page`` rounded down to
    RETRY_BUNDLE_JOBS, unless smaller): the jobs retried together share bundles of up to that
    many (one transaction each), so the index's short pages (a state's jobs are spread over
    several partitions) do not each end in a bundle of their own. A run cut short leaves the
    jobs it held unacted on, still selected: a resumed run acts on them."""
    per = job_ops.RETRY_BUNDLE_JOBS
    size = page if page < per else page - page % per
    held: list[str] = []
    for ids in pages:
        held += ids
        while len(held) >= size:
            yield held[:size]
            held = held[size:]
    if held:
        yield held


# The job ids a dry run shows of its selection.
PREVIEW_IDS = 10


def new_bulk_id() -> str:
    return "bulk-" + uuid.uuid4().hex[:12]


@dataclass
class BulkAction:
    """Count, then act on, every job a :class:`BulkFilter` selects (see the module)."""

    store: OperatorStore
    clock: Callable[[], float] = field(default=time.time)
    page: int = 100

    def _query(self, f: BulkFilter) -> tuple[JobState, dict[str, Any], float | None]:
        now = self.clock()
        since = max(0.0, now - f.since_seconds) if f.since_seconds is not None else None
        state = JobState.PENDING if f.status == SCHEDULED else JobState(f.status)
        return state, {"since": since, "kind": f.kind,
                       "scheduled_after": now if f.status == SCHEDULED else None}, since

    def count(self, f: BulkFilter) -> int:
        """How many jobs the filter selects now (COUNT queries: no job is read; by label, the
        label's (or tenant's) index rows and their jobs' items are read)."""
        state, where, _ = self._query(f)
        if f.indexed is not None:
            return sum(len(rows) for rows in self._pages(f, state, where, self.page))
        return self.store.count_jobs(state, **where)

    def _pages(self, f: BulkFilter, state: JobState, where: dict[str, Any],
               page: int) -> Iterator[list[Record]]:
        """The selected jobs' rows (whole items, by label or tenant), a page at a time."""
        if f.indexed is None:
            return self.store.job_pages(state, page=page, **where)
        key, value = f.indexed
        return self.store.labelled(key, value, states=[state], page=page, tenant=f.tenant,
                                   **where)

    def preview(self, f: BulkFilter, n: int = PREVIEW_IDS) -> tuple[str, list[str]]:
        """What a dry run shows: the filter as understood, and up to ``n`` of the ids it
        selects now (read a page at a time, stopping at ``n``)."""
        state, where, since = self._query(f)
        ids: list[str] = []
        for rows in self._pages(f, state, where, n):
            ids += [row.job_id or row.pk.split("#", 1)[1] for row in rows]
            if len(ids) >= n:
                break
        return f.describe(since), ids[:n]

    def run(self, f: BulkFilter, *, bulk_id: str | None = None, reason: str | None = None,
            from_scratch: bool = False, dry_run: bool = False,
            resume: bool | None = None,
            progress: Callable[[BulkReport], None] | None = None) -> BulkReport:
        """Act on every selected job once (``bulk_id``: an earlier run's, to resume it);
        ``progress`` is told the report so far after each page (the console shows it).

        ``resume``: whether ``bulk_id`` names an action begun before (by default, whether one
        is given); False for a new action given a new id (the CLI names its id before it runs,
        so that an interrupted run can be resumed), which cannot have acted on any job yet."""
        if bulk_id is not None:
            check_bulk_id(bulk_id)
        resuming = bulk_id is not None if resume is None else resume
        state, where, since = self._query(f)
        report = BulkReport(bulk_id or new_bulk_id(), str(f.verb), f.describe(since),
                            self.count(f), dry_run=dry_run)
        if dry_run:
            return report
        said = f"{reason or 'operator action'} ({report.bulk_id}: {report.selection})"
        pages: Iterator[list[str]] = ([row.job_id or row.pk.split("#", 1)[1] for row in rows]
                 for rows in self._pages(f, state, where, self.page))
        if f.verb == BulkVerb.RETRY:
            pages = _whole_bundles(pages, self.page)
        for ids in pages:
            if f.verb == BulkVerb.CANCEL:
                outcomes = self.store.cancel_page(ids, reason=said, by=report.bulk_id,
                                                  only=state, resume=resuming)
            else:
                outcomes = self.store.retry_page(ids, from_scratch=from_scratch, reason=said,
                                                 by=report.bulk_id, only=state,
                                                 resume=resuming)
            for outcome in outcomes:
                if outcome.done == "acted":
                    report.acted += 1
                elif outcome.done == "requested":
                    report.requested += 1
                elif outcome.done == "skipped":
                    report.skipped += 1
                else:
                    report.errors += 1
                    if len(report.error_samples) < ERROR_SAMPLES:
                        report.error_samples.append(str(outcome.error))
            if progress is not None:
                progress(report)
        return report
