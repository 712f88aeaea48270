"""Labels: what a producer tags a job with (``labels={"customer": "acme"}``), to list, act on
and count jobs by (``jobs list --label``, bulk actions, ``stats --by label``) and to see on its
events.

Bounded so that a job's labels fit its item, its events and its index entries whatever they
are: at most :data:`MAX_LABELS`, a key 1-64 characters of ``[A-Za-z0-9._:/-]`` (no ``=``: a
label is written ``key=value``), a value at most 128 characters and no control character.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping

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


# Begins the part of a bundle's id after its tenant (and its rate limits' mark) when the job it
# opened with had labels: the status index, which the tick reads due bundles from, holds no
# bundle's labels (its projection is fixed when it is made), so a launch reads the items of the
# due bundles so marked, and only those, for its tasks' tags. No id a drain makes otherwise
# holds a "." (dispatcher.domain.rate_limits.BUNDLE_MARK says the same of its own).
BUNDLE_MARK = "l."
# A task's tag for each label its bundle's jobs all share (a key is at most 64 characters of
# ECS's tag characters: the tag's key stays under ECS's 128).
TAG_PREFIX = "longjobs:label:"
# "Maximum value length - 256 Unicode characters"; "letters, numbers, and spaces representable
# in UTF-8, and the following characters: + - = . _ : / @"; no value may begin with "aws:".
# https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_Tag.html
_TAG_PUNCTUATION = frozenset("+-=._:/@")


def shared(every: Iterable[Mapping[str, str] | None]) -> dict[str, str]:
    """The labels (key and value) that every one of ``every`` has: a bundle's, its jobs'."""
    out: dict[str, str] | None = None
    for labels in every:
        mine = dict(labels or {})
        out = mine if out is None else {k: v for k, v in out.items() if mine.get(k) == v}
        if not out:
            return {}
    return out or {}


def marked(rest: str) -> str:
    """The part of a bundle's id after its tenant, for a bundle whose jobs have labels."""
    return BUNDLE_MARK + rest


def has_mark(rest: str) -> bool:
    """Whether the part of a bundle's id after its tenant (and after its rate limits' mark)
    says its jobs may share labels (:func:`marked`)."""
    return rest.startswith(BUNDLE_MARK)


def tag_value_ok(value: str) -> bool:
    """Whether ECS takes ``value`` as a tag's value (a label's value may hold more)."""
    return len(value) <= 256 and not value.lower().startswith("aws:") and all(
        c in _TAG_PUNCTUATION or unicodedata.category(c)[0] in "LNZ" for c in value)


def tags(labels: Mapping[str, str]) -> dict[str, str]:
    """A task's tags for the labels its jobs all share, in key order; a value ECS would refuse
    as a tag's is left out (the task still launches; its jobs keep the label)."""
    return {TAG_PREFIX + k: v for k, v in sorted(labels.items()) if tag_value_ok(v)}
