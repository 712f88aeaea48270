"""A job's state changes as its record tells them: the path ``jobs show`` and the console's
job page list, without reading any event.

Every write that changes a job's state is one of its state-change events (numbered by its
``sequence``: dispatcher.domain.job_events), and the record keeps what each such write did:
its creation (``created_at``), each run's start and end or stop (its history: the runner's
``started_at`` and ``ended_at`` with the outcome, the stop handler's ``stopped_at``), each
operator retry and bulk cancel (their boundary entries), and its state now (``updated_at``,
its reason). Read in order they give the same transitions the events carry; when the count
differs from the sequence (a history that dropped old attempts for its size, a record written
before the sequence existed), the page says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dispatcher.ops.history import Attempt, Flat

PENDING, RUNNING = "PENDING", "RUNNING"
ENDS = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


@dataclass(frozen=True)
class StateChange(Flat):
    """One transition: ``state`` from ``previous`` (None: its creation) at ``changed_at``
    (None: the record does not tell when)."""

    changed_at: float | None
    state: str
    previous: str | None
    reason: str | None = None
    task_arn: str | None = None


def state_changes(created_at: float | None, state: str, updated_at: float | None,
                  reason: str | None, attempts: list[Attempt],
                  sequence: int | None = None) -> list[StateChange]:
    """The job's transitions, oldest first: created PENDING, then what each history entry
    did, then its state now if the last of those left it elsewhere. A job whose writes told
    one event (``sequence`` 1) was made in the state it is in (a schedule's fire skipped for
    its overlap is made CANCELLED)."""
    if sequence == 1:
        return [StateChange(created_at, state, None, reason)]
    out = [StateChange(created_at, PENDING, None)]

    def to(at: float | None, new: str, why: str | None = None,
           task: str | None = None) -> None:
        if new != out[-1].state:
            out.append(StateChange(at, new, out[-1].state, why, task))

    # Stops with no outcome that the job's ending followed (its state now, or the state a
    # retry found): each either ended it or reran it before it ended unrun (its relaunches
    # spent its budget). Kept as where that ending's transition goes in ``out``, and the
    # rerun it would follow.
    unsure: list[tuple[int, StateChange]] = []
    for n, a in enumerate(attempts):
        if a.retry is not None:  # an operator's retry, or a bulk cancel's mark
            if a.after is not None:  # the state it was retried from, reached unmarked (a
                to(None, a.after)  # cancel of one job leaves no entry): when, it cannot tell
            to(a.started_at, "CANCELLED" if a.retry.startswith("cancelled") else PENDING,
               a.retry)
            continue
        if a.started_at is not None:  # (an entry of neither: the omitted attempts' marker)
            to(a.started_at, RUNNING, None, a.task_arn)
        if a.stopped_at is None:
            continue
        if a.outcome in ENDS or a.outcome == PENDING:
            to(a.stopped_at, a.outcome, a.reason, a.task_arn)
            continue
        rerun = StateChange(a.stopped_at, PENDING, RUNNING, a.reason or a.stop_code,
                            a.task_arn)
        following = attempts[n + 1] if n < len(attempts) - 1 else None
        if (state in ENDS if following is None else following.retry is not None
                and not following.retry.startswith("cancelled") and following.after in ENDS):
            # The job ended next, with no run between: the stop that ended it (the stop
            # handler's write, no rerun) leaves the same entry as a stop that reran it, so
            # the ending follows the run here, and the sequence tells which it was (below).
            unsure.append((len(out), rerun))
        else:  # A task stopped under the run, and the job went on: it was rerun.
            to(rerun.changed_at, PENDING, rerun.reason, rerun.task_arn)
    if state in ENDS or state in (PENDING, RUNNING):
        to(updated_at, state, reason)
    if unsure and sequence is not None and len(out) + len(unsure) == sequence:
        # As many transitions fewer than its writes told as there are such stops: each reran
        # it (with fewer, the record cannot tell which did; the page says the counts differ).
        for i, rerun in reversed(unsure):
            out[i:i + 1] = [rerun, replace(out[i], previous=PENDING)]
    if sequence is not None and len(out) == sequence + 1 and len(out) > 1 \
            and out[1].changed_at is None:
        # One transition more than its writes told, the one the record keeps no time of
        # right after its creation: it was made in that state (an array's child whose
        # dependency had failed is made CANCELLED), not made PENDING and moved there.
        out[:2] = [StateChange(created_at, out[1].state, None, out[1].reason)]
    return out
