"""pynamodb's connection, its botocore client made as the other clients are made.

pynamodb makes its client from a botocore session of its own (one per thread), which parses
botocore's data files again: ~75 ms of CPU per client, paid by every runner process, every
tick's first transaction on each of its threads at once, and every store a process opens.
Made from :func:`dispatcher.aws.clients.new_session` instead, over the files parsed once per
process, a client takes ~20 ms, and only the first caller makes it.
"""

from __future__ import annotations

import threading

import botocore.session
from pynamodb.connection import Connection

from dispatcher.aws.clients import new_session

# Held only while a connection makes its client (once per connection): threads that call at
# once wait for the one client instead of each making one.
_making = threading.Lock()


class SharedDataConnection(Connection):
    """A pynamodb :class:`~pynamodb.connection.Connection` whose sessions share the process's
    parsed botocore data, and whose client is made by one thread only. It adds no state, so
    an existing connection can be made one (:func:`share_parsed_data`)."""

    @property
    def session(self) -> botocore.session.Session:
        # As pynamodb's own (one session per thread: making a client on a shared session is
        # not thread-safe), but over the shared data files; longjobs passes no keys.
        if getattr(self._local, "session", None) is None:
            self._local.session = new_session()
        session: botocore.session.Session = self._local.session
        return session

    @property
    def client(self):  # type: ignore[no-untyped-def]  # pynamodb's private client type
        if self._client is None:
            with _making:
                return super().client
        return super().client


def share_parsed_data(connection: Connection) -> None:
    """Make pynamodb's ``connection`` (a model's, which pynamodb makes itself) a
    :class:`SharedDataConnection`, before its first call."""
    connection.__class__ = SharedDataConnection
