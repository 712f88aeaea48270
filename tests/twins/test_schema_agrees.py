"""The published schema (`longjobs schema`) and the dispatcher judge messages alike: a validator
that is not ours (jsonschema's 2020-12 validator, as a producer in another language would use)
and :func:`dispatcher.domain.message.parse` agree on every message drawn here, near every
bound of the fields drawn: the job id, the kind, and the numbers (types included: a string or
a boolean is no number to either).

Not drawn yet (where the two still differ, or the schema cannot say the rule): cpu and memory
pairs, ``not_before``'s date-time forms, ``depends_on``, ``tolerated_failures`` against the
array's size, the payload's size and depth."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dispatcher.domain import message
from dispatcher.domain.errors import InvalidMessage

SCHEMA = Draft202012Validator(message.json_schema())
ID_CHARS = "aZ09._:@/+=- é"  # allowed and not, a non-ASCII one among them


def near(low: float, high: float) -> st.SearchStrategy[Any]:
    """Numbers at and around the bounds, as ints and floats, and values of other JSON types."""
    edges = [low, high, low - 1, high + 1, low - 0.5, high + 0.5, (low + high) / 2, 0, -1]
    return st.one_of(st.sampled_from(edges), st.sampled_from([int(e) for e in edges]),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.integers(), st.booleans(), st.sampled_from(["1", "3", "", "x"]))


ids = st.one_of(st.text(alphabet=ID_CHARS, min_size=0, max_size=130),
                st.sampled_from(["a" * 128, "a" * 129, "-a", "a-", "a b", "a\\n"]))
kinds = st.one_of(st.text(alphabet="aZ09._:-@ ", min_size=0, max_size=130),
                  st.sampled_from(["k" * 128, "k" * 129, ".k", "k:v"]))
fields = st.fixed_dictionaries({}, optional={
    "estimated_seconds": near(message.MIN_ESTIMATE_SECONDS, message.MAX_SECONDS),
    "max_attempts": near(1, 100),
    "timeout_seconds": near(message.MIN_TIMEOUT_SECONDS, message.MAX_SECONDS),
    "ephemeral_storage": near(21, 200),
    "array_size": near(2, 100_000),
})


def dispatcher_accepts(doc: dict[str, Any]) -> bool:
    try:
        message.parse(json.dumps(doc))
    except InvalidMessage:
        return False
    return True


@settings(max_examples=2000, deadline=None)
@given(job_id=ids, kind=kinds, extra=fields,
       version=st.sampled_from([1, 1.0, True, "1", 2]))
def test_the_schema_and_the_dispatcher_agree(job_id: str, kind: str, extra: dict[str, Any],
                                              version: Any) -> None:
    doc = {"schema_version": version, "job_id": job_id, "kind": kind, "payload": {}, **extra}
    if "array_size" in doc and len(job_id) > 122:  # the schema cannot compare two fields
        doc.pop("array_size")
    assert SCHEMA.is_valid(doc) == dispatcher_accepts(doc), (
        doc, [e.message for e in SCHEMA.iter_errors(doc)])
