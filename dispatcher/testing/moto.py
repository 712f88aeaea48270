"""Start moto's server in-process for tests and local mode.

Server mode (not ``mock_aws``) is used because the job runner runs as a second process and
must reach the same fake AWS over HTTP.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from typing import Any

from moto.server import ThreadedMotoServer

__all__ = ["MotoEndpoint", "start_moto"]


class MotoEndpoint:
    """A running moto server plus the control-plane calls tests need (reset, task pinning)."""

    def __init__(self, server: ThreadedMotoServer, url: str) -> None:
        self._server = server
        self.url = url

    def _post(self, path: str, body: bytes = b"", content_type: str = "application/json") -> None:
        request = urllib.request.Request(  # noqa: S310 - always our own http://127.0.0.1 URL
            self.url + path, data=body, method="POST", headers={"Content-Type": content_type}
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            response.read()

    def reset(self) -> None:
        """Clear every backend so tests don't see each other's queues, tables and tasks.

        The state manager's transitions are global and survive a reset; call
        :meth:`pin_ecs_tasks` again only if something unset them.
        """
        self._post("/moto-api/reset")

    def pin_ecs_tasks(self) -> None:
        """Keep ECS tasks RUNNING instead of advancing one state per DescribeTasks call.

        moto otherwise walks every task to STOPPED on its own (without a stopCode), which makes
        tests that poll task state race against the emulator rather than against our code.
        """
        transition: dict[str, Any] = {"progression": "manual", "times": 1_000_000}
        body = json.dumps({"model_name": "ecs::task", "transition": transition}).encode()
        self._post("/moto-api/state-manager/set-transition", body)

    def stop(self) -> None:
        """Shut the server down and join its thread."""
        self._server.stop()

    def __enter__(self) -> MotoEndpoint:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_moto() -> MotoEndpoint:
    """Start moto on 127.0.0.1 with an OS-assigned port and return its endpoint.

    Port 0 lets the kernel pick the port when binding, so parallel test sessions cannot race
    for a port probed as free beforehand.
    """
    # werkzeug logs one line per request at INFO; with a polling dispatcher that drowns output.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return MotoEndpoint(server, f"http://{host}:{port}")


def release_model_copies() -> None:
    """Work around a moto (5.2) leak that otherwise sinks long local runs.

    moto deep-copies the whole table for every action of a TransactWriteItems call (its rollback
    copy), and the registry behind its web dashboard (``instances_tracked``) keeps every copy
    alive: ~10 M objects by the end of a 500-job run, multi-second GC pauses inside the endpoint
    (which serves the runners' heartbeats too) and a 10 s interpreter exit. The registry only
    feeds that dashboard; moto's own reset clears it the same way.
    """
    try:
        from moto.core.model_instances import reset_model_data
    except ImportError:
        return
    reset_model_data()
