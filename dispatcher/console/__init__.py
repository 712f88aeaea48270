"""The web console: the job table as a person would rather look at it, in a browser.

A room on top of the operator API: every page reads through the queries and the ``JobClient``
the CLI uses (:mod:`dispatcher.ops`), never the table or an adapter directly, and every action
is one the CLI has (cancel, retry, bulk by filter, redrive). Its libraries are an extra of
their own (``longjobs[console]``); the Lambda handlers and the job runner never import it
(import-linter contracts in pyproject.toml). Safe by default (:mod:`dispatcher.console.guard`):
loopback only, read-only unless started with ``--operate``, every state change a same-origin
POST with a CSRF token, everything from jobs rendered as text under a CSP with no inline
script.
"""
