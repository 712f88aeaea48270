"""The size budget of every item the project writes, in one place.

DynamoDB refuses an item over 400 KB, attribute names and values included
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html). A job's
item grows as it runs (checkpoint, result, error, history, reason), so each part has a
budget here, and the parts add up to less than the limit whatever a handler or producer does:
what a handler may refuse to exceed is refused with a clear error (payload at submit and
admission, checkpoint at ``ctx.checkpoint``, a result fails its job); what longjobs writes
itself (errors, reasons, history) is clipped, with a marker saying so and how large it was.

Sizes are measured as the table stores them, in UTF-8 bytes (as DynamoDB counts them): JSON
attributes (payload, checkpoint, result, error, history) as their compact JSON
(:func:`compact_json`), strings as themselves.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dispatcher.domain.errors import PermanentError, TooLarge

# DynamoDB's item limit (400 KB, with KB = 1024 bytes, as the table twin counts it).
ITEM_BYTES = 400 * 1024  # 409,600

# -- a job's item -------------------------------------------------------------------------------
# The producer's payload: refused at submit and at admission (REJECTED with the reason).
MAX_PAYLOAD_BYTES = 256 * 1024  # 262,144
# A handler's checkpoint: ``ctx.checkpoint`` raises TooLarge beyond it (the handler may catch it
# and go on; uncaught, the job fails with the reason). Progress markers, not data: large state
# belongs in S3 with its reference checkpointed.
MAX_CHECKPOINT_BYTES = 32 * 1024  # 32,768
# A handler's result: a larger one fails its job ("result too large"); it is not clipped, since
# a clipped result is wrong data that a reader could take for the whole.
MAX_RESULT_BYTES = 64 * 1024  # 65,536
# The recorded error: its type, message and traceback clipped (ERROR_*_BYTES below add up to
# 6,400 bytes, plus the keys and quotes), the traceback keeping its end (the raise).
MAX_ERROR_BYTES = 8 * 1024  # 8,192
ERROR_TYPE_BYTES = 256
ERROR_MESSAGE_BYTES = 2 * 1024
ERROR_TRACEBACK_BYTES = 4 * 1024
# The reason (a string attribute): clipped.
MAX_REASON_BYTES = 2 * 1024  # 2,048
# The history of attempts: the first entry, a marker saying how many were left out, and the
# latest ones, at most HISTORY_ENTRIES and MAX_HISTORY_BYTES in all. Each string of an entry is
# clipped to HISTORY_TEXT_BYTES (an entry has about a dozen keys, so one entry stays well
# under a sixth of the budget: a task ARN of a 255-character cluster name is about 350 bytes).
MAX_HISTORY_BYTES = 16 * 1024  # 16,384
HISTORY_ENTRIES = 12
HISTORY_TEXT_BYTES = 512
# The ids of the bulk actions that acted on the job (``bulk_ids``, the marks that let a resumed
# action skip it: dispatcher.store.bulk_marks): the latest MAX_BULK_MARKS, each at most
# MAX_BULK_ID_BYTES (a new action's id is 17 characters; an operator may name one), stored as
# a list of strings (1 byte a value besides its characters, 3 the list, 8 its name): at most
# 4,139 bytes.
MAX_BULK_MARKS = 32
MAX_BULK_ID_BYTES = 128
MAX_BULK_MARKS_BYTES = len("bulk_ids") + 3 + MAX_BULK_MARKS * (MAX_BULK_ID_BYTES + 1)
# A running job's progress report (``ctx.progress``: dispatcher.domain.progress), kept on its
# item with each checkpoint: its message is at most 200 characters (1,200 bytes as JSON if
# every one were escaped as \uXXXX), its five numbers and their keys about 200 bytes more.
MAX_PROGRESS_BYTES = 1536
# Its labels (dispatcher.domain.labels): at most 10 of a key of 64 ASCII characters and a
# value of 128 characters (512 bytes of UTF-8; no control character, so no escapes but a quote
# or a backslash's 2), each with its quotes, colon and comma: 5,822 bytes as JSON.
MAX_LABELS_BYTES = 6 * 1024
# Everything else on a job's item, generously: attribute names (~400 bytes), job id and kind
# (128 each, the id twice: key and attribute), tenant (64) and bundle id (~110 with the tenant
# it names), message id (100), settled_by and live_task (a task ARN each, ~350), the rate
# limits it uses (4 keys of 64 characters, each with its count: ~300 as JSON), the status
# keys, ISO times and about 15 numbers (at most 40 bytes each as DynamoDB stores them).
OTHER_JOB_BYTES = 8 * 1024  # 8,192
# 262,144 + 32,768 + 65,536 + 8,192 + 2,048 + 16,384 + 4,139 + 1,536 + 6,144 + 8,192 =
# 407,083 < 409,600: the largest job item that can be written is 2.5 KB under the limit
# (tests/twins/test_sizes.py encodes it).
JOB_ITEM_BUDGET = (MAX_PAYLOAD_BYTES + MAX_CHECKPOINT_BYTES + MAX_RESULT_BYTES + MAX_ERROR_BYTES
                   + MAX_REASON_BYTES + MAX_HISTORY_BYTES + MAX_BULK_MARKS_BYTES
                   + MAX_PROGRESS_BYTES + MAX_LABELS_BYTES + OTHER_JOB_BYTES)

# -- a REJECTED record --------------------------------------------------------------------------
# The first 4 KiB of the message body and the reason (MAX_REASON_BYTES), clipped: a record of
# about 7 KB whatever the message held (SQS allows 1 MiB), so a rejection never fails its batch.
REJECTED_BODY_BYTES = 4 * 1024

# -- a bundle's item ----------------------------------------------------------------------------
# Operators' cancel requests for jobs of an active bundle (``cancel_jobs``): each job once, and
# at most this many (a job id is at most 128 characters: 1,000 are about 130 KB). With the job
# ids of an unpaged bundle (at most 99: 13 KB), the running jobs the heartbeat reports (at
# most LONGJOBS_TASK_CONCURRENCY, 1,000: 130 KB), the jobs handed to it (at most
# handing.MAX_HANDED, 500: 65 KB) and its running jobs' latest progress reports (at most
# MAX_PROGRESS_REPORTED, each at most MAX_PROGRESS_BYTES and its job id: 33 KB) the bundle's
# item stays under 375 KB.
MAX_CANCEL_REQUESTS = 1000
MAX_PROGRESS_REPORTED = 20

# -- the other items ----------------------------------------------------------------------------
# Small by construction: a page holds at most 98 job ids (13 KB), a launch at most 10 bundle ids
# and task ARNs (one RunTask call), a task pointer, the lease and the priorities' credit
# (``FAIR#``: one number per priority) a few hundred bytes.


def _marker(size: int) -> str:
    return f" [truncated: {size} bytes]"


# A UTF-16 surrogate with no partner: a Python string can hold one (json reads "\ud800" as
# one), UTF-8 cannot encode it, and the table refuses a string that is not UTF-8.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def compact_json(value: Any) -> str:
    """The one JSON encoding of payloads and the other JSON attributes, as the table stores them
    and as the size limits measure them: no spaces, characters outside ASCII as themselves (a
    producer counts a payload's size as its UTF-8 bytes), a lone surrogate as its ``\\u``
    escape. For strings, objects, arrays, integers, booleans and null that is what JavaScript's
    ``JSON.stringify`` writes, byte for byte (floats may be written differently: Python writes
    ``1.0`` and ``1e+16``, JavaScript ``1`` and ``10000000000000000``). NaN and Infinity are
    written as Python writes them (a handler's result may hold one and must still be stored);
    payloads never do, the schema refuses them."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    # Only inside strings can a surrogate stand, where its escape reads back as the same.
    return _LONE_SURROGATE.sub(_escaped, text)


def json_bytes(value: Any) -> int:
    """A value's stored size as a JSON attribute: the UTF-8 bytes of :func:`compact_json`."""
    return len(compact_json(value).encode())


def clip_text(text: str, limit: int) -> str:
    """``text`` as a string attribute of at most ``limit`` UTF-8 bytes; a clipped one ends with
    a marker giving its original size. A lone surrogate (which UTF-8 cannot carry, and the table
    refuses) becomes its escape."""
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data.decode()
    marker = _marker(len(data))
    return data[:max(limit - len(marker), 0)].decode("utf-8", "ignore") + marker


def clip_json_text(text: str, limit: int, *, keep_end: bool = False) -> str:
    """``text`` as a string inside a JSON attribute, at most ``limit`` bytes escaped; a clipped
    one carries a marker giving its original size (at its end, or at its start when
    ``keep_end``: a traceback keeps its last lines)."""
    size = json_bytes(text) - 2
    if size <= limit:
        return text
    marker = _marker(size).strip()
    room = max(limit - len(marker) - 1, 0)
    # Each character takes at least one byte: the first (last) ``room`` are enough to look at.
    part = text[-room:] if keep_end and room else text[:room]
    chars = reversed(part) if keep_end else iter(part)
    kept: list[str] = []
    used = 0
    for c in chars:
        used += json_bytes(c) - 2
        if used > room:
            break
        kept.append(c)
    if keep_end:
        return f"{marker} " + "".join(reversed(kept))
    return "".join(kept) + f" {marker}"


def bound_error(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """An error as recorded: at most MAX_ERROR_BYTES, its texts clipped (with markers) and the
    original size given when it was too large."""
    if error is None or json_bytes(error) <= MAX_ERROR_BYTES:
        return error
    out = {"type": clip_json_text(str(error.get("type", "")), ERROR_TYPE_BYTES),
           "message": clip_json_text(str(error.get("message", "")), ERROR_MESSAGE_BYTES)}
    traceback = error.get("traceback")
    if isinstance(traceback, str):
        out["traceback"] = clip_json_text(traceback, ERROR_TRACEBACK_BYTES, keep_end=True)
    return {**out, "truncated_from_bytes": json_bytes(error)}


def _omitted(n: int) -> dict[str, Any]:
    return {"omitted": n, "reason": f"{n} earlier attempts are not kept: the history keeps "
            "the first attempt and the latest ones"}


def bound_history(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's history as recorded: the first entry, a marker entry (``omitted``: how many
    attempts were left out, counting those an earlier bound left out), and the latest entries,
    at most HISTORY_ENTRIES and MAX_HISTORY_BYTES; each string clipped to HISTORY_TEXT_BYTES.
    The last entry, which the stop handler and reconciliation read, is always kept."""
    entries = [{k: clip_json_text(v, HISTORY_TEXT_BYTES) if isinstance(v, str) else v
                for k, v in h.items()} for h in history]
    if not entries:
        return entries
    first, rest = entries[:1], entries[1:]
    omitted = 0
    if rest and "omitted" in rest[0]:
        omitted = int(rest[0]["omitted"] or 0)
        rest = rest[1:]
    while len(rest) > 1 and (1 + bool(omitted) + len(rest) > HISTORY_ENTRIES or json_bytes(
            [*first, _omitted(omitted), *rest]) > MAX_HISTORY_BYTES):
        rest = rest[1:]
        omitted += 1
    return first + ([_omitted(omitted)] if omitted else []) + rest


def check_checkpoint(state: Any, job_id: str) -> None:
    """Refuse a checkpoint the job's item cannot hold (or the table cannot store)."""
    try:
        size = json_bytes(state)
    except (TypeError, ValueError, RecursionError) as exc:
        raise PermanentError(f"checkpoint is not JSON: {type(exc).__name__}: "
                             f"{clip_text(str(exc), 200)}", job_id=job_id) from None
    if size > MAX_CHECKPOINT_BYTES:
        raise TooLarge(f"checkpoint too large: {size} bytes > {MAX_CHECKPOINT_BYTES} bytes "
                       "(checkpoint progress markers; keep large state in S3 and checkpoint "
                       "its reference)", job_id=job_id)
