"""``not_before`` as a string is an RFC 3339 date-time, all of it and nothing more: the RFC's own
examples (section 5.8) read as the times they name, the forms it allows that Python's
``fromisoformat`` does not (a lower-case t and z, a leap second) are taken, and the ISO 8601
forms outside it that ``fromisoformat`` takes are refused with the form a producer should send."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dispatcher.domain import message
from dispatcher.domain.errors import InvalidMessage
from dispatcher.domain.rfc3339 import NotATime, epoch_seconds

# https://www.rfc-editor.org/rfc/rfc3339#section-5.8, with the times they name in epoch seconds
# (1990-12-31T23:59:60Z: the leap second, read as the next day's first second).
RFC_EXAMPLES = [
    ("1985-04-12T23:20:50.52Z", 482196050.52),
    ("1996-12-19T16:39:57-08:00", 851042397.0),
    ("1990-12-31T23:59:60Z", 662688000.0),
    ("1990-12-31T15:59:60-08:00", 662688000.0),
    ("1937-01-01T12:00:27.87+00:20", -1041337172.13),
]


@pytest.mark.parametrize(("text", "epoch"), RFC_EXAMPLES)
def test_the_rfcs_own_examples_name_their_times(text: str, epoch: float) -> None:
    assert epoch_seconds(text) == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize("text", [
    "2026-01-31t02:00:00z", "2026-01-31T02:00:00.123456789Z", "2026-01-31T02:00:00-00:00",
    "2024-02-29T00:00:00Z", "2016-12-31T23:59:60Z", "0000-01-01T00:00:00Z"])
def test_what_rfc_3339_allows_is_read(text: str) -> None:
    epoch_seconds(text)


@pytest.mark.parametrize(("text", "says"), [
    ("2026-01-31T02:00:00+0100", "not an RFC 3339 time"),
    ("2026-01-31 02:00:00Z", "not an RFC 3339 time"),
    ("20260131T020000Z", "not an RFC 3339 time"),
    ("2026-01-31T02:00Z", "not an RFC 3339 time"),
    ("2026-01-31T02:00:00,5Z", "not an RFC 3339 time"),
    ("2026-W05-6T02:00:00Z", "not an RFC 3339 time"),
    ("2026-01-31T02:00:00", "has no UTC offset: add Z"),
    ("2025-02-29T00:00:00Z", "has no day 29"),
    ("2026-01-31T24:00:00Z", "no time of day"),
    ("2026-01-31T02:00:00+24:00", "no UTC offset"),
    ("2016-12-31T22:59:60Z", "only at 23:59:60 UTC"),
    ("2026-01-31T02:00:00Z\n", "not an RFC 3339 time"),
    ("\u0662\u0660\u0662\u0666-01-31T02:00:00Z", "not an RFC 3339 time"),  # Arabic-Indic digits
])
def test_what_it_does_not_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(NotATime, match=says):
        epoch_seconds(text)


def _not_before(value: Any) -> float | None:
    return message.parse(json.dumps({"schema_version": 1, "job_id": "t", "kind": "k",
                                      "payload": {}, "not_before": value})).not_before


def test_a_message_takes_the_time_as_epoch_seconds_and_names_the_form_it_refuses() -> None:
    assert _not_before("2026-01-31t03:00:00+01:00") == 1769824800.0
    with pytest.raises(InvalidMessage, match=r"not_before: .*2026-01-31T02:00:00Z"):
        _not_before("2026-01-31 02:00:00Z")
    with pytest.raises(InvalidMessage, match="before 1970-01-01T00:00:00Z"):
        _not_before(RFC_EXAMPLES[-1][0])
