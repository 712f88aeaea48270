"""Which callable runs a job of a given kind: entry points first, then LONGJOBS_HANDLERS.

A handler is a plain function (run in a thread) or an ``async def`` one (run on the task's
event loop); see :mod:`job_runner.executor`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from dispatcher.domain.errors import ConfigError

Handler = Callable[[dict[str, Any], Any], Any]
GROUP = "longjobs.handlers"


def _resolve(spec: str) -> Handler:
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ConfigError(f"handler {spec!r} is not module:function")
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raises
        # as it is imported (a SyntaxError, a RuntimeError at import time): its jobs' error
        raise ConfigError(f"handler {spec!r} cannot be imported: "
                          f"{type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise ConfigError(f"handler {spec!r} is not callable")
    return obj  # type: ignore[no-any-return]


class HandlerRegistry:
    def __init__(self, handlers: dict[str, Handler] | None = None) -> None:
        self._handlers = dict(handlers or {})
        self._lazy: dict[str, str] = {}
        self._broken: dict[str, str] = {}  # kinds whose module failed to import: why
        self._lock = threading.Lock()  # jobs running at once look up their handlers at once

    @classmethod
    def load(cls, specs: tuple[str, ...]) -> HandlerRegistry:
        reg = cls()
        for ep in entry_points(group=GROUP):
            reg._lazy[ep.name] = ep.value
        for item in specs:
            kind, sep, spec = item.partition("=")
            if not sep or not kind.strip():
                raise ConfigError(f"LONGJOBS_HANDLERS entry {item!r} is not kind=module:function")
            reg._lazy[kind.strip()] = spec.strip()
        return reg

    def get(self, kind: str) -> Handler | None:
        """The handler, imported on first use so one broken module fails only its own jobs:
        each of them gets the import's ConfigError (the failure is remembered, not retried)."""
        with self._lock:
            if kind in self._broken:
                raise ConfigError(self._broken[kind])
            if kind not in self._handlers and kind in self._lazy:
                try:
                    self._handlers[kind] = _resolve(self._lazy[kind])
                except ConfigError as exc:
                    self._broken[kind] = exc.reason
                    raise
                finally:
                    self._lazy.pop(kind, None)
            return self._handlers.get(kind)

    def kinds(self) -> list[str]:
        return sorted({*self._handlers, *self._lazy, *self._broken})
