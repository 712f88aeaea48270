"""Urgent jobs behind a full backlog: handed to tasks that already run.

A backlog is spread over every free slot so that its tasks end together (stages/bundle.py), so
once it is launched no slot frees until it ends: up to ``LONGJOBS_BUNDLE_MAX_SECONDS``. A high
job submitted then would wait that long for a slot of its own, and a fresh task would still
take 30-60 s to start. Instead, when a tick finds no slot left, it takes the high queue's jobs
in (:meth:`dispatcher.stages.admit.Admission.intake`: recorded in bundles that wait) and hands
each to a running task of small jobs of the same size (a *host*): the job moves into the host's
bundle (:mod:`dispatcher.store.handing`, one transaction for the jobs handed to one host).
The host's runner learns of it from the heartbeat it writes anyway (the write returns the
item), and starts it before the rest of its bundle as soon as one of its running jobs ends.

So an urgent job starts within: the tick's look at the high queue (every minute; with
``LONGJOBS_URGENT_WATCH_SECONDS`` a tick with every slot busy keeps long-polling it, so within
seconds; during a long drain, every 15 s of it: dispatcher/stages/lookout.py) + one heartbeat
interval + one running job's length. It costs the drain no task
slot and no call per job of the backlog: a receive of the high queue per tick with every slot
busy (three long polls a minute when watching), one read of the hosts' items and one
transaction per host when there is an urgent job to hand.

Hosts: RUNNING bundles that share their task between several small jobs (``pages`` or more
than one job: only small jobs are bundled together), or any when tasks run several jobs at once
(a long job alone leaves its task's other slots free), with no kind limit (their slots count
against one), that beat within two heartbeat intervals, whose runner takes handed jobs, of the
urgent job's size (cpu, memory, storage). Sources: due PENDING high bundles never launched,
of no limited kind and not paged. Jobs are spread over the hosts, fewest handed first, at most
``task_concurrency`` per host and tick (a host starts that many at once). An urgent job that no
host can take waits for a slot as before.

A hand-off the table refuses for a moment (throttled, a conflict) is tried again as the store's
other transactions are; one it still refuses, or a read of the hosts it refuses, is logged with
the jobs and the reason and ends that look's hand-off: the jobs stay PENDING in the bundle they
were recorded in, due, and the next look (during a drain) or tick hands them, or a free slot
launches them. It never fails the tick nor ends its drain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.domain import rate_limits
from dispatcher.domain.bundles import Bundle, BundleState
from dispatcher.domain.jobs import Priority
from dispatcher.ports.table import TableUnavailable, TransactionCancelled
from dispatcher.stages.policy import HandoffPolicy
from dispatcher.store import StageStore
from dispatcher.store.handing import JOBS_PER_HANDOFF, MAX_HANDED

log = logging.getLogger(__name__)

# SQS's longest long poll.
LONG_POLL_SECONDS = 20


@dataclass
class HandoffStats:
    hosts: int = 0  # running tasks that could take an urgent job
    urgent: int = 0  # urgent jobs that had no slot
    handed: int = 0  # of them, handed to a running task
    watched_seconds: int = 0  # how long the tick watched the high queue
    looks: int = 0  # receives of the high queue while the drain went on (stages/lookout.py)
    refused: int = 0  # urgent jobs whose hand-off the table refused: left to a later look


def is_host(b: Bundle, now: float, policy: HandoffPolicy) -> bool:
    """A bundle that can take urgent jobs, as far as ``b`` (read at ``now``) shows: one of
    small jobs (only those share a bundle), or one whose task runs several jobs at once, so
    that a slot of it frees within one job, never behind a long one alone (a bundle rerun one
    job at a time after a crash, ``slots`` 1, does not). Its jobs are its own: urgent jobs
    handed to it say nothing of theirs, and a read that lists them among its jobs
    (``Reads.job_ids_of``) must not make a rerun of one long job a host."""
    return b.state == BundleState.RUNNING and b.kind not in policy.kind_limits \
        and (b.pages > 0 or len(set(b.job_ids) - set(b.handed_jobs)) > 1
             or (b.slots or policy.task_concurrency) > 1) \
        and (b.heartbeat_at or 0.0) >= now - 2 * policy.heartbeat_seconds


def is_source(b: Bundle, now: float, policy: HandoffPolicy) -> bool:
    """A due bundle whose urgent jobs a running task may take: not one whose jobs take rate
    limits' tokens (only the tick's launch takes those: stages/tick_tokens.py)."""
    return b.state == BundleState.PENDING and b.priority == Priority.HIGH and b.attempt == 0 \
        and b.kind not in policy.kind_limits and not b.pages and b.next_attempt_at <= now \
        and bool(b.job_ids) and not rate_limits.takes_tokens(b.bundle_id)


class Handoffs:
    """The hand-off: which running tasks can take urgent jobs, and handing them."""

    def __init__(self, store: StageStore, policy: HandoffPolicy,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self.policy = policy
        self._clock = clock

    def hosts(self, active: list[Bundle]) -> list[Bundle]:
        """The running bundles that can take urgent jobs now, read whole (one BatchGetItem
        per 100: the status index holds neither ``handed`` nor ``handed_jobs``, and the
        tick's read of ``active`` may be a watch old)."""
        return self.hosts_among([b.bundle_id for b in active if b.state == BundleState.RUNNING])

    def hosts_among(self, bundle_ids: list[str]) -> list[Bundle]:
        """Those of ``bundle_ids`` (in any state when read) that can take urgent jobs now, and
        the follow-ons their tasks took since (dispatcher.store.follow_ons)."""
        now = self._clock()
        if not bundle_ids:
            return []
        try:
            bundles = self._store.full_bundles_now(bundle_ids)
        except TableUnavailable as exc:  # no host this time: the next look or tick reads again
            log.error("reading the running tasks for urgent jobs failed; the next look or "
                      "tick hands them", extra={"reason": str(exc)})
            return []
        return [b for b in bundles if is_host(b, now, self.policy) and b.takes_handed
                and len(b.handed_jobs) < MAX_HANDED]

    def room(self, hosts: list[Bundle]) -> int:
        """Urgent jobs the hosts can take in one tick (0 without hosts)."""
        return min(JOBS_PER_HANDOFF, len(hosts) * max(1, self.policy.task_concurrency))

    def hand(self, sources: list[Bundle], hosts: list[Bundle], stats: HandoffStats) -> None:
        """Hand the jobs of ``sources`` (those that qualify) to ``hosts``, spread over them."""
        now = self._clock()
        per_host = max(1, self.policy.task_concurrency)
        given: dict[str, int] = {h.bundle_id: 0 for h in hosts}
        for source in sources:
            if not is_source(source, now, self.policy):
                continue
            stats.urgent += len(source.job_ids)
            plan: dict[str, list[str]] = {}
            for job_id in source.job_ids:
                fits = [h for h in hosts if h.resources == source.resources
                        and h.tenant == source.tenant  # bundles never mix tenants
                        and given[h.bundle_id] < per_host]
                if not fits:
                    break
                host = min(fits, key=lambda h: (given[h.bundle_id], len(h.handed_jobs),
                                                h.bundle_id))
                given[host.bundle_id] += 1
                plan.setdefault(host.bundle_id, []).append(job_id)
            by_id = {h.bundle_id: h for h in hosts}
            for host_id, job_ids in plan.items():
                try:
                    moved = self._store.hand(source, job_ids, by_id[host_id])
                except (TableUnavailable, TransactionCancelled) as exc:
                    # Refused past the store's tries: these jobs stay PENDING in ``source``,
                    # due, for the next look or tick. The rest waits too: a table that
                    # throttles would spend each further hand-off's tries within the tick.
                    stats.refused += len(job_ids)
                    log.error("handing urgent jobs to a running task failed; the next look "
                              "or tick hands them", extra={
                                  "job_ids": job_ids, "host": host_id,
                                  "source": source.bundle_id, "reason": str(exc)})
                    return
                stats.handed += len(moved)
                given[host_id] -= len(job_ids) - len(moved)
