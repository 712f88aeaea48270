"""The console as an ASGI app: its routes over the read pages and the actions, its static
files (vendored in the package: no CDN) and the guard on every request."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.resources import files

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from dispatcher.console.actions import Actions
from dispatcher.console.guard import Guard, Headers
from dispatcher.console.pages import Pages
from dispatcher.console.rendering import Renderer
from dispatcher.console.source import ConsoleSource


def console_app(source: ConsoleSource, guard: Guard,
                clock: Callable[[], float] = time.time, *, background: bool = True
                ) -> Starlette:
    """The console of the stack ``source`` reads, under ``guard``'s rules; ``background``:
    whether a bulk action may go on after its answer (not in a Lambda function)."""
    render = Renderer(guard, clock)
    pages = Pages(source, render)
    actions = Actions(source, render, guard, background=background)
    static = StaticFiles(directory=str(files("dispatcher.console") / "static"))

    async def not_found(request: Request, exc: Exception) -> Response:
        return render.problem(request, 404, "No such page",
                              "The console has no page here; start from the overview.")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return PlainTextResponse("a page of the console is read with GET; a change is a POST "
                                 "from its own forms", status_code=405)

    routes = [
        Route("/", pages.answered(pages.overview)),
        Route("/jobs", pages.answered(pages.jobs)),
        Route("/jobs/{job_id:path}/cancel", actions.cancel, methods=["POST"]),
        Route("/jobs/{job_id:path}/retry", actions.retry, methods=["POST"]),
        Route("/jobs/{job_id:path}", pages.answered(pages.job)),
        Route("/bulk", pages.answered(actions.bulk_page)),
        Route("/bulk", actions.bulk, methods=["POST"]),
        Route("/bulk/{bulk_id}", pages.answered(actions.bulk_run)),
        Route("/deployments", pages.answered(pages.deployments)),
        Route("/dead-letters", pages.answered(pages.dead_letters)),
        Route("/dead-letters/redrive", actions.redrive, methods=["POST"]),
        Route("/audit", pages.answered(pages.audit)),
        Mount("/static", app=static, name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Headers, guard=guard)],
                     exception_handlers={404: not_found, 405: not_allowed})
