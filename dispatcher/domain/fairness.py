"""How a tick's free task slots are shared between priorities: smooth weighted round robin.

Each priority has a weight (``LONGJOBS_PRIORITY_WEIGHTS``, default high=6, normal=3, low=1) and
a credit carried from tick to tick (the tick keeps it in the table: a tick is a new process,
so it cannot live in memory). Each slot is handed out in turn: every level with work still
waiting gains its weight in credit, the level with the most credit takes the slot (ties to the
higher priority) and pays back the weights' sum of the levels that competed for it.

Why not a fixed share per tick: with one free slot per tick, "at least one slot for each level,
highest first" gives that slot to high every tick, and low never runs. Carried across ticks,
the credit makes the slots over time follow the weights whatever the number per tick: with
high and low both waiting, low takes 1 slot in 7 (weights 6 and 1), high the other 6.

The bound: a level that has work waiting in every tick and at least one free slot per tick gets
a slot within :func:`patience` ticks, ``ceil(W / w) + 1`` (W the sum of all weights, w its own),
whatever the other levels do: 11 ticks for low at the default weights
(``tests/twins/test_capacity.py`` checks it under random demand, capacity and weights). A level
with nothing waiting when slots are shared loses its credit (it starts again from 0), and a
level is never given more slots than it has work for: slots it cannot use go to the others,
so no slot stays idle. The tick shares slots this way only when levels compete (more work
than free slots, in more than one level); otherwise each level gets what it has work for and
the credit stays as it was, which keeps the bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dispatcher.domain.jobs import PRIORITY_ORDER, Priority


def weight(p: Priority, weights: Mapping[str, int]) -> int:
    return max(1, int(weights.get(str(p), 1)))


def patience(p: Priority, weights: Mapping[str, int]) -> int:
    """Most ticks in a row a level with work waiting goes without a slot while slots free up
    (at least one a tick): ``ceil(W / w) + 1``."""
    total = sum(weight(q, weights) for q in PRIORITY_ORDER)
    return math.ceil(total / weight(p, weights)) + 1


def allocate(capacity: int, demand: Mapping[Priority, int], weights: Mapping[str, int],
             credit: Mapping[str, float]) -> tuple[dict[Priority, int], dict[str, float]]:
    """Slots per priority out of ``capacity``, each level at most its ``demand`` (slots it has
    work for), and the credit to carry to the next tick."""
    left = {p: max(0, demand.get(p, 0)) for p in PRIORITY_ORDER}
    carried = {str(p): float(credit.get(str(p), 0.0)) if left[p] else 0.0
               for p in PRIORITY_ORDER}
    slots = dict.fromkeys(PRIORITY_ORDER, 0)
    for _ in range(max(0, capacity)):
        waiting = [p for p in PRIORITY_ORDER if left[p] > slots[p]]
        if not waiting:
            break
        for p in waiting:
            carried[str(p)] += weight(p, weights)
        best = max(waiting, key=lambda p: carried[str(p)])  # first (higher) level on a tie
        carried[str(best)] -= sum(weight(p, weights) for p in waiting)
        slots[best] += 1
    return slots, carried
