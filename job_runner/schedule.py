"""Which of a bundle's jobs starts next: bundle order, skipping a kind at its cap.

The bundle's jobs are read a page at a time (``RunnerStore.bundle_jobs``), when a job is
wanted: a runner holds about a page of a 9,000-job bundle, never all of it. A job whose kind is
at its cap within the task (``LONGJOBS_TASK_KIND_CONCURRENCY``) is set aside and the next one is
looked at, so a capped kind does not hold up the others; a set-aside job starts as soon as its
kind has room, before any later job of the bundle (bundle order otherwise). Set-aside jobs are
held whole up to :data:`HELD`; beyond that only their ids are kept, and the jobs are read again,
up to a page of one kind at a time, when their turn comes.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from dispatcher.domain.jobs import Job

# Set-aside jobs held in memory whole (a page's worth); the others are kept as ids.
HELD = 100


@dataclass
class _Aside:
    seq: int  # position in the bundle
    job_id: str
    job: Job | None  # None: read it again when its turn comes
    missing: bool = False  # read again and not found: skipped


class Schedule:
    def __init__(self, pages: Iterator[list[Job]], read: Callable[[list[str]], list[Job]],
                 held: int = HELD) -> None:
        """``pages``: the bundle's jobs in order, a page at a time; ``read``: jobs by id."""
        self._pages = pages
        self._read = read
        self._held = held
        self._first: deque[str] = deque()  # handed to the bundle while it runs: ids, read late
        self._page: deque[Job] = deque()
        self._ended = False
        self._seq = 0
        self._aside: dict[str, deque[_Aside]] = {}
        self._whole = 0  # set-aside jobs held whole

    @property
    def exhausted(self) -> bool:
        """Every job of the bundle has been handed out."""
        return self._ended and not self._first and not self._page \
            and not any(self._aside.values())

    def first(self, job_ids: list[str]) -> None:
        """Jobs handed to the bundle while it runs (urgent jobs): each starts before any job
        left of the bundle, as soon as a slot frees. They are read when their turn comes."""
        self._first.extend(job_ids)

    def set_aside(self) -> int:
        return sum(len(q) for q in self._aside.values())

    def next(self, at_cap: Callable[[str], bool]) -> Job | None:
        """The first job in bundle order whose kind is not ``at_cap``; None if there is none
        now (then either :attr:`exhausted`, or every job left is of a kind at its cap).
        Handed jobs come first, whatever their kind (a handed job is one of a few)."""
        while self._first:
            found = self._read([self._first.popleft()])
            if found:
                return found[0]
        while True:
            heads = [(q[0].seq, kind) for kind, q in self._aside.items()
                     if q and not at_cap(kind)]
            if not heads:
                break
            queue = self._aside[min(heads)[1]]
            if queue[0].job is None and not queue[0].missing:
                self._read_again(queue)
            aside = queue.popleft()
            if aside.job is not None:
                self._whole -= 1
                return aside.job
        while (job := self._pull()) is not None:
            if not at_cap(job.kind):
                return job
            whole = self._whole < self._held
            self._whole += whole
            self._aside.setdefault(job.kind, deque()).append(
                _Aside(self._seq, job.job_id, job if whole else None))
        return None

    def _pull(self) -> Job | None:
        while not self._page:
            if self._ended:
                return None
            page = next(self._pages, None)
            if page is None:
                self._ended = True
                return None
            self._page = deque(page)
        self._seq += 1
        return self._page.popleft()

    def _read_again(self, queue: deque[_Aside]) -> None:
        """Read the id-only set-aside jobs at the head of ``queue`` (one kind), up to a page."""
        wanted = [a for a in itertools.islice(queue, self._held) if a.job is None]
        found = {j.job_id: j for j in self._read([a.job_id for a in wanted])}
        for a in wanted:
            a.job = found.get(a.job_id)
            a.missing = a.job is None  # gone from the table: its turn finds nothing
            self._whole += not a.missing
