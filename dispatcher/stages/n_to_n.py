"""n_to_n dependencies: an array whose child i waits for child i of another array (AWS Batch's
N_TO_N: https://docs.aws.amazon.com/batch/latest/APIReference/API_JobDependency.html).

Array B names ``{"job_id": "A", "n_to_n": true}`` (and a condition) in its ``depends_on``. B's
parent is not held on A as a whole: at each tick's offer (:class:`~dispatcher.stages.fanout.
ArrayTally`), :func:`frontiers` reads A's parent (is it an array of B's size?) and then the
states of ``A:i`` from B's first unrecorded child on, in index order, a page of 100 per
BatchGetItem and at most :data:`WINDOW_PAGES` pages per array, stopping at the first ``A:i``
not ended. B's children below that frontier are offered: ``B:i`` plainly when ``A:i`` ended as
the condition asks, and with ``depends_on=[A:i]`` (plain, that condition) when it ended
otherwise, so that the dependency machinery records it held and CANCELS it with a reason
naming ``A:i`` at once. The other children of B are unaffected.

A frontier whose window ended with every element read ended is resumable
(:attr:`Frontier.more`): the drain, once it has offered every child below it, moves it on by
one more window (:meth:`Frontier.extend`), and so on while the tick drains. So an array behind
one that ended far ahead of it is recorded in the ticks a plain array of its size takes (a
tick records thousands of one array's children), not a window a tick; each read is bounded,
and none is made for children the tick does not come to.

The frontier is a prefix: ``B:i`` may also wait for ``A:j`` (j < i) to end, since children are
recorded in index order. That only delays a child (A's children are recorded, bundled and
launched in index order too, so they end roughly in it); it never starts ``B:i`` before ``A:i``
ended as asked.

A child of A never recorded because A ended first (FAILED past its tolerated failures, or
CANCELLED) is offered as a dependency too: ``B:i`` is held on it and cancelled at once, its
reason saying that ``A:i`` was never made (``NEVER_MADE`` in
:mod:`dispatcher.domain.dependencies`); an operator who retries A later retries B too.

B's parent is CANCELLED (with the reason) when A is REJECTED, unknown past that grace, not an
array, or an array of another size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.domain import dependencies as deps
from dispatcher.domain.arrays import child_id
from dispatcher.domain.dependencies import Dependency
from dispatcher.domain.jobs import TERMINAL_JOB_STATES, Job, JobState
from dispatcher.store import StageStore
from dispatcher.store.array_jobs import OpenArray
from dispatcher.store.array_retry import CHILD_PAGE

# Pages of 100 elements one read of a frontier takes at most (at the offer, then each time the
# drain has offered every child below it): a bounded call, never the whole array at once.
WINDOW_PAGES = 10

StoredDependency = dict[str, str | bool]


def element_wise(parent: Job) -> list[Dependency]:
    """The n_to_n dependencies of an array's parent."""
    return [d for d in map(Dependency.from_json, parent.depends_on or []) if d.n_to_n]


def whole(parent: Job) -> list[StoredDependency]:
    """Its other dependencies, on whole jobs (as stored): the parent waits for those."""
    return [d for d in parent.depends_on or []
            if not (isinstance(d, dict) and d.get("n_to_n"))]


@dataclass
class Frontier:
    """What a tick may offer of one array with n_to_n dependencies."""

    limit: int  # children below it may be offered
    # Children to be offered held on their elements that ended against them (index -> the
    # ``depends_on`` of their message).
    held: dict[int, list[StoredDependency]] = field(default_factory=dict)
    cancel: str | None = None  # set: the whole array is CANCELLED with this reason
    # What a further read needs (the array's size, its dependencies and their parents); None
    # once it stopped at an element not ended or the array's end, or was never read.
    _reach: tuple[int, list[tuple[Dependency, Job]]] | None = None

    @property
    def more(self) -> bool:
        """Whether a further read may move it on: its last window read only ended elements."""
        return self._reach is not None

    def extend(self, store: StageStore) -> dict[int, list[StoredDependency]]:
        """Move it on by at most one window of elements from its limit (one BatchGetItem per
        page of them); the children it adds held, as :attr:`held` (which it joins). One
        caller at a time; TableUnavailable propagates (the frontier stays where it was)."""
        if self._reach is None:
            return {}
        size, element = self._reach
        page = max(1, CHILD_PAGE // len(element))  # indexes per BatchGetItem of at most 100
        stop = min(size, self.limit + WINDOW_PAGES * page)
        limit, held = self.limit, dict[int, list[StoredDependency]]()
        reach: tuple[int, list[tuple[Dependency, Job]]] | None = self._reach
        for start in range(self.limit, stop, page):
            indexes = range(start, min(stop, start + page))
            ids = [child_id(d.job_id, i) for i in indexes for d, _ in element]
            states = {j.job_id: j.state for j in store.get_jobs(ids)}
            ended = _ended(indexes, element, states, held)
            limit = ended
            if ended < indexes.stop:
                reach = None  # an element not ended: the next tick reads from here
                break
        self.limit, self._reach = limit, reach if limit < size else None
        self.held.update(held)
        return held


def frontiers(store: StageStore, open_arrays: list[OpenArray],
              now: float) -> dict[str, Frontier]:
    """The frontier of each array (by parent id) that has n_to_n dependencies, is not
    decided and has children to record; one BatchGetItem per 100 of their dependencies, then
    per page of elements. TableUnavailable propagates (the caller offers none of them in this
    tick)."""
    wanted = {a.parent.job_id: (a, element_wise(a.parent)) for a in open_arrays
              if a.parent.state not in TERMINAL_JOB_STATES and a.recorded < a.size}
    wanted = {k: v for k, v in wanted.items() if v[1]}
    if not wanted:
        return {}
    ids = sorted({d.job_id for _, ds in wanted.values() for d in ds})
    found = {j.job_id: j for start in range(0, len(ids), CHILD_PAGE)
             for j in store.get_jobs(ids[start:start + CHILD_PAGE])}
    missing = [i for i in ids if i not in found]
    states = store.job_states(missing) if missing else {}
    out: dict[str, Frontier] = {}
    for parent_id, (array, element) in wanted.items():
        reason = _refusal(array, element, found, states, now)
        if reason is not None or any(d.job_id not in found for d in element):
            out[parent_id] = Frontier(array.recorded, cancel=reason)  # or some A on its way
        else:
            out[parent_id] = _advance(store, array, [(d, found[d.job_id]) for d in element])
    return out


def _refusal(array: OpenArray, element: list[Dependency], found: dict[str, Job],
             states: dict[str, str | None], now: float) -> str | None:
    """Why the whole array is CANCELLED (None: it is not, or not yet)."""
    for dep in element:
        other = found.get(dep.job_id)
        if other is None:
            state = states.get(dep.job_id)
            if state == deps.REJECTED or now - array.parent.created_at > \
                    deps.UNKNOWN_GRACE_SECONDS:
                return deps.against_reason(dep, state)
            continue  # on its way: waited for
        if other.array_size is None:
            return (f"its n_to_n dependency {dep.job_id} is not an array job: element-wise "
                    "dependencies are between arrays")
        if other.array_size != array.size:
            return (f"its n_to_n dependency {dep.job_id} has {other.array_size} children, this "
                    f"array {array.size}: element-wise dependencies need arrays of one size")
    return None


def _advance(store: StageStore, array: OpenArray,
             element: list[tuple[Dependency, Job]]) -> Frontier:
    """The frontier's first window, from the array's first unrecorded child on (see the
    module)."""
    frontier = Frontier(array.recorded, _reach=(array.size, element))
    frontier.extend(store)
    return frontier


def _ended(indexes: range, element: list[tuple[Dependency, Job]],
           states: dict[str, JobState], held: dict[int, list[StoredDependency]]) -> int:
    """The first of ``indexes`` whose child must wait (``indexes.stop`` if none), given the
    states of their elements; the children before it to be held are added to ``held``."""
    for i in indexes:
        against: list[StoredDependency] = []
        for dep, other in element:
            mine = dep.element(i)
            state = states.get(mine.job_id)
            if state is None and other.state in TERMINAL_JOB_STATES:
                # Never recorded, and its array ended: held on it (see the module).
                against.append(mine.as_json())
                continue
            said = deps.verdict(mine, state)
            if said == deps.WAITING:
                return i
            if said == deps.AGAINST:
                against.append(mine.as_json())
        if against:
            held[i] = against
    return indexes.stop
