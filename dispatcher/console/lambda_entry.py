"""The team console's Lambda function (infra/template.yaml, ``ConsoleFunction``): API Gateway
HTTP API events (payload 2.0) adapted to the console's ASGI app by Mangum.

Two doors (:mod:`dispatcher.console.team`): the authorized routes ``/x`` and ``/x/{proxy+}``
(JWT authorizer; ``longjobs/read`` to read, ``longjobs/operate`` to act) reach the console's
pages and actions with the ``/x`` taken off; the public routes reach only the shell page and
the static files, which hold no data. Built once per instance, at its first event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from importlib.resources import files
from typing import Any

from mangum import Mangum
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dispatcher import settings
from dispatcher.console.guard import Headers
from dispatcher.console.rendering import environment
from dispatcher.console.routes import console_app
from dispatcher.console.source import ConsoleSource
from dispatcher.console.team import BASE, Login, TeamGuard

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
# The HTTP API's routes (infra/template.yaml, ConsoleApi): the shell's, public, and the pages',
# behind the JWT authorizer.
PUBLIC_ROUTES = frozenset({"GET /", "GET /{proxy+}"})
PAGE_ROUTES = frozenset({f"GET {BASE}", f"GET {BASE}/{{proxy+}}", f"POST {BASE}/{{proxy+}}"})


def _plain(status: int, text: str) -> dict[str, Any]:
    return {"statusCode": status, "body": text,
            "headers": {"content-type": "text/plain; charset=utf-8", "cache-control": "no-store"}}


class UnderBase:
    """The console's redirects (an action's answer: 303 to the page that shows what it did)
    kept behind the authorized door: the script follows them with the token, and ``/jobs``
    is the shell's address, ``/x/jobs`` the page's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                message = {**message, "headers": [
                    (k, BASE.encode() + v if k == b"location" and v.startswith(b"/")
                     and not v.startswith(b"//") else v) for k, v in message["headers"]]}
            await send(message)
        await self.app(scope, receive, sending)


def shell_app(guard: TeamGuard) -> Starlette:
    """The public door: the static files, and for any other address the shell page."""
    html = environment().get_template("shell.html").render(login=guard.login, base=BASE)

    async def shell(request: Request) -> Response:
        return HTMLResponse(html)

    static = StaticFiles(directory=str(files("dispatcher.console") / "static"))
    return Starlette(routes=[Mount("/static", app=static), Route("/{path:path}", shell)],
                     middleware=[Middleware(Headers, guard=guard)])


def build(env: Mapping[str, str] | None = None, source: ConsoleSource | None = None
          ) -> Handler:
    """The handler of a function configured by ``env`` (the stack's LONGJOBS_* variables;
    None: the process's environment, as :func:`dispatcher.settings.load` reads it);
    ``source``: the stack to read (tests give one), else the one the settings name."""
    cfg = settings.load("console", env)
    guard = TeamGuard(frozenset(), operate=cfg.console_operate, login=Login.of_config(cfg))
    source = source or ConsoleSource.of_settings(None if env is None else dict(env))
    # Each action's audit record is also a log line (the function's log group), at INFO.
    logging.getLogger("longjobs.console.audit").setLevel(logging.INFO)
    pages = Mangum(UnderBase(console_app(source, guard, background=False)), lifespan="off",
                   api_gateway_base_path=BASE)
    public = Mangum(shell_app(guard), lifespan="off")

    def handle(event: dict[str, Any], context: Any) -> dict[str, Any]:
        # The door is the route API Gateway matched (the event's routeKey), not the path: a
        # page is served only through a route the authorizer guards, and only with the
        # claims it verified.
        route = str(event.get("routeKey", ""))
        if route in PUBLIC_ROUTES:
            return public(event, context)
        if route not in PAGE_ROUTES:
            return _plain(404, "no such route of the console")
        jwt = ((event.get("requestContext") or {}).get("authorizer") or {}).get("jwt")
        if not isinstance(jwt, dict) or not jwt.get("claims"):
            return _plain(401, "this request carries no verified token; sign in again")
        http = event["requestContext"].get("http") or {}
        if str(http.get("path", "")) == BASE:  # the overview, /x without its slash
            event = {**event, "rawPath": BASE + "/",
                     "requestContext": {**event["requestContext"],
                                        "http": {**http, "path": BASE + "/"}}}
        return pages(event, context)

    return handle


# An instance serves many requests one after another: the app (its templates, its AWS
# clients) is built at its first and kept, a page's latency without that build each time.
_handler: Handler | None = None


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The function's entry point: the app built at the first event, from the environment."""
    global _handler
    if _handler is None:
        _handler = build()
    return _handler(event, context)
