"""One JSON logger for the dispatcher and the event handler (powertools).

Stages log through the standard ``logging`` module (``logging.getLogger(__name__)``) so they need
no project import; this module gives the ``dispatcher`` logger tree powertools' JSON handler, so
their records (and their ``extra=`` keys) come out as the same JSON lines as the handlers' own.

Logs go to stderr: in Lambda both streams reach CloudWatch, and on the command line stdout
stays clean for ``--json`` output and decision records.
"""

from __future__ import annotations

import logging
import sys

from aws_lambda_powertools import Logger

logger = Logger(service="longjobs", logger_handler=logging.StreamHandler(sys.stderr))



def configure() -> None:
    """Route the ``dispatcher`` logger tree through the JSON handler (idempotent)."""
    tree = logging.getLogger("dispatcher")
    if logger.registered_handler not in tree.handlers:
        tree.addHandler(logger.registered_handler)
    tree.setLevel(logger.log_level)
    tree.propagate = False
