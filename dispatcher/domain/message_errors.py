"""A refused message's reason, in its sender's words: the fields it wrote (no union branch
pydantic names), the rule, no pydantic prefix; clipped to fit a REJECTED record."""

from __future__ import annotations

import re

from pydantic import ValidationError

from dispatcher.domain import sizes

# A union's branch in an error's location (pydantic names it by its type: ``str``,
# ``DependsOn``): not a field the sender wrote (an unknown field of the sender's is one, and
# may be capitalised: only these names are branches).
_BRANCH = re.compile(r"DependsOn|str|int|float|bool")
_BRANCH_WORDS = {"str": "a string", "int": "an integer", "float": "a number",
                 "bool": "a boolean"}


def describe(exc: ValidationError) -> str:
    """What is wrong, in the sender's words: where (the fields it wrote, no union branch
    named), and why (no pydantic prefix). A value of a union (a dependency: an id or an
    object) that fails every branch is told by the branch it got into, if one got past its
    own type, else as one line naming what it may be."""
    found: dict[str, list[tuple[bool, str]]] = {}  # where -> (past its branch's type, why)
    kinds: dict[str, list[str]] = {}
    for err in exc.errors():
        loc = [p for p in err["loc"] if not (isinstance(p, str) and _BRANCH.fullmatch(p))]
        branches = [p for p in err["loc"] if isinstance(p, str) and _BRANCH.fullmatch(p)]
        why = str(err["msg"]).removeprefix("Value error, ")
        # A check of the whole message (no location) names its field itself.
        where = ".".join(str(p) for p in loc) or ""
        deeper = bool(branches) and err["loc"][-1] not in branches
        key = ".".join(str(p) for p in err["loc"][:err["loc"].index(branches[0])]) \
            if branches else where
        if branches and not deeper:
            kinds.setdefault(key, []).append(_BRANCH_WORDS.get(branches[-1], "an object"))
        # A validator's message that names its field already is said alone.
        text = why if not where or why.startswith((f"{where}:", f"{where}.", f"{where} ")) \
            else f"{where}: {why}"
        found.setdefault(key, []).append((deeper or not branches, text))
    parts: list[str] = []
    for key, told in found.items():
        kept = [text for past, text in told if past]
        parts += kept or [f"{key}: should be {' or '.join(kinds.get(key, ['valid']))}"]
    parts = parts[:3]
    # A field name can be as long as the message (an unknown field of 500 KB): clipped, so the
    # reason fits its REJECTED record and the logs.
    return sizes.clip_text("schema violation: " + "; ".join(parts), sizes.MAX_REASON_BYTES)
