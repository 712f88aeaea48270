"""What keeps the console safe by default.

- **Its own host names only.** A request whose ``Host`` is not one the console serves (its
  address and ``localhost`` at its port) is refused: a page of another site that rebinds its
  own name to 127.0.0.1 (DNS rebinding) would otherwise read and act as a same-origin page.
- **Read-only unless started with ``--operate``**: every state change is refused by the
  server, not only left off the pages.
- **A state change is a POST from the console's own pages**: its ``Origin`` (or, a browser
  that sends none, its ``Referer``) is the console's own, and its form carries the console's
  CSRF token, a secret made at start and written only into its own pages (another site can
  neither read those pages nor guess it).
- **Every response** carries a Content-Security-Policy with no inline script and no source
  but the console's own (a job's text that reached a page as markup would still not run), and
  is neither framed, sniffed nor cached. Templates autoescape everything (:mod:`.routes`).
"""

from __future__ import annotations

import getpass
import hmac
import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
SAFE_METHODS = frozenset({"GET", "HEAD"})


class Refused(Exception):
    """A request the console will not act on, with what to do instead."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Visitor:
    """Who a request is from, as its audit records name them, and whether they may act."""

    who: str
    operate: bool


def local_user() -> str:
    """``local:<user>``: a console on one's own machine acts with that user's credentials."""
    try:
        return f"local:{getpass.getuser()}"
    except (OSError, KeyError):  # no user name in the environment nor the password database
        return "local"


@dataclass
class Guard:
    """The console's rules for one server: ``hosts`` it answers to (``host:port``, as a
    browser's ``Host`` header says them), ``operate`` whether it acts at all, and its CSRF
    token."""

    hosts: frozenset[str]
    operate: bool = False
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    who: str = field(default_factory=local_user)
    # What a read-only page says to do to act.
    read_only_hint = "start it with `longjobs console --operate` to cancel, retry or redrive"

    def visitor(self, request: Request) -> Visitor:
        return Visitor(self.who, self.operate)

    def token_for(self, request: Request) -> str:
        """The CSRF token the pages served to this request carry."""
        return self.token

    def headers(self) -> dict[str, str]:
        return HEADERS

    @staticmethod
    def serving(host: str, port: int, *, operate: bool = False,
                also: Iterable[str] = ()) -> Guard:
        """The rules of a console bound to ``host``:``port`` (loopback: ``localhost`` too;
        on port 80 a browser leaves the port out)."""
        names = {host, *also}
        if host in ("127.0.0.1", "localhost"):
            names |= {"127.0.0.1", "localhost"}
        elif host == "::1":
            names |= {"localhost"}
        netlocs = {f"[{n}]:{port}" if ":" in n else f"{n}:{port}" for n in names}
        if port == 80:
            netlocs |= {f"[{n}]" if ":" in n else n for n in names}
        return Guard(frozenset(netlocs), operate)

    def check_host(self, request: Request) -> None:
        host = request.headers.get("host", "")
        if host not in self.hosts:
            raise Refused(421, f"this console does not serve the host {host[:80]!r}; open it "
                          "at the address `longjobs console` printed")

    def check_origin(self, request: Request) -> None:
        """A state change, before its body is read: allowed at all, from the console's own
        page (its whole origin: http, one of its host names, its port)."""
        if not self.operate:
            raise Refused(403, f"this console is read-only; {self.read_only_hint}")
        origin = request.headers.get("origin") or origin_of(request.headers.get("referer"))
        parts = urlsplit(origin or "")
        if parts.scheme != "http" or parts.netloc not in self.hosts or parts.path not in ("", "/"):
            raise Refused(403, "a change must come from a page of this console (its Origin "
                          "did not match); reload the page and submit it again")

    def check_token(self, request: Request, form_token: object) -> None:
        if not isinstance(form_token, str) or not hmac.compare_digest(
                form_token.encode(), self.token_for(request).encode()):
            raise Refused(403, "the form's CSRF token is missing or stale (the console was "
                          "restarted?); reload the page and submit it again")


def origin_of(referer: str | None) -> str | None:
    if not referer:
        return None
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


class Headers(BaseHTTPMiddleware):
    """The host check before anything else, and :data:`HEADERS` on every response."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        super().__init__(app)
        self.guard = guard

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        try:
            self.guard.check_host(request)
            response = await call_next(request)
        except Refused as exc:
            response = PlainTextResponse(exc.reason, status_code=exc.status)
        except Exception:  # a page's bug: a plain 500, still under the headers
            logging.getLogger("longjobs.console").exception("%s %s failed", request.method,
                                                             request.url.path)
            response = PlainTextResponse("the console failed on this request (a bug: its "
                                         "log says where)", status_code=500)
        response.headers.update(self.guard.headers())
        return response

