"""The mark a bulk operator action (:mod:`dispatcher.ops.bulk`) leaves on each job it acts on,
so that a resumed run of it (the same bulk id) skips the job instead of acting twice.

The mark is the action's id in the job's own attribute ``bulk_ids``: a list of the ids of the
bulk actions that acted on the job, oldest first. It lives as long as the job, whatever the job
does after: its history, where the mark used to be kept, is bounded (its first entry, an
omitted count and the latest ones), so a job that ran a dozen attempts after a bulk retry lost
the retry's mark, and a resume retried it again. The history still records who acted (its
cancel and retry entries name the action), for the operator to read; a job marked before the
list existed carries its mark only there, and it is still recognised there (as long as its
history keeps it, as before).

The list is written in the very update that acts on the job (no call of its own), as the list
read with the job plus this action's id, fenced on the list being still the one read: the
write that acts is already fenced on the job's state, but a job retried, run and failed again
between a read and a write is in its state again, and the list written from that read would
drop the mark added meanwhile. A list rather than a DynamoDB string set: a set has no order,
so it could not keep the latest marks and let the oldest go; and its one advantage, an atomic
ADD without a read, is moot when the write must read the job and be fenced anyway.

Bounded, for DynamoDB's 400 KB item limit (:data:`dispatcher.domain.sizes.MAX_BULK_MARKS`
ids, each at most ``MAX_BULK_ID_BYTES``): a job acted on by more bulk actions keeps the latest
and lets the oldest go. A mark let go is never missed, by this rule: a list only ever lets a
mark go when it is full, and it never shrinks, so a job whose list lacks an action's id and is
not full was never acted on by that action; a *resumed* action that finds its id missing from
a full list cannot tell, and refuses the job (:class:`MarkNotKept`: counted as an error and
reported, the job left as it is) rather than risk acting twice. A new action (not a resume)
cannot have acted on any job yet, so it acts on every job whatever its list holds.
"""

from __future__ import annotations

from dispatcher.domain import sizes
from dispatcher.domain.errors import AlreadyActed, LongjobsError, MarkNotKept
from dispatcher.domain.jobs import Job
from dispatcher.ports.table import Action, Condition, Eq, Lacks, Set


def check_bulk_id(bulk_id: str) -> None:
    """Refuse an id the jobs' lists cannot keep (empty, or longer than their budget)."""
    size = len(bulk_id.encode())
    if not bulk_id.strip() or size > sizes.MAX_BULK_ID_BYTES:
        raise LongjobsError(f"bulk id {bulk_id[:40]!r}: 1 to {sizes.MAX_BULK_ID_BYTES} bytes "
                            f"(UTF-8), not {size}")


def acted(job: Job, by: str) -> bool:
    """Whether bulk action ``by`` has acted on ``job``: its id in the job's list, or (a job
    marked before the list existed) in its history."""
    return by in job.bulk_ids or any(
        isinstance(h, dict) and h.get("by") == by for h in job.history)


def check(job: Job, by: str, *, resume: bool) -> None:
    """AlreadyActed if ``by`` has acted on ``job``; MarkNotKept if ``resume`` (a run of an
    action started before) cannot tell, its mark being perhaps let go (see the module)."""
    if acted(job, by):
        raise AlreadyActed(f"already acted on by {by}", job_id=job.job_id)
    if resume and len(job.bulk_ids) >= sizes.MAX_BULK_MARKS:
        raise MarkNotKept(
            f"cannot tell whether {by} acted on it: the job keeps the ids of only the "
            f"latest {sizes.MAX_BULK_MARKS} bulk actions that acted on it, and it has "
            f"{len(job.bulk_ids)}, the oldest {job.bulk_ids[0]}; left as it is rather than "
            "acted on twice (a single jobs cancel|retry of it still acts)", job_id=job.job_id)


def mark(job: Job, by: str) -> tuple[list[Action], Condition]:
    """The action adding ``by`` to the job's list (the oldest let go past the bound), and the
    fence the acting write must add to its condition: the list is still the one read."""
    check_bulk_id(by)
    kept = [*job.bulk_ids, by][-sizes.MAX_BULK_MARKS:]
    fence: Condition = Eq("bulk_ids", list(job.bulk_ids)) if job.bulk_ids else Lacks("bulk_ids")
    return [Set("bulk_ids", kept)], fence
