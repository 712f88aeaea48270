"""The tick's launches while its drain goes on: one thread of their own, so the drain never waits
on RunTask (stages/tick.py hands each bundle over as it is recorded)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from dispatcher.domain.bundles import Bundle
from dispatcher.stages.launch import Launches, LaunchStats


class LaunchQueue:
    """Bundles handed over while the drain goes on, launched by one thread of their own: in
    order and paced, and the drain never waits on RunTask. Bundles that arrive while a launch
    is under way are launched together next (up to 10 per RunTask call). The stats are written
    by that thread only and read after it is joined; its failure is the tick's."""

    def __init__(self, launches: Launches, task_definition: str, stats: LaunchStats) -> None:
        self._launches = launches
        self._td = task_definition
        self._stats = stats
        self._lock = threading.Lock()
        self._waiting: list[Bundle] = []
        self._busy: Future[None] | None = None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="launch")
        self._done: list[Future[None]] = []

    def __call__(self, bundles: list[Bundle]) -> None:
        with self._lock:
            self._waiting += bundles
            if self._busy is None:
                self._busy = self._pool.submit(self._run)
                self._done.append(self._busy)

    def _run(self) -> None:
        while True:
            with self._lock:
                take, self._waiting = self._waiting, []
                if not take:
                    self._busy = None
                    return
            try:
                self._launches.launch(take, self._td, self._stats)
            except BaseException:
                # The tick fails with it (raised at exit); until then, bundles handed over
                # later still get a launch thread instead of waiting for the next tick.
                with self._lock:
                    self._busy = None
                raise

    def __enter__(self) -> LaunchQueue:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)
        for f in self._done:
            f.result()
