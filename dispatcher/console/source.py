"""What the console reads and acts through: the operator API of one stack."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dispatcher.ops.client import JobClient
from dispatcher.ops.queries import Queries
from dispatcher.ops.top import Top, from_config

# The overview's window: jobs admitted and launch failures within the last hour.
OVERVIEW_WINDOW_SECONDS = 3600.0


@dataclass
class ConsoleSource:
    """The client (actions, a job's page, bulk actions, dead letters), the read API (lists)
    and ``top``'s figures (the overview) of one stack; built once per console."""

    client: JobClient
    queries: Queries
    top: Top
    # Whether the stack has a dead-letter queue (LONGJOBS_DLQ_URL): its page says so if not.
    has_dead_letters: bool = True

    @staticmethod
    def of_settings(overrides: Mapping[str, str] | None = None) -> ConsoleSource:
        """The stack the settings name (the process's environment, with ``overrides`` over
        it), with the caller's own AWS credentials, as every CLI command reads it."""
        client = JobClient(overrides=overrides)
        return ConsoleSource(client, client.queries(logs=True, alarms=True),
                             from_config(client.cfg, window_seconds=OVERVIEW_WINDOW_SECONDS),
                             has_dead_letters=bool(client.cfg.dlq_url))
