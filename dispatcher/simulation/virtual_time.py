"""Virtual time for running the production tick at AWS's latencies in a fraction of the time.

Every thread has a virtual clock of its own (:class:`VirtualClock`): a call to a modelled AWS
API charges its latency to the clock of the thread that makes it, and nothing sleeps. The tick
runs its AWS calls on thread pools (the drain's receives and recordings, the launch thread);
:class:`VirtualPool` stands in for ``ThreadPoolExecutor`` so that each task starts at the later
of the time it was submitted and the time one of the pool's ``max_workers`` lanes is free (an
M-server FIFO queue in virtual time), and its future is done, for the thread that waits on it,
only once that thread's clock has reached the task's end. :func:`virtual_wait` replaces
``concurrent.futures.wait``: it waits (for real) for the futures to run, then moves the
waiter's clock to the first one to end in virtual time, so the drain sees its work end in the
order it would on AWS, not in the order this machine happened to run it.

:func:`patched` installs both in the stage modules that use thread pools (the drain and the
tick's launch thread) for the length of a ``with`` block, without changing their code.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualClock:
    """A clock per thread: ``clock()`` is the calling thread's virtual time (a thread that
    never set it reads ``base``).

    One thread may *lead* (:meth:`lead`: the event loop that runs the tick): a thread that
    hands work to the lead's pools may wait until the lead's clock catches up with its own
    (:meth:`wait_for_lead`), so that what the lead hands over later in virtual time is not
    missed because this machine ran the pool thread first."""

    def __init__(self, base: float) -> None:
        self.base = base
        self._local = threading.local()
        self._moved = threading.Condition()
        self._lead: int | None = None
        self._lead_time = base
        self.lead_done = False  # the lead waits for the pool threads now: they need not wait

    def __call__(self) -> float:
        t: float = getattr(self._local, "t", self.base)
        return t

    def lead(self) -> None:
        """The calling thread leads from now on."""
        self._lead = threading.get_ident()

    def set(self, t: float) -> None:
        self._local.t = t
        if threading.get_ident() == self._lead:
            with self._moved:
                self._lead_time = t
                self._moved.notify_all()

    def charge(self, seconds: float) -> None:
        """The calling thread spends ``seconds`` (an AWS call's latency, a paced wait)."""
        self.set(self() + max(0.0, seconds))

    def at_least(self, t: float) -> None:
        """The calling thread cannot be earlier than ``t`` (it waited for something ending
        then)."""
        if t > self():
            self.set(t)

    def wait_for_lead(self) -> None:
        """Wait (for real) until the lead's clock reaches the calling thread's, or the lead
        waits for the pool threads."""
        if self._lead is None or threading.get_ident() == self._lead:
            return
        mine = self()
        with self._moved:
            while self._lead_time < mine and not self.lead_done:
                self._moved.wait(0.05)

    def release_followers(self, done: bool) -> None:
        with self._moved:
            self.lead_done = done
            self._moved.notify_all()


class VirtualFuture(cf.Future[T]):
    """A future that is done, for the thread asking, once its clock reaches the task's end;
    its result moves the asker's clock there."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._vclock = clock
        self.ends_at = float("inf")

    def done(self) -> bool:
        return super().done() and self.ends_at <= self._vclock()

    def result(self, timeout: float | None = None) -> T:
        try:
            return super().result(timeout)
        finally:
            self._vclock.at_least(self.ends_at)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(timeout)
        finally:
            self._vclock.at_least(self.ends_at)


class VirtualPool(ThreadPoolExecutor):
    """``ThreadPoolExecutor``'s stand-in: real threads run the tasks at once, their virtual
    clocks say when each would start and end on ``max_workers`` lanes."""

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "", *,
                 clock: VirtualClock) -> None:
        workers = max_workers or 1
        super().__init__(workers, thread_name_prefix)
        self._vclock = clock
        self._lanes_lock = threading.Lock()
        self._free_at = [0.0] * workers
        self._busy = [False] * workers

    def _take_lane(self) -> int:
        with self._lanes_lock:
            lane = min((n for n in range(len(self._free_at)) if not self._busy[n]),
                       key=self._free_at.__getitem__)
            self._busy[lane] = True
            return lane

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> VirtualFuture[T]:
        submitted = self._vclock()
        future: VirtualFuture[T] = VirtualFuture(self._vclock)

        def task() -> None:
            lane = self._take_lane()
            self._vclock.set(max(submitted, self._free_at[lane]))
            try:
                value = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the waiter, as the real pool does
                future.ends_at = self._end(lane)
                future.set_exception(exc)
            else:
                future.ends_at = self._end(lane)
                future.set_result(value)

        super().submit(task)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The lead waits for this pool's threads: none of them waits for the lead."""
        self._vclock.release_followers(True)
        try:
            super().shutdown(wait, cancel_futures=cancel_futures)
        finally:
            self._vclock.release_followers(False)

    def _end(self, lane: int) -> float:
        end = self._vclock()
        with self._lanes_lock:
            self._free_at[lane] = end
            self._busy[lane] = False
        return end


def virtual_wait(clock: VirtualClock) -> Callable[..., cf._base.DoneAndNotDoneFutures[Any]]:
    """``concurrent.futures.wait`` in virtual time (``FIRST_COMPLETED`` is all the drain
    asks for): the waiter's clock moves to the first end among ``fs`` if none has ended, or
    ``timeout`` virtual seconds on if that comes first. Every task is run to its end in real
    time first (its end in virtual time is known only then)."""

    def wait(fs: Iterable[cf.Future[Any]], timeout: float | None = None,
             return_when: str = cf.ALL_COMPLETED) -> cf._base.DoneAndNotDoneFutures[Any]:
        pending = list(fs)
        cf.wait(pending)  # every task runs without waiting for the waiter
        ends = [getattr(f, "ends_at", clock()) for f in pending]
        until = float("inf") if timeout is None else clock() + timeout
        if return_when == cf.ALL_COMPLETED:
            clock.at_least(min(until, max(ends, default=clock())))
        elif not any(f.done() for f in pending):
            clock.at_least(min(until, min(ends, default=clock())))
        done = {f for f in pending if f.done()}
        return cf._base.DoneAndNotDoneFutures(done, set(pending) - done)

    return wait


@contextlib.contextmanager
def patched(clock: VirtualClock) -> Iterator[None]:
    """The stages' thread pools and waits in virtual time, for the ``with`` block."""
    from dispatcher.stages import admit, launch_queue, queue_drain

    def pool(max_workers: int | None = None, thread_name_prefix: str = "") -> VirtualPool:
        return VirtualPool(max_workers, thread_name_prefix, clock=clock)

    swaps = [(admit, "ThreadPoolExecutor", pool), (queue_drain, "wait", virtual_wait(clock)),
             (launch_queue, "ThreadPoolExecutor", pool)]
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, value in swaps:
        setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
