"""The task's one asyncio event loop, on its own thread, for ``async def`` handlers.

It starts the first time an async handler runs (a task of plain handlers never has one). Each
async job is an asyncio task on it, created with the context of the thread that submits it (so
the job's log keys follow the handler). :class:`job_runner.executor.Executor` watches each job
from its slot thread, not from the loop: a handler that blocks the loop or swallows its
``CancelledError`` still reaches a bounded outcome there (its grace, then abandoned).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any


class AsyncRun:
    """One handler call running as a task on the loop; ``done`` is set when the task ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self._loop = loop
        self._task: asyncio.Task[None] | None = None
        self._cancel_asked = False  # asked before the task existed (both read on the loop only)

    def cancel(self) -> None:
        """Cancel the asyncio task (from any thread): the handler sees ``CancelledError``."""
        with contextlib.suppress(RuntimeError):  # a closed loop: nothing runs there any more
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        self._cancel_asked = True
        if self._task is not None:
            self._task.cancel()

    def _spawn(self, body: Callable[[], Any], context: contextvars.Context) -> None:
        async def call() -> None:
            try:
                value = body()
                if inspect.isawaitable(value):
                    value = await value
            except asyncio.CancelledError:
                raise
            # The job's failure, recorded, never the loop's: SystemExit or KeyboardInterrupt
            # from a task would otherwise propagate out of run_forever and stop every job.
            except BaseException as exc:
                self.error = exc
            else:
                self.value = value

        task = self._loop.create_task(call(), context=context)
        task.add_done_callback(self._finished)
        self._task = task
        if self._cancel_asked:
            task.cancel()

    def _finished(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            self.error = asyncio.CancelledError(
                "the handler's asyncio task was cancelled")
        self.done.set()


class EventLoop:
    """A lazily started event loop on a daemon thread, shared by the task's async jobs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    def submit(self, body: Callable[[], Any], context: contextvars.Context) -> AsyncRun:
        """Run ``body()`` (a handler call returning a coroutine) as a task on the loop."""
        loop = self._started()
        run = AsyncRun(loop)
        loop.call_soon_threadsafe(run._spawn, body, context)
        return run

    def close(self) -> None:
        """Stop the loop (its thread ends); a task still on it is left, as a thread would be."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self.thread = threading.Thread(target=self._run, args=(loop,), daemon=True,
                                               name="job-loop")
                self.thread.start()
                self._loop = loop
            return self._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()
        if not asyncio.all_tasks(loop):  # an abandoned task may still be there: leave it be
            loop.close()


def is_async(handler: Callable[..., Any]) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    call = type(handler).__call__ if not inspect.isroutine(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)
