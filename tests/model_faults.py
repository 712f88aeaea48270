"""The table's faults in the system model (tests/twins/test_system_model.py): the tick's Lambda
dying right after any write, and transactions failing for a moment (throttling, a 5xx, a
conflict with another request), with or without their response lost after they committed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule

from dispatcher.ports.table import Delete as DeleteOp
from dispatcher.ports.table import Op, Put, Record, TableUnavailable, Update
from dispatcher.stages import admit as admit_module
from dispatcher.stages import launch_queue as launch_queue_module
from dispatcher.store import Store, codec
from dispatcher.store.base import TableRetry
from dispatcher.testing.memory_table import MemoryTable
from tests import model_checks as checks
from tests.model_promises import Promises, TenantTurns
from tests.twins import Twins


class LambdaDied(BaseException):
    """The tick's process died: a BaseException, so that no ``except Exception`` of the code
    under test handles it; the tick ends here, as when Lambda kills it."""


class FaultyTable(MemoryTable):
    """The table twin, with faults armed by the model for one step.

    ``crash_after(n)``: the n-th write from now (0-based; a single write or a committed
    transaction) is done, then its caller dies, and so does every later call of that process
    (its other threads), reads included, until :meth:`revive`. ``fail_next(k, lost)``: the
    next k transactions fail as a throttled or 5xx request would (``lost``: after committing,
    as when the response is lost on the way back; the store's retry replays its token)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(clock=clock)
        self.crash_at: int | None = None
        self.dead = False
        self.failing = 0
        self.lost = False
        self.failed = 0
        self.deaths = 0

    def crash_after(self, n: int) -> None:
        self.crash_at, self.dead = n, False

    def fail_next(self, k: int, lost: bool) -> None:
        self.failing, self.lost = k, lost

    def revive(self) -> None:
        self.crash_at, self.dead, self.failing = None, False, 0

    def _alive(self) -> None:
        if self.dead:
            raise LambdaDied("the tick's Lambda is dead")

    def _wrote(self) -> None:
        if self.crash_at is None:
            return
        if self.crash_at == 0:
            self.crash_at, self.dead = None, True
            self.deaths += 1
            raise LambdaDied("the tick's Lambda died right after a write")
        self.crash_at -= 1

    # -- reads: a dead process reads nothing -------------------------------------------------------
    def get(self, pk: str) -> Record | None:
        self._alive()
        return super().get(pk)

    def get_many(self, pks: list[str]) -> list[Record]:
        self._alive()
        return super().get_many(pks)

    def query(self, status_key: str, **kwargs: Any) -> list[Record]:
        self._alive()
        return super().query(status_key, **kwargs)

    def count(self, status_key: str, **kwargs: Any) -> int:
        self._alive()
        return super().count(status_key, **kwargs)

    # -- writes ---------------------------------------------------------------------------------
    def write(self, op: Put | Update | DeleteOp) -> Record | None:
        self._alive()
        out = super().write(op)
        self._wrote()
        return out

    def transact(self, ops: list[Op], *, token: str | None = None) -> None:
        self._alive()
        if self.failing and not self.lost:
            self.failing -= 1
            self.failed += 1
            raise TableUnavailable("TransactWriteItems", "InternalServerError",
                                   "Internal server error", status=500)
        super().transact(ops, token=token)
        if self.failing:  # committed, but the caller hears of a 5xx
            self.failing -= 1
            self.failed += 1
            raise TableUnavailable("TransactWriteItems", "InternalServerError",
                                   "Internal server error", status=500)

    def _transact(self, ops: list[Op]) -> None:
        super()._transact(ops)
        self._wrote()


def model_store(table: FaultyTable, clock: Callable[[], float]) -> Store:
    """The store of the model's world: a transient failure is retried as in production, without
    waiting (the model's time is the fake clock; the waits are not what it checks)."""
    return Store(table, clock=clock, table_retry=TableRetry(sleep=lambda seconds: None))


class _AtOnce:
    """The intake's pool, run in the caller's thread at each submit (its futures done)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        try:
            f.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # as a pool thread keeps it for result()
            f.set_exception(exc)
        return f

    def shutdown(self, wait: bool = True, **kwargs: Any) -> None:
        pass

    def __enter__(self) -> _AtOnce:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class _AtEnd(_AtOnce):
    """The launch thread, run when the tick closes it: it launches after the intake."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.work: list[tuple[Future[Any], Callable[[], Any]]] = []

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        self.work.append((f, lambda: fn(*args, **kwargs)))
        return f

    def shutdown(self, wait: bool = True, **kwargs: Any) -> None:
        while self.work:
            f, call = self.work.pop(0)
            try:
                f.set_result(call())
            except BaseException as exc:
                f.set_exception(exc)


@contextmanager
def one_thread() -> Iterator[None]:
    """The tick's threads run in one order: which write is the n-th, or which transactions
    fail, does not depend on the scheduler (hypothesis replays each example exactly)."""
    stand_ins = ((admit_module, _AtOnce), (launch_queue_module, _AtEnd))
    saved = [vars(module)["ThreadPoolExecutor"] for module, _ in stand_ins]
    for module, stand_in in stand_ins:
        setattr(module, "ThreadPoolExecutor", stand_in)  # noqa: B010 - a test's stand-in
    try:
        yield
    finally:
        for (module, _), real in zip(stand_ins, saved, strict=True):
            setattr(module, "ThreadPoolExecutor", real)  # noqa: B010


class FaultRules:
    """The system model's rules that inject the table's faults, and the check after each
    whole tick (mixed into tests/twins/test_system_model.py's SystemModel, which provides the
    world and the helpers below)."""

    # Provided by SystemModel: table, twins, forced, env(), fail(), guarded(), sync(),
    # advance(), queues().
    table: FaultyTable
    twins: Twins
    # Receives of each message (by queue name and id) spent by a tick a fault cut short
    # before it recorded the message: the dead_letter check does not count them against the
    # dispatcher (tests/model_checks.py dead_letters says why).
    forced: dict[tuple[str, str], int]
    promises: Promises
    turns: TenantTurns
    recovered_launches: bool

    def after_tick(self, visible: set[str]) -> None:
        """Checked after a tick that ran to its end: what a crashed tick left is taken over,
        and each message visible before it was recorded, rejected or given back."""
        view = checks.View.read(self.table, self.twins.queue)
        self.fail("converged", checks.unconverged(view))
        found = checks.held(view, self.twins.queue, visible)
        for check in sorted({c for c, _ in found}):
            self.fail(check, [says for c, says in found if c == check])

    def faulty_tick(self) -> Any:
        """One tick on the faulty table, its threads in one order; the tick's decision, or
        None if it raised (a violation unless it was the injected death)."""
        def tick() -> Any:
            try:
                with one_thread():
                    return self.twins.stages(**self.env()).tick.tick()
            except (LambdaDied, TableUnavailable):
                return None  # the crash, or the table failing longer than the retries
            finally:
                self.table.revive()

        self.promises.forget()  # a fault may hold what a promise said would launch
        self.turns.forget()
        before = checks.receive_counts(self.queues())
        failed, deaths = self.table.failed, self.table.deaths
        decision = self.guarded("tick_raises", "a tick on a faulty table", tick)
        hit = self.table.failed > failed or self.table.deaths > deaths
        # Launches a crashed tick decided, completed by this one (or by this one before it
        # died too): under the limit of the tick that decided them (task_limit). Kept until
        # the step's check: a later tick of the same step does not undo it.
        self.recovered_launches = self.recovered_launches or decision is None \
            or bool(decision.launch.recovered)
        if hit and (decision is None or decision.intake.record_failures):
            # Cut short by the fault: each message it received and did not delete comes back
            # (given back now, or after its hold) for a receive the fault spent.
            for key, n in checks.receive_counts(self.queues()).items():
                self.forced[key] = self.forced.get(key, 0) + n - before.get(key, 0)
        return decision

    @rule(writes=st.one_of(st.integers(0, 4), st.integers(5, 30)), expire_lease=st.booleans())
    def crashing_tick(self, writes: int, expire_lease: bool) -> None:
        """The tick's Lambda dies right after its ``writes``-th table write (0-based; a tick
        with fewer ends well): what it received stays in flight until its hold ends, what it
        began stays RECORDING or LAUNCHING, its lease stays held. Then, when
        ``expire_lease``, time passes until the lease and the hold have run out."""
        self.table.crash_after(writes)
        self.faulty_tick()
        self.sync()
        lease = self.table._items.get(codec.LEASE_KEY)
        until = float(lease.lease_until or 0.0) if lease is not None else 0.0
        if expire_lease and until >= self.twins.clock():
            hold = float(self.twins.config(**self.env()).hold_seconds)
            self.advance(max(until - self.twins.clock(), hold) + 1.0)

    @rule(k=st.integers(1, 8), lost=st.booleans())
    def flaky_tick(self, k: int, lost: bool) -> None:
        """The next ``k`` table transactions fail for a moment (a 5xx; ``lost``: after they
        committed). The store retries them within the tick; what the tick still gives up
        on, it gives back to the queue at once. A tick may fail as a whole when the table
        keeps failing (the next tick does its work), never for something else."""
        visible = checks.visible(self.twins.queue)
        self.table.fail_next(k, lost)
        decision = self.faulty_tick()
        self.sync()
        if decision is not None and not decision.skipped:
            # A recording or launch whose writes kept failing may be left RECORDING or
            # LAUNCHING: the next tick takes it over (its own check says so), not this one.
            found = checks.held(checks.View.read(self.table, self.twins.queue),
                                self.twins.queue, visible)
            for check in sorted({c for c, _ in found}):
                self.fail(check, [says for c, says in found if c == check])
        else:  # it failed as a whole: it received nothing it did not give back
            found = checks.held(checks.View.read(self.table, self.twins.queue),
                                self.twins.queue, visible)
            self.fail("given_back", [says for c, says in found if c == "given_back"])

