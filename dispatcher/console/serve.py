"""Serving the console: uvicorn on one address, in the foreground (``longjobs console``) or in
a thread beside local mode (``longjobs local``, ``longjobs demo --console``)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from dispatcher.console.guard import Guard
from dispatcher.console.routes import console_app
from dispatcher.console.source import ConsoleSource
from dispatcher.domain.errors import ConfigError

LOOPBACK = ("127.0.0.1", "localhost", "::1")
# How long a console in a thread may take to start listening.
START_SECONDS = 20.0


def bound(host: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts, so that the URL printed is the
    one served (port 0: a free one) and a port in use is a clear error."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"the console cannot listen on {host}:{port} ({exc.strerror}); "
                          "choose another with --port (0: any free one)") from None
    sock.listen(128)
    return sock


def url(host: str, port: int) -> str:
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"


@dataclass
class Served:
    """A console listening in a thread of this process, and how to stop it."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def prepare(source: ConsoleSource, host: str, port: int, *, operate: bool,
            also: tuple[str, ...] = (), clock: Callable[[], float] = time.time
            ) -> tuple[uvicorn.Server, socket.socket, str]:
    sock = bound(host, port)
    actual = sock.getsockname()[1]
    guard = Guard.serving(host, actual, operate=operate, also=also)
    config = uvicorn.Config(console_app(source, guard, clock), log_level="warning",
                            access_log=False, lifespan="off", server_header=False)
    return uvicorn.Server(config), sock, url(host, actual)


def serve_forever(source: ConsoleSource, host: str, port: int, *, operate: bool,
                  on_ready: Callable[[str], None], also: tuple[str, ...] = ()) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM: uvicorn's own handling); ``also``: other
    host names it answers to."""
    server, sock, where = prepare(source, host, port, operate=operate, also=also)
    on_ready(where)
    # uvicorn shuts down on the signal, then raises it again (Ctrl-C: KeyboardInterrupt):
    # a stop asked for is not an error.
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])


def serve_in_thread(source: ConsoleSource, host: str = "127.0.0.1", port: int = 0, *,
                    operate: bool = False) -> Served:
    """Serve from a daemon thread; returns once it listens."""
    server, sock, where = prepare(source, host, port, operate=operate)
    # Off the main thread, uvicorn leaves the process's signals to their owner.
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]},
                              name="longjobs-console", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_SECONDS
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    if not server.started:
        raise ConfigError(f"the console did not start at {where}; see the lines above")
    return Served(where, server, thread)
