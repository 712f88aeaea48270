"""An HTTP proxy in front of moto that adds the AWS behaviour moto does not emulate.

moto ignores RunTask's ``clientToken``, never fills ``failures[]``, accepts ``count`` > 10 and
never throttles; the dispatcher's correctness depends on all four. Injecting them at the HTTP
boundary keeps botocore's real serialisation, error parsing and retry logic in the loop, and
works for a second process (the job runner) too, unlike a botocore ``Stubber``. The generic
crash injection lets tests kill a call before or after its side effects reach "AWS".
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import threading
import urllib.parse
import uuid
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dispatcher.testing import item_changes
from dispatcher.testing.aws_requests import (
    RecordedCall,
    request_operation,
    request_scope,
    request_target,
)

__all__ = ["AwsProxy", "RecordedCall"]

RUNTASK = "ecs.RunTask"
# The error code each throttleable service answers a throttled call with.
THROTTLED = {"dynamodb": "ProvisionedThroughputExceededException", "ecs": "ThrottlingException"}
_MAX_RUNTASK_COUNT = 10
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "proxy-connection", "expect", "content-length"}
)
# BaseHTTPRequestHandler writes its own Server and Date headers; don't send two of each.
_DROP_FROM_UPSTREAM = _HOP_BY_HOP | {"server", "date"}
# status, headers, body
Response = tuple[int, list[tuple[str, str]], bytes]

def _json_response(status: int, payload: dict[str, Any], error_type: str | None = None) -> Response:
    headers = [("Content-Type", "application/x-amz-json-1.1"),
               ("x-amzn-RequestId", str(uuid.uuid4()))]
    if error_type is not None:
        headers.append(("x-amzn-ErrorType", error_type))
    return status, headers, json.dumps(payload).encode()


def _error(error_type: str, message: str) -> Response:
    """A JSON-protocol error; botocore reads the code from ``__type`` for sqs, dynamodb, ecs."""
    return _json_response(400, {"__type": error_type, "message": message}, error_type)


class _Server(ThreadingHTTPServer):
    """A client that hung up before its answer (a task process killed or done) is not an
    error of the proxy's: that one is not printed with a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class AwsProxy:
    """Forward AWS API calls to ``upstream_url`` (moto), counting and perturbing them.

    Every injection is one-shot or counted, consumed by the next matching request, and guarded
    by one lock so that concurrent dispatcher threads see each injection exactly once.
    """

    def __init__(self, upstream_url: str, *, capture_items: bool = False) -> None:
        parsed = urllib.parse.urlsplit(upstream_url)
        if parsed.scheme != "http" or parsed.hostname is None:
            raise ValueError(f"upstream must be an http:// URL, got {upstream_url!r}")
        self._upstream = (parsed.hostname, parsed.port or 80)
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._runtask_failures: deque[str] = deque()
        self._throttles = 0
        self._throttled_share = 0.0
        self.throttled = 0  # calls answered as throttled (throttle_share)
        self._throttle_draws = random.Random(0)
        self._errors: dict[str, deque[bool | None]] = {}
        self._token_cache: dict[str, tuple[Any, Response]] = {}
        self._token_locks: dict[str, threading.Lock] = {}
        self.runtask_requests: list[dict[str, Any]] = []
        self.runtask_forwarded = 0
        self._component: str | None = None
        self._recorded: list[RecordedCall] = []
        self.capture_items = capture_items
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("AwsProxy is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> AwsProxy:
        """Bind 127.0.0.1 on a kernel-chosen port and serve from a daemon thread."""
        proxy = self

        class Handler(_ProxyHandler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="aws-proxy", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> AwsProxy:
        return self if self._server is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- observation and injection -----------------------------------------------------------
    def counts(self) -> Counter[str]:
        """Requests received per ``service.Operation`` (a copy), injected errors included."""
        with self._lock:
            return Counter(self._counts)

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    @contextmanager
    def recording(self, component: str) -> Iterator[None]:
        """Record every request received meanwhile as made by ``component``.

        The label is the proxy's, not a thread's: it covers a subprocess (the job runner) too,
        so run one component at a time while recording. Nothing is recorded without a label.
        """
        with self._lock:
            previous, self._component = self._component, component
        try:
            yield
        finally:
            with self._lock:
                self._component = previous

    def recorded(self) -> list[RecordedCall]:
        """The calls recorded under component labels so far (a copy), oldest first."""
        with self._lock:
            return list(self._recorded)

    def clear_recorded(self) -> None:
        with self._lock:
            self._recorded.clear()

    def inject_runtask_failures(self, reasons: list[str]) -> None:
        """Make the next RunTask report ``reasons`` in ``failures[]`` instead of starting tasks.

        A call with ``count`` n consumes up to n queued reasons; any surplus waits for the
        following call.
        """
        with self._lock:
            self._runtask_failures.extend(reasons)

    def inject_throttle(self, times: int) -> None:
        """Answer the next ``times`` RunTask calls with ThrottlingException (retryable)."""
        with self._lock:
            self._throttles += times

    def throttle_share(self, share: float, seed: int = 0) -> None:
        """Throttle ``share`` (0 to 1) of the DynamoDB and ECS calls from now on, drawn at
        random (seeded), each answered as AWS answers a throttled call: DynamoDB's
        ProvisionedThroughputExceededException, ECS's ThrottlingException; both are retried by
        botocore and the adapters. SQS is never throttled: "Standard queues support a nearly
        unlimited number of API calls per second, per API action"
        (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-queues.html)."""
        with self._lock:
            self._throttled_share = share
            self._throttle_draws = random.Random(seed)

    def inject_error(self, operation: str, *, after_forward: bool, times: int = 1,
                     skip: int = 0) -> None:
        """Fail the next ``times`` calls of ``operation`` (e.g. ``sqs.DeleteMessageBatch``).

        With ``after_forward`` the request reaches moto first, so its effects persist while the
        caller sees an error: the "crashed after AWS committed" case. A 400 with a
        non-throttling code is not retried by botocore, so the caller really sees it.
        ``skip`` lets that many calls of the operation pass first (e.g. fail the second
        TransactWriteItems of a tick, not the first).
        """
        plan: list[bool | None] = [None] * skip + [after_forward] * times
        with self._lock:
            self._errors.setdefault(operation, deque()).extend(plan)

    # -- request pipeline (called from handler threads) ---------------------------------------
    def _handle(self, method: str, path: str, headers: list[tuple[str, str]],
                body: bytes) -> Response:
        if path.startswith("/moto-api/"):
            return self._forward(method, path, headers, body)
        operation = request_operation(path, headers, body, method)
        request: dict[str, Any] | None = None
        if operation == RUNTASK:
            try:
                parsed = json.loads(body or b"{}")
            except ValueError:
                parsed = None
            request = parsed if isinstance(parsed, dict) else None
        with self._lock:
            component = self._component
        record = None
        if component is not None and operation is not None:
            content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
            record = RecordedCall(component, operation, request_target(body, path, content_type))
        captured = record is not None and self.capture_items and request is None and (
            operation in item_changes.WRITES or operation in item_changes.READS)
        with self._lock:
            if record is not None and not captured:
                self._recorded.append(record)
            if operation is not None:
                self._counts[operation] += 1
            if request is not None:
                self.runtask_requests.append(request)
            queued = self._errors.get(operation or "")
            after_forward = queued.popleft() if queued else None
            service = (operation or "").partition(".")[0]
            throttled = service in THROTTLED and self._throttled_share > 0 \
                and self._throttle_draws.random() < self._throttled_share
        if throttled:
            with self._lock:
                self.throttled += 1
            return _error(THROTTLED[service], "Rate exceeded (injected)")
        if after_forward is False:
            return _error("InjectedCrash", f"injected crash before {operation}")
        if captured and record is not None:
            response = self._captured(record, method, path, headers, body)
        elif request is not None:
            response = self._run_task(method, path, headers, request)
        else:
            response = self._forward(method, path, headers, body)
        if after_forward:
            return _error("InjectedCrash", f"injected crash after {operation}")
        return response

    def _run_task(self, method: str, path: str, headers: list[tuple[str, str]],
                  request: dict[str, Any]) -> Response:
        """RunTask as AWS does it: throttling, the count limit, clientToken, failures[]."""
        with self._lock:
            if self._throttles > 0:
                self._throttles -= 1
                return _error("ThrottlingException", "Rate exceeded")
        count = int(request.get("count", 1))
        if count > _MAX_RUNTASK_COUNT:
            return _error("InvalidParameterException",
                          f"count must be at most {_MAX_RUNTASK_COUNT}, got {count}")
        token = request.get("clientToken")
        if not isinstance(token, str):
            return self._run_task_uncached(method, path, headers, request, count)
        with self._lock:
            token_lock = self._token_locks.setdefault(token, threading.Lock())
        # Serialise calls per token so that a concurrent retry replays instead of double-starting.
        with token_lock:
            with self._lock:
                cached = self._token_cache.get(token)
            if cached is not None:
                first_request, first_response = cached
                if first_request != request:
                    # ECS names the tasks the token's first call started (resourceIds).
                    # https://docs.aws.amazon.com/botocore/latest/reference/services/ecs/
                    # client/exceptions/ConflictException.html
                    started = [t["taskArn"] for t in json.loads(first_response[2]).get(
                        "tasks", [])]
                    return _json_response(400, {
                        "__type": "ConflictException", "resourceIds": started,
                        "message": "The provided clientToken is already in use with a "
                                   "different RunTask request."}, "ConflictException")
                return first_response
            response = self._run_task_uncached(method, path, headers, request, count)
            if response[0] == 200:
                with self._lock:
                    self._token_cache[token] = (request, response)
            return response

    def _run_task_uncached(self, method: str, path: str, headers: list[tuple[str, str]],
                           request: dict[str, Any], count: int) -> Response:
        with self._lock:
            reasons = [self._runtask_failures.popleft()
                       for _ in range(min(count, len(self._runtask_failures)))]
        remaining = count - len(reasons)
        if remaining > 0:
            forwarded = dict(request, count=remaining) if reasons else request
            with self._lock:
                self.runtask_forwarded += 1
            response = self._forward(method, path, headers, json.dumps(forwarded).encode())
            if not reasons or response[0] != 200:
                return response
            status, response_headers, response_body = response
            payload: dict[str, Any] = json.loads(response_body)
        else:
            status, response_headers, payload = 200, _json_response(200, {})[1], {"tasks": []}
        region = request_scope(headers)[0] or "us-east-1"
        arn = f"arn:aws:ecs:{region}:123456789012:container-instance/injected"
        payload.setdefault("failures", []).extend({"arn": arn, "reason": r} for r in reasons)
        return status, response_headers, json.dumps(payload).encode()

    def _captured(self, record: RecordedCall, method: str, path: str,
                  headers: list[tuple[str, str]], body: bytes) -> Response:
        """Forward a DynamoDB call, recording the items it wrote (before and after, read from
        upstream outside the count) or the sizes of what it read."""
        answer: list[Response] = []

        def write() -> bool:
            answer.append(self._forward(method, path, headers, body))
            return answer[0][0] == 200

        def get(table: str, key: dict[str, Any]) -> dict[str, Any] | None:
            asked = [(k, "DynamoDB_20120810.GetItem" if k.lower() == "x-amz-target" else v)
                     for k, v in headers]
            got = self._forward("POST", "/", asked, json.dumps(
                {"TableName": table, "Key": key, "ConsistentRead": True}).encode())
            item: dict[str, Any] | None = json.loads(got[2] or b"{}").get("Item") \
                if got[0] == 200 else None
            return item

        if record.operation in item_changes.WRITES:
            record = replace(record, items=item_changes.changes(record.operation, body, write,
                                                                get))
        else:
            write()
            if answer[0][0] == 200:
                record = replace(record, read=item_changes.read_sizes(record.operation, body,
                                                                      answer[0][2]))
        with self._lock:
            self._recorded.append(record)
        return answer[0]

    def _forward(self, method: str, path: str, headers: list[tuple[str, str]],
                 body: bytes) -> Response:
        """Send one request upstream on a fresh connection and read the whole response."""
        connection = http.client.HTTPConnection(*self._upstream, timeout=120)
        try:
            # Keep the client's Host header: moto builds SQS queue URLs from it, so the URLs it
            # hands out keep pointing at the proxy.
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP:
                    connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body)))
            connection.putheader("Connection", "close")
            connection.endheaders(body)
            upstream = connection.getresponse()
            data = upstream.read()
            # A HEAD response's Content-Length describes the body a GET would return.
            drop = _DROP_FROM_UPSTREAM - ({"content-length"} if method == "HEAD" else set())
            kept = [(k, v) for k, v in upstream.getheaders() if k.lower() not in drop]
            return upstream.status, kept, data
        finally:
            connection.close()


class _ProxyHandler(BaseHTTPRequestHandler):
    """Reads a request, hands it to the owning :class:`AwsProxy`, writes the answer back."""

    owner: AwsProxy
    # HTTP/1.1 so botocore's pooled keep-alive connections are reused; every response therefore
    # carries an exact Content-Length.
    protocol_version = "HTTP/1.1"

    def _proxy(self) -> None:
        body = self._read_body()
        try:
            status, headers, data = self.owner._handle(
                self.command, self.path, list(self.headers.items()), body
            )
        except (OSError, http.client.HTTPException) as exc:
            status, headers, data = _error("ProxyUpstreamError", f"upstream failed: {exc}")
            status = 502
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if not any(name.lower() == "content-length" for name, _ in headers):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = _proxy

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: one line per request would drown test output, as with werkzeug."""
