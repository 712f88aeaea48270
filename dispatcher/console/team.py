"""The console for a team: the same app as a Lambda function behind an API Gateway HTTP API
whose JWT authorizer lets in only tokens of the stack's issuer (a Cognito user pool it creates,
or one's own OIDC issuer), and a route's scope: ``longjobs/read`` to read a page,
``longjobs/operate`` to act (infra/template.yaml, ``TeamConsole``).

How a browser gets there: the authorizer reads the token from the ``Authorization`` header,
which a browser sends only when a script does, so the pages are read by the console's own
script (``static/console.js``) from ``/x/<page>`` with the token; the addresses a person sees
and links to (``/jobs?state=FAILED``) are a public *shell* that holds no data: it loads that
script, which signs in (OAuth 2.0's code flow with PKCE, as a public client: no secret in the
page) and then reads the page the address names. A state change is a POST the script sends
with the token, so another site's form can neither act nor read (no cookie is involved); its
form still carries a CSRF token, derived from the bearer token, and the same-origin check.

Who acts is the token's user; whether they may act is the ``longjobs/operate`` scope the
authorizer saw (the route already required it: this is the app's own second look).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request

from dispatcher.console.guard import CSP, HEADERS, Guard, Refused, Visitor, origin_of
from dispatcher.domain.errors import ConfigError
from dispatcher.settings import Config

SCOPE_READ = "longjobs/read"
SCOPE_OPERATE = "longjobs/operate"
# The authorized routes' prefix: /x/jobs is the jobs page read with a token.
BASE = "/x"
SCOPES = f"openid {SCOPE_READ} {SCOPE_OPERATE}"
# The CSRF token is an HMAC of the request's bearer token under this (public) key: only a
# page that holds the token can make it, and every instance of the function makes the same.
CSRF_KEY = b"longjobs-console-csrf"


@dataclass(frozen=True)
class Login:
    """What the browser needs to sign in: the issuer's OAuth 2.0 endpoints and the public
    client's id (no secret: the code flow with PKCE)."""

    client_id: str
    authorize_url: str
    token_url: str
    logout_url: str = ""
    scopes: str = SCOPES

    @staticmethod
    def of_config(cfg: Config) -> Login:
        for name, url in (("LONGJOBS_CONSOLE_AUTHORIZE_URL", cfg.console_authorize_url),
                          ("LONGJOBS_CONSOLE_TOKEN_URL", cfg.console_token_url)):
            if urlsplit(url).scheme not in ("https", "http") or not urlsplit(url).netloc:
                raise ConfigError(f"{name}={url[:80]!r} is not an http(s) URL")
        return Login(cfg.console_client_id, cfg.console_authorize_url, cfg.console_token_url,
                     cfg.console_logout_url)

    def token_origin(self) -> str:
        parts = urlsplit(self.token_url)
        return f"{parts.scheme}://{parts.netloc}"


def jwt_of(request: Request) -> tuple[dict[str, Any], list[str]]:
    """The claims and scopes API Gateway's JWT authorizer put in the event (payload 2.0:
    ``requestContext.authorizer.jwt``); a request without them was not authorized."""
    event = request.scope.get("aws.event") or {}
    jwt = ((event.get("requestContext") or {}).get("authorizer") or {}).get("jwt")
    if not isinstance(jwt, dict) or not isinstance(jwt.get("claims"), dict):
        raise Refused(401, "this request carries no verified token; sign in again")
    claims: dict[str, Any] = jwt["claims"]
    scopes = jwt.get("scopes")
    if not isinstance(scopes, list):  # the authorizer passes them; the claim says the same
        scopes = str(claims.get("scope", "")).split()
    return claims, [str(s) for s in scopes]


@dataclass
class TeamGuard(Guard):
    """The team console's rules: who a request is from and what they may do come from its
    verified token, not from how the console was started."""

    login: Login = field(default_factory=lambda: Login("", "", ""))
    read_only_hint = ("your user may only read: an administrator adds you to the stack's "
                      "operators group (docs/deploying.md, \"A console for your team\")")

    def check_host(self, request: Request) -> None:
        """None: API Gateway answers on its own names only, and a page of another site that
        rebinds a name has no token to send (the guard's host check is for loopback)."""

    def visitor(self, request: Request) -> Visitor:
        """The token's user; they may act if the console does (``operate``: the stack's
        LONGJOBS_CONSOLE_OPERATE) and their token has the operate scope."""
        claims, scopes = jwt_of(request)
        who = next((str(claims[k]) for k in ("username", "cognito:username", "email", "sub")
                    if claims.get(k)), "someone")
        return Visitor(who, self.operate and SCOPE_OPERATE in scopes)

    def token_for(self, request: Request) -> str:
        bearer = request.headers.get("authorization", "")
        return hmac.new(CSRF_KEY, bearer.encode(), hashlib.sha256).hexdigest()

    def check_origin(self, request: Request) -> None:
        if not self.visitor(request).operate:
            raise Refused(403, f"you may not act here: {self.read_only_hint}")
        origin = request.headers.get("origin") or origin_of(request.headers.get("referer"))
        # API Gateway says the scheme (X-Forwarded-Proto: https) and the host it was asked.
        if origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
            raise Refused(403, "a change must come from a page of this console (its Origin "
                          "did not match); reload the page and submit it again")

    def headers(self) -> dict[str, str]:
        """The CSP lets the script reach the issuer's token endpoint too (signing in)."""
        csp = CSP.replace("connect-src 'self'",
                          f"connect-src 'self' {self.login.token_origin()}")
        return {**HEADERS, "Content-Security-Policy": csp}
