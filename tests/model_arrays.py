"""The whole-system model's checks of array jobs (tests/twins/test_system_model.py): each
array's parent is its children's aggregate, as far as the ticks have read them, and no child
is lost, made twice, or made beyond the array's size."""

from __future__ import annotations

from collections.abc import Collection

from dispatcher.domain import arrays
from dispatcher.domain.arrays import Tally
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, JobState
from dispatcher.store import codec as r
from tests.model_checks import View


def array_problems(view: View, expired: Collection[str]) -> list[str]:
    """``expired``: the jobs TTL deleted (after they ended)."""
    out = []
    for pk, rec in view.items.items():
        if not pk.startswith("JOB#") or rec.array_size is None:
            continue
        parent, size = r.ident(pk), int(rec.array_size)
        recorded, tally = int(rec.array_next or 0), Tally.from_json(rec.array_tally)
        if recorded > size or tally.settled > tally.recorded or tally.recorded > recorded:
            out.append(f"array {parent}: {recorded} recorded, {tally.settled} settled of "
                       f"{size}")
        if r.job_key(arrays.child_id(parent, size)) in view.items:
            out.append(f"array {parent} has a child beyond its size {size}")
        # What the parent read of its children is what they are (a child TTL deleted after
        # it ended is not checked).
        ended = {JobState.SUCCEEDED: 0, "failed": 0}
        for i in range(tally.settled):
            child = view.job(arrays.child_id(parent, i))
            if child is None:
                continue
            if child.state not in TERMINAL_JOB_STATES:
                out.append(f"array {parent}: child {i} is {child.state} but counted ended")
            ended[JobState.SUCCEEDED if child.state == JobState.SUCCEEDED else "failed"] += 1
        if rec.state != JobState.CANCELLED:
            want = arrays.aggregate(size, int(rec.array_tolerated or 0), tally)
            if rec.state != want:
                out.append(f"array {parent} is {rec.state}, its children's aggregate {want} "
                           f"({tally.as_json()}, {recorded} recorded of {size})")
        undecided = rec.state not in TERMINAL_JOB_STATES
        if (undecided or tally.settled < recorded) and r.array_key(parent) not in view.items:
            out.append(f"array {parent} ({rec.state}, {tally.settled} of {recorded} settled) "
                       "has no open marker: no tick would settle it")
        for i in range(tally.settled, recorded):  # recorded, not known ended: must exist
            child = arrays.child_id(parent, i)
            if view.job(child) is None and child not in expired:
                out.append(f"array {parent}: child {i} was recorded and is gone")
    return out
