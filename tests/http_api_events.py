"""The events API Gateway's HTTP API sends a function (payload format 2.0), as its JWT
authorizer passes a verified token's claims and scopes on
(https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html),
for tests that call the team console's function (dispatcher/console/lambda_entry.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any
from urllib.parse import urlencode

from dispatcher.console.team import CSRF_KEY, SCOPE_OPERATE, SCOPE_READ

HOST = "abc123.execute-api.eu-west-1.amazonaws.com"
ORIGIN = f"https://{HOST}"
BEARER = "Bearer eyJ.the-token.sig"
# The CSRF token the console's pages carry for a request with BEARER.
CSRF = hmac.new(CSRF_KEY, BEARER.encode(), hashlib.sha256).hexdigest()


def route_of(method: str, path: str) -> tuple[str, tuple[str, ...] | None]:
    """The route of infra/template.yaml's ConsoleApi a request matches, and the scopes it
    needs (None: public); KeyError if none does."""
    if path == "/x" and method == "GET":
        return "GET /x", (SCOPE_READ,)
    if path.startswith("/x/"):
        if method in ("GET", "POST"):
            return f"{method} /x/{{proxy+}}", (SCOPE_READ if method == "GET" else SCOPE_OPERATE,)
    elif method == "GET":
        return ("GET /" if path == "/" else "GET /{proxy+}"), None
    raise KeyError(f"{method} {path}")


def http_api_event(method: str, path: str, *, user: str | None = "alice",
                   scopes: tuple[str, ...] = (SCOPE_READ,), form: dict[str, str] | None = None,
                   query: str = "", origin: str | None = ORIGIN) -> dict[str, Any]:
    """A request as the function gets it; ``user`` None: a route without the authorizer."""
    headers = {"host": HOST, "x-forwarded-proto": "https", "x-forwarded-port": "443",
               "authorization": BEARER}
    context: dict[str, Any] = {"http": {"method": method, "path": path,
                                        "sourceIp": "198.51.100.7", "protocol": "HTTP/1.1"},
                               "stage": "$default", "requestId": "r1"}
    if user is not None:
        context["authorizer"] = {"jwt": {"claims": {"username": user, "sub": "uuid-1",
                                                    "client_id": "client-1",
                                                    "scope": " ".join(scopes)},
                                         "scopes": list(scopes)}}
    event: dict[str, Any] = {"version": "2.0", "routeKey": route_of(method, path)[0],
                             "rawPath": path,
                             "rawQueryString": query, "headers": headers,
                             "requestContext": context, "isBase64Encoded": form is not None}
    if form is not None:
        headers["content-type"] = "application/x-www-form-urlencoded"
        event["body"] = base64.b64encode(urlencode(form).encode()).decode()
    if origin is not None and method == "POST":
        headers["origin"] = origin
    return event


def body_text(answer: dict[str, Any]) -> str:
    body = answer.get("body", "")
    return base64.b64decode(body).decode() if answer.get("isBase64Encoded") else str(body)
