"""One JSON logger for the dispatcher and the event handler (powertools).

Logs go to stderr: in Lambda both streams reach CloudWatch, and on the command line stdout
stays clean for ``--json`` output and decision records.
"""

from __future__ import annotations

import logging
import sys

from aws_lambda_powertools import Logger

logger = Logger(service="longjobs", logger_handler=logging.StreamHandler(sys.stderr))
