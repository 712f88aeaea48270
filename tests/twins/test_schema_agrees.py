"""The published schema (`longjobs schema`) and the dispatcher judge messages alike: a validator
that is not ours (jsonschema's 2020-12 validator with its format checker, as a producer in
another language would judge them) and :func:`dispatcher.domain.message.parse` agree on every
message drawn here, near every bound: the job id, the kind, the numbers (types included: a
string or a boolean is no number to either), cpu and memory as Fargate pairs them, tolerated
failures, dependencies and their element-wise form, ``not_before`` as a number or a time.

Left out, because JSON Schema cannot say them (the fields' descriptions do): a dependency named
twice in two forms (an id and an object), a job naming itself, failures tolerated past the
array's size, an array's
id too long for its children's, a time past the latest ``not_before`` written as a string;
and the payload's size and depth."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dispatcher.domain import message, published_schema
from dispatcher.domain.errors import InvalidMessage

SCHEMA = Draft202012Validator(published_schema.json_schema(),
                              format_checker=Draft202012Validator.FORMAT_CHECKER)
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
deps = st.lists(st.one_of(
    st.sampled_from(["a", "b", "A:3", "bad id", "", "x" * 129]),
    st.fixed_dictionaries({"job_id": st.sampled_from(["a", "b", "bad id"])}, optional={
        "condition": st.sampled_from(["succeeded", "finished", "failed", "nope"]),
        "n_to_n": st.booleans()})), max_size=3)
fields = st.fixed_dictionaries({}, optional={
    "estimated_seconds": near(message.MIN_ESTIMATE_SECONDS, message.MAX_SECONDS),
    "max_attempts": near(1, 100),
    "timeout_seconds": near(message.MIN_TIMEOUT_SECONDS, message.MAX_SECONDS),
    "ephemeral_storage": near(21, 200),
    "array_size": st.one_of(near(2, 100_000), st.sampled_from([2, 10, 40])),
    "cpu": st.sampled_from([256, 512, 1024, 4096, 16384, 300, "1024"]),
    "memory": st.sampled_from([512, 1024, 2048, 3072, 8192, 30720, 122880, 1536]),
    "tolerated_failures": st.one_of(st.integers(-2, 12), st.sampled_from(
        ["0", "5%", "100%", "101%", "2.5%", "3", "x", 1.5, True])),
    "depends_on": deps,
    "not_before": st.sampled_from([0, 1.5, -1, True, "2026-01-31T02:00:00Z",
                                   "2026-01-31T02:00:00.5+01:00", "2026-01-31T02:00:00",
                                   "2026-01-31", "tomorrow", 1e12]),
    "priority": st.sampled_from(["high", "normal", "low", "urgent", 1]),
})


def inexpressible(doc: dict[str, Any]) -> bool:
    """A rule JSON Schema cannot state is at stake (see the module)."""
    named: list[str] = []
    for dep in doc.get("depends_on") or []:
        named.append(dep if isinstance(dep, str) else dep["job_id"])
    tolerated = doc.get("tolerated_failures")
    size = doc.get("array_size")
    too_many = isinstance(tolerated, int) and not isinstance(tolerated, bool) \
        and isinstance(size, (int, float)) and not isinstance(size, bool) and tolerated > size
    deps = doc.get("depends_on") or []
    # Named twice, but not as two equal items (uniqueItems refuses those: both agree).
    twice = len(named) != len(set(named)) and len({json.dumps(d, sort_keys=True)
                                                    for d in deps}) == len(deps)
    itself = doc["job_id"] in named
    return twice or too_many or itself


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
    assume(not inexpressible(doc))
    assert SCHEMA.is_valid(doc) == dispatcher_accepts(doc), (
        doc, [e.message for e in SCHEMA.iter_errors(doc)])
