"""The container entrypoint (``python -m job_runner``) and the API job handlers use.

A handler is a plain callable ``handler(payload: dict, ctx: JobContext) -> JSON-able result``,
registered under a kind by the ``longjobs.handlers`` entry-point group or by
``LONGJOBS_HANDLERS=kind=module:function,...``.
"""

from dispatcher.domain.errors import Interrupted, PermanentError, RetryableError
from job_runner.context import JobContext

__all__ = ["Interrupted", "JobContext", "PermanentError", "RetryableError"]
