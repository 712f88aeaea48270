"""Warm starts for local tasks: one process imports the runner once and forks each task.

Why: on Fargate every task has CPUs of its own, and the runner's imports (boto3, pynamodb,
pydantic: about a second of CPU) are part of a start latency that local mode models separately
(``LONGJOBS_LOCAL_START_SECONDS``). Here 60 tasks share the machine's cores, so 60 cold
``python -m job_runner`` processes would spend a minute of CPU importing the same modules,
delaying each other and the dispatcher by far more than Fargate does. A forked task runs the same
entrypoint (:func:`job_runner.process.main`) with its own environment, process group and exit
status, so the dispatcher, the task-event handler and the runner see nothing different.

Two sides:

- :func:`serve` (``python -m dispatcher.local.warm [module:function]``) is the starter. It
  imports the runner (not the handler modules: each task imports those), then reads one JSON
  request per line on its standard input (``{"id": n, "env": {...}}``), forks a task for each
  and answers ``started <id> <pid>``; it reaps its children and answers ``exited <pid> <code>``
  (negative: killed by that signal, as :mod:`subprocess` reports it); a request
  ``{"signal": s, "pid": p}`` signals the process group of a task not yet reaped. It stays
  single-threaded, so a fork never copies a lock held by another thread. It exits when its
  standard input closes. It runs in a session of its own, so a Ctrl-C at the terminal reaches
  local mode (which stops the tasks) and not the starter; and on Linux its tasks die with it
  (``PR_SET_PDEATHSIG``), so a task reported killed because its starter died is really gone,
  never left running a job that is rerun beside it.
- :class:`WarmStarter` runs the starter and returns :class:`WarmProcess` objects, which answer
  ``pid``, ``poll()`` and ``wait()`` the way :class:`subprocess.Popen` does, so
  :class:`dispatcher.local.local_launcher.LocalLauncher` treats both kinds of task alike.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO, Any

from dispatcher.aws.clients import parse_ahead
from dispatcher.domain.errors import LaunchError

# Exit code of a task whose runner could not even be called (a bug here, not in a job).
START_FAILED_EXIT = 70
# prctl(2): deliver this signal to the calling process when its parent dies.
PR_SET_PDEATHSIG = 1
# What a task runs: ``python -m job_runner`` calls this.
RUNNER = "job_runner.process:main"


class WarmProcess:
    """A task forked by the starter: the part of :class:`subprocess.Popen` the launcher uses."""

    def __init__(self, pid: int, starter: WarmStarter) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._done = threading.Event()
        self._starter = starter

    def signal_group(self, sig: int) -> None:
        """Signal the task's process group, through the starter: only the starter knows that
        the pid is still its unreaped child, so a signal can never reach a process that reused
        the pid of a task that has just ended."""
        if self.returncode is None:
            self._starter.signal(self.pid, sig)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(f"task process {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._done.set()


class WarmStarter:
    """Runs the starter process (lazily, and again if it dies) and forks tasks through it."""

    def __init__(self, env: dict[str, str], output: int | None,
                 preexec: Callable[[], None] | None = None, entry: str = RUNNER) -> None:
        self._env = env
        self._entry = entry
        self._output = output
        self._preexec = preexec
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._next_id = 0
        self._pending: dict[int, tuple[threading.Event, list[int]]] = {}
        self._live: dict[int, tuple[subprocess.Popen[bytes], WarmProcess]] = {}  # by pid
        # Exits the reader saw before spawn() registered the task: a task can end before the
        # thread that forked it gets the lock back.
        self._exits: dict[int, int] = {}
        # Tasks forked after their spawn() gave up waiting (a launch reported failed): killed
        # as their start is read, and their exits dropped, so none runs a launch that failed
        # and none leaves an exit for a later task that gets its pid.
        self._abandoned: dict[int, subprocess.Popen[bytes]] = {}  # request id: its starter
        self._orphans: dict[int, subprocess.Popen[bytes]] = {}  # their pids, until reaped

    @property
    def pid(self) -> int | None:
        """The starter's pid (its reaped tasks' CPU time is its children's), if it runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def spawn(self, env: dict[str, str], timeout: float = 60.0) -> WarmProcess:
        """Fork a task with this environment; returns once it exists."""
        with self._lock:
            proc = self._running()
            self._next_id += 1
            request_id = self._next_id
            reply: tuple[threading.Event, list[int]] = (threading.Event(), [])
            self._pending[request_id] = reply
            try:
                self._send({"id": request_id, "env": env})
            except LaunchError:
                del self._pending[request_id]
                raise
        if not reply[0].wait(timeout):
            with self._lock:
                if not reply[1]:  # (unless it came as the wait ended)
                    if self._pending.pop(request_id, None) is not None:
                        self._abandoned[request_id] = proc
                    raise LaunchError("local warm starter did not fork the task within "
                                      f"{timeout:g} s")
        if not reply[1]:
            raise LaunchError("local warm starter did not fork the task")
        return self._register(reply[1][0], proc)

    def signal(self, pid: int, sig: int) -> None:
        """Ask the starter to signal the process group of its task ``pid`` if not reaped."""
        with self._lock:
            self._send({"signal": int(sig), "pid": pid})

    def _send(self, request: dict[str, Any]) -> None:
        """Write one request line (under the lock)."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise LaunchError("local warm starter is not running")
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise LaunchError(f"local warm starter is gone: {exc}") from exc

    def _register(self, pid: int, proc: subprocess.Popen[bytes]) -> WarmProcess:
        with self._lock:
            task = WarmProcess(pid, self)
            code = self._exits.pop(pid, None)
            if code is None:
                self._live[pid] = (proc, task)
            else:
                task._exited(code)
            return task

    def _running(self) -> subprocess.Popen[bytes]:
        """The starter process, started on first use or after it died (under the lock)."""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "dispatcher.local.warm", self._entry], env=self._env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._output,
            preexec_fn=self._preexec, start_new_session=True)
        threading.Thread(target=self._read, args=(self._proc,), daemon=True,
                         name="warm-starter").start()
        return self._proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            word, a, b = [*line.decode().split(), "", "", ""][:3]
            with self._lock:
                if word == "started" and self._abandoned.get(int(a)) is proc:
                    del self._abandoned[int(a)]
                    self._orphans[int(b)] = proc
                    if self._proc is proc:  # (a new starter's own pids are not these)
                        with contextlib.suppress(LaunchError):
                            self._send({"signal": int(signal.SIGKILL), "pid": int(b)})
                elif word == "started":
                    event, out = self._pending.pop(int(a), (threading.Event(), []))
                    out.append(int(b))
                    event.set()
                elif word == "exited" and self._orphans.get(int(a)) is proc:
                    del self._orphans[int(a)]
                elif word == "exited":
                    live = self._live.pop(int(a), None)
                    if live is None:
                        self._exits[int(a)] = int(b)
                    else:
                        live[1]._exited(int(b))
        # This starter is gone: its tasks' exit statuses went with it. Report them as killed
        # rather than leave their watchers waiting forever; a request in flight fails. (A new
        # starter's tasks are not this one's.)
        proc.wait()
        with self._lock:
            for pid, (owner, task) in list(self._live.items()):
                if owner is proc:
                    task._exited(-signal.SIGKILL)
                    del self._live[pid]
            for gone in (self._abandoned, self._orphans):
                for n in [n for n, owner in gone.items() if owner is proc]:
                    del gone[n]
            if self._proc is proc or self._proc is None:
                for event, _ in self._pending.values():
                    event.set()
                self._pending.clear()

    def close(self) -> None:
        """Stop the starter (its running tasks are the launcher's to stop)."""
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)


# -- the starter process --------------------------------------------------------------------------
def _preload(entry: str) -> Callable[[], int]:
    """Import the entry point (``module:function``, the runner's main unless a test gives
    another), and with it the runner's libraries. Handler modules are not preloaded: each task
    imports them, so an edit to a handler reaches the next task, as with a cold start. botocore's
    data files for the table's client are parsed here too, once for every task."""
    module, _, name = entry.partition(":")
    main: Callable[[], int] = getattr(importlib.import_module(module), name)
    parse_ahead("dynamodb")
    return main


def _die_with(starter: int) -> None:
    """Linux: the kernel SIGKILLs this task when its starter dies, so no task outlives the
    process that reports its exit. Elsewhere, nothing."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != starter:  # it died before the prctl took effect
        os._exit(START_FAILED_EXIT)


def _child(env: dict[str, str], main: Callable[[], int], starter: int) -> None:
    """In the forked task: its own process group, environment and standard streams, and its
    death tied to the starter's; then the runner's entrypoint. Never returns."""
    code = START_FAILED_EXIT
    try:
        os.setpgid(0, 0)
        _die_with(starter)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(2, 1)  # the task's output is the starter's standard error
        os.close(devnull)
        os.environ.clear()
        os.environ.update(env)
        code = main()  # exits by itself (os._exit) once its jobs are done
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else START_FAILED_EXIT
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(entry: str = RUNNER) -> int:
    """The starter's loop (see the module's docstring)."""
    main = _preload(entry)
    starter = os.getpid()
    out: IO[bytes] = os.fdopen(os.dup(1), "wb", buffering=0)
    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through wfd
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    selector.register(rfd, selectors.EVENT_READ)
    buffer, open_input = b"", True
    live: set[int] = set()  # forked and not reaped: a pid here cannot have been reused
    while open_input:
        for key, _ in selector.select():
            if key.fd == rfd:
                with contextlib.suppress(BlockingIOError):
                    os.read(rfd, 4096)
                _reap(out, live)
                continue
            data = os.read(0, 65536)
            if not data:
                open_input = False
                break
            buffer += data
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request: dict[str, Any] = json.loads(line)
                if "signal" in request:  # reaping happens on this thread only: no race
                    if request["pid"] in live:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(request["pid"], request["signal"])
                    continue
                pid = os.fork()
                if pid == 0:
                    os.close(rfd)
                    os.close(wfd)
                    out.close()
                    _child(request["env"], main, starter)
                with contextlib.suppress(OSError):  # the child may have set it already
                    os.setpgid(pid, pid)
                live.add(pid)
                out.write(f"started {request['id']} {pid}\n".encode())
        _reap(out, live)
    return 0


def _reap(out: IO[bytes], live: set[int]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        live.discard(pid)
        out.write(f"exited {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


if __name__ == "__main__":
    sys.exit(serve(*sys.argv[1:2]))
