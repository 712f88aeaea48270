"""longjobs: long batch jobs on ECS. Producers write ``from dispatcher import JobClient``.

The client is imported on first use, not with the package: the Lambda handlers and the job runner
import ``dispatcher.*`` modules too, and must not pay for (or depend on) the producer client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatcher.ops.client import JobClient

__all__ = ["JobClient"]


def __getattr__(name: str) -> Any:
    if name == "JobClient":
        from dispatcher.ops.client import JobClient

        return JobClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
