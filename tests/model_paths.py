"""The system model's check of the path a job's record tells (``jobs show``'s path, the
console's state changes: dispatcher.ops.job_path): for every job in the table, the
transitions derived from its record are, in order, the ones its state-change events told
(each event's previous state and state). Not checked where the record cannot tell: a history
that dropped old attempts for its size, a job whose earlier record TTL deleted (its events
start again at 1 with a new message of the same id). tests/twins/test_system_model_paths.py
shows it able to fail."""

from __future__ import annotations

from collections.abc import Mapping

from dispatcher.domain.job_events import JobStateChange
from dispatcher.ops.history import Attempt
from dispatcher.ops.job_path import state_changes
from dispatcher.store import codec as r
from tests.model_checks import View


def mistold(view: View, events: list[JobStateChange],
            expired: Mapping[str, int] | None = None) -> list[str]:
    told: dict[str, list[tuple[str | None, str]]] = {}
    for i, e in enumerate(events):
        if i >= (expired or {}).get(e.job_id, 0):
            told.setdefault(e.job_id, []).append((e.previous_state, e.state))
    out = []
    for pk, rec in view.items.items():
        if not pk.startswith("JOB#") or r.ident(pk) not in told or rec.array_size is not None:
            continue  # (an array's parent shows no path: its children tell it)
        entries = [h for h in rec.history or [] if isinstance(h, dict)]
        if any("omitted" in h for h in entries):
            continue
        path = state_changes(rec.created_at, str(rec.state), rec.updated_at, rec.reason,
                             [Attempt.from_history(h) for h in entries],
                             int(rec.sequence) if rec.sequence is not None else None)
        derived = [(c.previous, c.state) for c in path]
        if derived != told[r.ident(pk)]:
            out.append(f"{r.ident(pk)}: its record tells {derived}, its events "
                       f"{told[r.ident(pk)]}")
    return out
