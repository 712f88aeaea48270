"""The published schema (`longjobs schema`) and the dispatcher judge messages alike: a validator
that is not ours (jsonschema's 2020-12 validator with its format checker, as a producer in
another language would judge them) and :func:`dispatcher.domain.message.parse` agree on every
message drawn here, near every bound: the job id, the kind, the numbers (types included: a
string or a boolean is no number to either), cpu and memory as Fargate pairs them, tolerated
failures, dependencies and their element-wise form, ``not_before`` as a number or a time.

Left out, because JSON Schema cannot say them (the fields' descriptions do): a dependency named
twice in two forms (an id and an object), a job naming itself, failures tolerated past the
array's size, an array's id too long for its children's, a time before 1970 or past the latest
``not_before`` written as a string; and the payload's size and depth. The times drawn are in
the form both RFC 3339 and jsonschema's date-time check (rfc3339-validator) read: that check
refuses a lower-case t or z and a leap second, which RFC 3339 allows and the dispatcher takes
(``tests/twins/test_rfc3339_times.py``)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from dispatcher.domain import message, published_schema, rfc3339
from dispatcher.domain.errors import InvalidMessage

SCHEMA = Draft202012Validator(published_schema.json_schema(),
                              format_checker=Draft202012Validator.FORMAT_CHECKER)
# jsonschema checks date-time only with rfc3339-validator installed (a declared dev dependency):
# without it every string would pass its format check and the times here would test nothing.
assert "date-time" in Draft202012Validator.FORMAT_CHECKER.checkers
ID_CHARS = "aZ09._:@/+=- é"  # allowed and not, a non-ASCII one among them


def near(low: float, high: float) -> st.SearchStrategy[Any]:
    """Numbers at and around the bounds, as ints and floats, and values of other JSON types."""
    edges = [low, high, low - 1, high + 1, low - 0.5, high + 0.5, (low + high) / 2, 0, -1]
    return st.one_of(st.sampled_from(edges), st.sampled_from([int(e) for e in edges]),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.integers(), st.booleans(), st.sampled_from(["1", "3", "", "x"]))


ids = st.one_of(st.text(alphabet=ID_CHARS, min_size=0, max_size=130),
                st.sampled_from(["a" * 128, "a" * 129, "-a", "a-", "a b", "a\\n"]))

def _time(parts: tuple[Any, ...]) -> str:
    return "{:04d}-{:02d}-{:02d}{}{:02d}:{:02d}:{:02d}{}{}".format(*parts)


# Times near every bound of each part, in RFC 3339's form and in ISO 8601's forms outside it:
# one part at a time off a valid time (so that each is what decides), or every part at random.
_GOOD = (st.sampled_from([1970, 2024, 2025, 9999]), st.integers(1, 12),
         st.sampled_from([1, 28]), st.just("T"), st.sampled_from([0, 23]),
         st.sampled_from([0, 59]), st.sampled_from([0, 59]),
         st.sampled_from(["", ".5", ".123456789"]), st.sampled_from(["Z", "+01:00", "-23:59"]))
_ODD = (st.sampled_from([0, 1, 1969]), st.sampled_from([0, 13]),
        st.sampled_from([0, 29, 30, 31, 32]), st.sampled_from([" ", "", "_"]),
        st.just(24), st.just(60), st.just(61), st.sampled_from([",5", "."]),
        st.sampled_from(["", "+24:00", "+01:60", "+0100", "+01"]))


@st.composite
def times(draw: st.DrawFn) -> str:
    odd = draw(st.sampled_from([None, "all", *range(len(_GOOD))]))
    parts = tuple(draw(st.one_of(good, bad) if odd == "all" else bad if odd == i else good)
                  for i, (good, bad) in enumerate(zip(_GOOD, _ODD, strict=True)))
    return _time(parts)

kinds = st.one_of(st.text(alphabet="aZ09._:-@ ", min_size=0, max_size=130),
                  st.sampled_from(["k" * 128, "k" * 129, ".k", "k:v"]))
deps = st.lists(st.one_of(
    st.sampled_from(["a", "b", "A:3", "bad id", "", "x" * 129]),
    st.fixed_dictionaries({"job_id": st.sampled_from(["a", "b", "bad id"])}, optional={
        "condition": st.sampled_from(["succeeded", "finished", "failed", "nope"]),
        "n_to_n": st.booleans()})), max_size=3)
OPTIONAL: dict[str, st.SearchStrategy[Any]] = {
    "estimated_seconds": near(message.MIN_ESTIMATE_SECONDS, message.MAX_SECONDS),
    "max_attempts": near(1, 100),
    "timeout_seconds": near(message.MIN_TIMEOUT_SECONDS, message.MAX_SECONDS),
    "ephemeral_storage": near(21, 200),
    "array_size": st.one_of(near(2, 100_000), st.sampled_from([2, 10, 40])),
    "cpu": st.sampled_from([256, 512, 1024, 4096, 16384, 300, "1024"]),
    "memory": st.sampled_from([512, 1024, 2048, 3072, 8192, 30720, 122880, 1536]),
    "tolerated_failures": st.one_of(st.integers(-2, 12), st.sampled_from(
        ["0", "0%", "5%", "100%", "100.0%", "100.5%", "101%", "2.5%", " 5%", "\u0665%", "3", "x",
         1.5, True])),
    "depends_on": deps,
    "not_before": st.one_of(times(), st.sampled_from([
        0, 1.5, -1, True, "2026-01-31T02:00:00Z", "2026-01-31T02:00:00.5+01:00",
        "2026-01-31T02:00:00", "2026-01-31", "tomorrow", "1769824800", 1e12])),
    "priority": st.sampled_from(["high", "normal", "low", "urgent", 1]),
}
# null beside each: JSON Schema's required counts a field that is null as present, the
# dispatcher as absent where null is allowed (the schema's rules say "present and not null").
OPTIONAL = {name: st.one_of(st.none(), values) for name, values in OPTIONAL.items()}
fields = st.fixed_dictionaries({}, optional=OPTIONAL)


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
    return twice or too_many or itself or _out_of_range(doc.get("not_before"))


def _out_of_range(when: Any) -> bool:
    """A time written as a string outside the numbers' range (its format cannot bound it)."""
    if not isinstance(when, str):
        return False
    try:
        epoch = rfc3339.epoch_seconds(when)
    except rfc3339.NotATime:
        return False
    return not 0 <= epoch <= message.MAX_NOT_BEFORE


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


# One field at a time beside a valid message (an array's, where the field is an array's), so
# that the field alone decides: among many drawn at once, one bad field hides the others.
@settings(max_examples=2000, deadline=None)
@given(data=st.data())
def test_each_field_alone_agrees(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(OPTIONAL)))
    doc = {"schema_version": 1, "job_id": "j", "kind": "k", "payload": {}, "array_size": 10,
           name: data.draw(OPTIONAL[name])}
    if name not in ("tolerated_failures", "depends_on", "array_size"):
        doc.pop("array_size")
    assume(not inexpressible(doc))
    assert SCHEMA.is_valid(doc) == dispatcher_accepts(doc), (
        doc, [e.message for e in SCHEMA.iter_errors(doc)])
