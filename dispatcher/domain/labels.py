"""Labels: what a producer tags a job with (``labels={"customer": "acme"}``), to list, act on
and count jobs by (``jobs list --label``, bulk actions, ``stats --by label``) and to see on its
events.

Bounded so that a job's labels fit its item, its events and its index entries whatever they
are: at most :data:`MAX_LABELS`, a key 1-64 characters of ``[A-Za-z0-9._:/-]`` (no ``=``: a
label is written ``key=value``), a value at most 128 characters and no control character.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_LABELS = 10
MAX_KEY = 64
MAX_VALUE = 128
KEY = re.compile(r"[A-Za-z0-9._:/-]{1,64}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def problem(labels: Mapping[str, str]) -> str | None:
    """Why ``labels`` are refused, or None."""
    if len(labels) > MAX_LABELS:
        return f"at most {MAX_LABELS} labels, not {len(labels)}"
    for key, value in labels.items():
        if not isinstance(key, str) or not KEY.fullmatch(key):
            return (f"label key {key!r} must be 1-{MAX_KEY} characters of "
                    "[A-Za-z0-9._:/-]")
        if not isinstance(value, str) or len(value) > MAX_VALUE or _CONTROL.search(value):
            return (f"label {key}'s value must be text of at most {MAX_VALUE} characters "
                    "and no control character")
    return None


def parse(text: str) -> tuple[str, str]:
    """``key=value`` (``--label``) -> (key, value); ValueError saying the form."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"--label {text!r} is not key=value (e.g. customer=acme)")
    if (why := problem({key: value})) is not None:
        raise ValueError(f"--label {text!r}: {why}")
    return key, value


def written(key: str, value: str) -> str:
    return f"{key}={value}"
