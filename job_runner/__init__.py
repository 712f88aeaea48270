"""The container entrypoint (``python -m job_runner``) and the API job handlers use.

A handler is a plain callable ``handler(payload: dict, ctx: JobContext) -> JSON-able result``
(run in a thread) or an ``async def`` one (run as a task on the runner's one event loop),
registered under a kind by the ``longjobs.handlers`` entry-point group or by
``LONGJOBS_HANDLERS=kind=module:function,...``. A task runs up to LONGJOBS_TASK_CONCURRENCY jobs
at once, so a handler may run beside others of its own kind in the same process.
"""

from dispatcher.domain.errors import Interrupted, PermanentError, RetryableError
from dispatcher.domain.progress import InvalidProgress
from job_runner.context import JobContext

__all__ = ["Interrupted", "InvalidProgress", "JobContext", "PermanentError", "RetryableError"]
