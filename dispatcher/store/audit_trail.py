"""The console's audit records in the table (:mod:`dispatcher.domain.audit`).

Each entry is an item ``AUDIT#<time>#<random>`` under the status index's partition ``AUDIT``,
sorted by its time: the Audit page reads one page of that partition, newest first (a query,
never a scan), then the page's items (the index projects none of an entry's fields). People
act a few times a minute at most, so one partition takes them; entries expire with the
table's retention, as finished jobs do.
"""

from __future__ import annotations

import secrets

from dispatcher.domain.audit import AuditAction, AuditEntry
from dispatcher.ports.table import Absent, Put, Record
from dispatcher.store import codec as r
from dispatcher.store.base import Reads

AUDIT_STATUS = "AUDIT"
AUDIT_PREFIX = "AUDIT#"


class AuditTrail(Reads):
    """Writing and reading the audit records."""

    def record_audit(self, entry: AuditEntry) -> AuditEntry:
        """Write ``entry`` (its time the table's clock's when it has none); returns it with
        its id."""
        at = entry.at or self.clock()
        pk = f"{AUDIT_PREFIX}{r.iso(at)}#{secrets.token_hex(4)}"
        kept = AuditEntry(at, entry.who, entry.action, entry.target, entry.count,
                          entry.outcome, entry.ref, pk).clipped()
        self.table.write(Put(Record(
            pk, status_key=AUDIT_STATUS, status_at=r.iso(at), created_at=at,
            expires_at=self._expiry(at), state=str(kept.action), reason=kept.outcome,
            payload={"who": kept.who, "target": kept.target, "count": kept.count,
                     "ref": kept.ref}), Absent()))
        return kept

    def audit_page(self, after: str | None = None, limit: int = 50
                   ) -> tuple[list[AuditEntry], str | None]:
        """Up to ``limit`` entries, newest first, older than entry ``after`` (an id this
        returned); and the cursor of the next page (None: no older entry)."""
        start = None
        if after is not None and after.startswith(AUDIT_PREFIX):
            start = Record(after, status_key=AUDIT_STATUS, status_at=after[len(AUDIT_PREFIX):]
                           .rsplit("#", 1)[0])
        keys = self.table.query(AUDIT_STATUS, newest_first=True, limit=limit + 1, after=start)
        more = len(keys) > limit
        keys = keys[:limit]
        got = {rec.pk: rec for rec in self.table.get_many([k.pk for k in keys])} if keys else {}
        entries = [_entry(got[k.pk]) for k in keys if k.pk in got]
        return entries, (keys[-1].pk if more and keys else None)


def _entry(rec: Record) -> AuditEntry:
    fields = rec.payload if isinstance(rec.payload, dict) else {}
    return AuditEntry(float(rec.created_at or 0), str(fields.get("who", "")),
                      AuditAction(str(rec.state)),
                      str(fields.get("target", "")), int(fields.get("count", 0) or 0),
                      rec.reason or "", str(fields.get("ref", "")), rec.pk)
