"""What a cancel could not do, said so: the errors of a cancel that cannot keep its word for
some of the jobs it names (the rest are cancelled)."""

from __future__ import annotations

from dispatcher.domain.errors import LongjobsError

# The jobs an incomplete cancel names in its message, at most (all of them are in its
# ``jobs``).
NAMED = 10


class NotCancelled(LongjobsError):
    """A job a cancel could neither cancel at once nor ask its task to stop: it runs on, and
    ends as its handler ends."""


class CancelIncomplete(LongjobsError):
    """An array's cancel (or any cancel acting on many jobs) cancelled all it could and
    these jobs not: ``jobs`` maps each one's id to why. The parent is cancelled all the same
    (no child of it is recorded any more)."""

    def __init__(self, reason: str, *, job_id: str | None = None,
                 jobs: dict[str, str] | None = None) -> None:
        self.jobs = dict(jobs or {})
        super().__init__(reason, job_id=job_id)


def incomplete(parent_id: str, jobs: dict[str, str]) -> CancelIncomplete:
    """The error of a cancel of ``parent_id`` that left ``jobs`` (id -> why) running: it
    names them (the first :data:`NAMED`), why, and what to do next."""
    named = list(jobs.items())[:NAMED]
    more = f" and {len(jobs) - NAMED} more" if len(jobs) > NAMED else ""
    listed = "; ".join(f"{j}: {why}" for j, why in named)
    return CancelIncomplete(
        f"cancelled, except {len(jobs)} job(s) that run on until their handlers end: "
        f"{listed}{more}. `longjobs jobs show <job id>` says how each ends; to stop them "
        "now, stop the task running them (`jobs show` names it): its stop is settled as any "
        "early stop is", job_id=parent_id, jobs=jobs)
