"""What an operator did through the console: who, what, on which jobs or filter, how many.

Every action the console takes (a job's cancel or retry, a bulk action by filter, a redrive
of the dead letters) is written as one :class:`AuditEntry` before its answer is given, and
the console's Audit page lists them, newest first. A bulk action's entry is written when it
is started (how many the dry run matched) and again when it ends (how many it acted on), so
an action cut short still left its start.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# What an entry's free text may hold at most (a filter's description, a reason): an entry is
# small whatever a person typed.
MAX_TEXT = 500


class AuditAction(StrEnum):
    CANCEL = "cancel"
    RETRY = "retry"
    BULK_CANCEL = "bulk-cancel"
    BULK_RETRY = "bulk-retry"
    REDRIVE = "redrive"


@dataclass(frozen=True)
class AuditEntry:
    """One operator action. ``who``: the person (a token's user name, or ``local:<user>`` for
    a console on one's own machine); ``target``: the job id, the filter, or the dead-letter
    queue; ``count``: how many jobs or messages it acted on (matched, for a bulk action's
    start); ``outcome``: ``done``, ``started`` or what it could not do; ``ref``: the bulk
    action's id, where there is one."""

    at: float
    who: str
    action: AuditAction
    target: str
    count: int
    outcome: str = "done"
    ref: str = ""
    entry_id: str = ""

    def clipped(self) -> AuditEntry:
        return AuditEntry(self.at, self.who[:MAX_TEXT], self.action, self.target[:MAX_TEXT],
                          self.count, self.outcome[:MAX_TEXT], self.ref[:MAX_TEXT],
                          self.entry_id)
