"""Waiting in the main thread for Ctrl-C, SIGTERM or SIGHUP while other threads run.

`signal.pause()` is not enough there: the kernel delivers a process-directed signal to any
thread that does not block it, and when that is not the main thread, the main thread's
`pause()` never returns, so the Python handler (which runs only in the main thread) never runs
and the process ignores the signal. Python's C-level handler, in whichever thread it runs,
writes the signal number to the wakeup file descriptor; waiting on that descriptor wakes the
main thread whichever thread took the signal (asyncio waits the same way)."""

from __future__ import annotations

import select
import signal
import socket
from collections.abc import Callable, Iterable
from types import FrameType


def wait_for_a_stop(signals: Iterable[signal.Signals],
                    handler: Callable[[int, FrameType | None], object]) -> None:
    """Install `handler` for `signals` and block until one of them arrives and the handler
    raises (it must: this returns only through its exception). Main thread only."""
    for sig in signals:
        signal.signal(sig, handler)
    reader, writer = socket.socketpair()
    writer.setblocking(False)  # the C handler must never block on a full buffer
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        while True:
            select.select([reader], [], [])
            reader.recv(512)  # the pending Python handler runs at the next bytecode
    finally:
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
