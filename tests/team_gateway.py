"""A stand-in, on loopback, for what the team console runs behind on AWS: an API Gateway HTTP
API with a JWT authorizer on its ``/x`` routes, and the OAuth 2.0 issuer the browser signs in
with (Cognito's hosted endpoints). Only what the console relies on, as AWS documents it:

- the routes of infra/template.yaml: ``GET /`` and ``GET /{proxy+}`` public; ``GET /x``,
  ``GET /x/{proxy+}`` needing ``longjobs/read``, ``POST /x/{proxy+}`` ``longjobs/operate``;
  a request without a valid token is answered 401, one whose token lacks every scope the
  route names 403, both before the function is called ("Controlling access to HTTP APIs with
  JWT authorizers", https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-jwt-authorizer.html);
- the function gets the payload 2.0 event with ``requestContext.authorizer.jwt.claims`` and
  ``scopes`` ("Working with AWS Lambda proxy integrations for HTTP APIs",
  https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html);
- the issuer's ``/oauth2/authorize`` (the code flow, signing in at once as :attr:`user`) and
  ``/oauth2/token`` (the code exchanged for an access token only with the PKCE verifier whose
  S256 challenge it was given, RFC 7636).

Its tokens are random strings it remembers, not signed JWTs: the signature is the
authorizer's business, which this stands in for.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from dispatcher.console.team import SCOPE_OPERATE, SCOPE_READ
from tests.http_api_events import route_of

CLIENT_ID = "team-console-client"


@dataclass
class Gateway:
    """The stand-in's state: who signs in next, the codes and tokens it gave."""

    function: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None
    user: str = "alice"
    scopes: tuple[str, ...] = (SCOPE_READ, SCOPE_OPERATE)
    codes: dict[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)
    tokens: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    calls: list[str] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {"LONGJOBS_CONSOLE_CLIENT_ID": CLIENT_ID,
                "LONGJOBS_CONSOLE_AUTHORIZE_URL": f"{self.url}/oauth2/authorize",
                "LONGJOBS_CONSOLE_TOKEN_URL": f"{self.url}/oauth2/token",
                "LONGJOBS_CONSOLE_LOGOUT_URL": ""}


class Handler(BaseHTTPRequestHandler):
    gateway: Gateway

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self.answer("GET")

    def do_POST(self) -> None:
        self.answer("POST")

    def reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def answer(self, method: str) -> None:
        gw = self.gateway
        parts = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        gw.calls.append(f"{method} {parts.path}")
        if parts.path == "/oauth2/authorize":
            return self.authorize(parse_qs(parts.query))
        if parts.path == "/oauth2/token" and method == "POST":
            return self.token(parse_qs(body.decode()))
        try:
            route, needed = route_of(method, parts.path)
        except KeyError:
            return self.reply(404, b'{"message":"Not Found"}', {"Content-Type": "application/json"})
        claims = None
        if needed is not None:
            bearer = self.headers.get("Authorization", "")
            held = gw.tokens.get(bearer.removeprefix("Bearer ").strip())
            if held is None:
                return self.reply(401, b'{"message":"Unauthorized"}',
                                  {"Content-Type": "application/json"})
            user, scopes = held
            if not set(needed) & set(scopes):
                return self.reply(403, b'{"message":"Forbidden"}',
                                  {"Content-Type": "application/json"})
            claims = {"claims": {"username": user, "client_id": CLIENT_ID,
                                 "scope": " ".join(scopes)}, "scopes": list(scopes)}
        context: dict[str, Any] = {"http": {"method": method, "path": parts.path,
                                            "sourceIp": "127.0.0.1"}, "stage": "$default"}
        if claims is not None:
            context["authorizer"] = {"jwt": claims}
        headers = {k.lower(): v for k, v in self.headers.items()}
        headers["x-forwarded-proto"] = "http"  # the stand-in serves plain HTTP on loopback
        event = {"version": "2.0", "routeKey": route, "rawPath": parts.path,
                 "rawQueryString": parts.query, "headers": headers, "requestContext": context,
                 "body": base64.b64encode(body).decode(), "isBase64Encoded": True}
        assert gw.function is not None
        with gw.lock:
            out = gw.function(event, None)
        data = out.get("body", "")
        raw = base64.b64decode(data) if out.get("isBase64Encoded") else str(data).encode()
        self.reply(int(out["statusCode"]), raw, dict(out.get("headers") or {}))

    def authorize(self, q: dict[str, list[str]]) -> None:
        gw = self.gateway
        if q.get("client_id") != [CLIENT_ID] or q.get("code_challenge_method") != ["S256"] \
                or q.get("response_type") != ["code"]:
            return self.reply(400, b"bad authorization request", {})
        code = secrets.token_urlsafe(16)
        gw.codes[code] = (q["code_challenge"][0], gw.user, gw.scopes)
        where = q["redirect_uri"][0] + "?" + urlencode({"code": code, "state": q["state"][0]})
        self.reply(302, b"", {"Location": where})

    def token(self, form: dict[str, list[str]]) -> None:
        gw = self.gateway
        got = gw.codes.pop((form.get("code") or [""])[0], None)
        verifier = (form.get("code_verifier") or [""])[0].encode()
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
        if got is None or challenge.decode() != got[0]:
            return self.reply(400, b'{"error":"invalid_grant"}',
                              {"Content-Type": "application/json"})
        access = secrets.token_urlsafe(24)
        gw.tokens[access] = (got[1], got[2])
        body = json.dumps({"access_token": access, "expires_in": 3600,
                           "token_type": "Bearer"}).encode()
        self.reply(200, body, {"Content-Type": "application/json"})


@contextmanager
def serving(gateway: Gateway) -> Iterator[Gateway]:
    """The stand-in on a free loopback port, in a thread, one request at a time."""
    handler = type("BoundHandler", (Handler,), {"gateway": gateway})
    server = HTTPServer(("127.0.0.1", 0), handler)
    gateway.url = f"http://127.0.0.1:{server.server_address[1]}"
    def serve() -> None:
        # Mangum runs each request on its thread's event loop, as Lambda's one thread has.
        asyncio.set_event_loop(asyncio.new_event_loop())
        server.serve_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield gateway
    finally:
        server.shutdown()
        server.server_close()
