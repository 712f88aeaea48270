"""The longjobs exception hierarchy.

Every error a user or operator can see is a ``LongjobsError``: it carries the job id (when there is
one) and a reason a person can read, so the CLI can print one line instead of a stack trace and the
job table can store the same words.
"""

from __future__ import annotations


class LongjobsError(Exception):
    """Base of every error longjobs raises on purpose."""

    def __init__(self, reason: str, *, job_id: str | None = None) -> None:
        self.reason = reason
        self.job_id = job_id
        super().__init__(f"{job_id}: {reason}" if job_id else reason)


class ConfigError(LongjobsError):
    """A configuration variable is missing or invalid; the message names it."""


class InvalidMessage(LongjobsError):
    """A queue message cannot become a job (not JSON, schema violation, unknown kind, too large)."""


class IllegalTransition(LongjobsError):
    """A state change the job state machine does not allow (e.g. SUCCEEDED -> RUNNING)."""


class ConflictError(LongjobsError):
    """A conditional write lost: somebody else changed the item first (a fence or a race)."""


class HandedJobs(LongjobsError):
    """A running bundle's last write found jobs handed to it that its runner has not run yet
    (urgent jobs, handed between its last heartbeat and its end): the bundle stays RUNNING and
    its runner runs them first. ``job_ids``: every job handed to the bundle so far;
    ``refused``: the jobs of the write whose update the table refused (they moved on)."""

    def __init__(self, reason: str, job_ids: list[str], refused: set[str] | None = None) -> None:
        self.job_ids = job_ids
        self.refused = refused or set()
        super().__init__(reason)


class AlreadyActed(LongjobsError):
    """A bulk operator action found its own mark on the job: this action already did it (a
    resumed run skips the job instead of acting twice)."""


class MarkNotKept(LongjobsError):
    """A resumed bulk operator action cannot tell whether it acted on the job: the job keeps
    the marks of only its latest bulk actions (``dispatcher.domain.sizes.MAX_BULK_MARKS``),
    it holds that many and not this action's, which may have been let go. Refused rather than
    risk acting twice; a single action on the job still works."""


class JobNotFound(LongjobsError):
    """No job with this id exists in the table."""


class ScheduleNotFound(LongjobsError):
    """No schedule of this name exists in the stack's schedule group."""


class ScheduleExists(LongjobsError):
    """A schedule of this name exists already."""


class InvalidSchedule(LongjobsError):
    """A schedule EventBridge Scheduler would refuse or refused: a name, expression, time zone
    or value it does not take."""


class ResourceMissing(LongjobsError):
    """An AWS resource the configuration names (queue, table, cluster, family) does not exist."""


class LaunchError(LongjobsError):
    """RunTask failed as a whole (not per-task ``failures[]``, which are data, not errors)."""


class SubmitError(LongjobsError):
    """Some jobs could not be enqueued even after retries; ``failed`` maps ids to reasons."""

    def __init__(self, reason: str, failed: dict[str, str]) -> None:
        self.failed = failed
        super().__init__(reason)


class RetryableError(LongjobsError):
    """Raised by a job handler: try the job again later while attempts remain."""

    def __init__(self, reason: str = "retryable error", *, job_id: str | None = None) -> None:
        super().__init__(reason, job_id=job_id)


class PermanentError(LongjobsError):
    """Raised by a job handler: fail the job now; retrying cannot help."""

    def __init__(self, reason: str = "permanent error", *, job_id: str | None = None) -> None:
        super().__init__(reason, job_id=job_id)


class Interrupted(LongjobsError):
    """Raised by ``ctx.raise_if_cancelled()`` when the task is stopping or the job was cancelled."""

    def __init__(self, reason: str = "interrupted", *, job_id: str | None = None) -> None:
        super().__init__(reason, job_id=job_id)


class TooLarge(PermanentError):
    """Data beyond its size budget (``dispatcher.domain.sizes``): e.g. a checkpoint too large
    for the job's item. Raised to the handler, which may catch it; uncaught, the job fails."""


class EventsNotPublished(LongjobsError):
    """Some job state-change events were not published even after retries; ``failed`` maps
    each event's id (``<job id>#<sequence>``) to the reason. Its stream records are handed
    back to be tried again (nothing is dropped without a word)."""

    def __init__(self, reason: str, failed: dict[str, str]) -> None:
        self.failed = failed
        super().__init__(reason)
