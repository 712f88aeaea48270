"""A time as the schema's ``date-time`` format names it: RFC 3339's ``date-time`` (section 5.6),
all of it and nothing more, as epoch seconds.

https://www.rfc-editor.org/rfc/rfc3339#section-5.6: a full date, ``T``, a time with seconds and
any fraction of them, then ``Z`` or an offset ``+hh:mm``/``-hh:mm``; ``T`` and ``Z`` may be lower
case (its NOTE); a leap second is second 60 (section 5.7), which comes at the end of a UTC day.
Python's ``datetime.fromisoformat`` reads more than that (``+0100``, ``20260131T020000Z``, a
space for the ``T``, week dates) and less (a leap second, a lower-case ``t``): a producer judging
its message by the published schema would be refused what it was told is valid, or told
nothing of a form another reader refuses.
"""

from __future__ import annotations

import calendar
import re

# The shape; the values' ranges are checked below (JSON Schema's pattern states the shape too).
PATTERN = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
           r"([Zz]|[+-][0-9]{2}:[0-9]{2})")
_DATE_TIME = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                        r"(\.[0-9]+)?(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))")
EXAMPLES = "2026-01-31T02:00:00Z or 2026-01-31T03:00:00.5+01:00"


class NotATime(ValueError):
    """Not an RFC 3339 ``date-time``; the message says what is wrong with it."""


def epoch_seconds(text: str) -> float:
    """``text`` as seconds since 1970-01-01T00:00:00Z (negative before it)."""
    match = _DATE_TIME.fullmatch(text)
    if match is None and _DATE_TIME.fullmatch(text + "Z"):
        raise NotATime(f"{text[:60]!r} has no UTC offset: add Z (UTC) or one such as +01:00, "
                       f"e.g. {EXAMPLES}")
    if match is None:
        raise NotATime(f"{text[:60]!r} is not an RFC 3339 time: a date, T, a time with "
                       f"seconds and Z or an offset ±hh:mm, e.g. {EXAMPLES}")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    fraction, sign, off_hours, off_minutes = match.groups()[6:]
    if not 1 <= month <= 12 or not 1 <= day <= _days_in(year, month):
        raise NotATime(f"{text[:60]!r}: {year:04d}-{month:02d} has no day {day:02d}")
    if hour > 23 or minute > 59 or second > 60:
        raise NotATime(f"{text[:60]!r}: {hour:02d}:{minute:02d}:{second:02d} is no time of day")
    offset = 0
    if sign is not None:
        if int(off_hours) > 23 or int(off_minutes) > 59:
            raise NotATime(f"{text[:60]!r}: {sign}{off_hours}:{off_minutes} is no UTC offset")
        offset = (1 if sign == "+" else -1) * (int(off_hours) * 3600 + int(off_minutes) * 60)
    # Year 0 (RFC 3339 has it, Python's calendar not): as 2000, five 400-year cycles earlier
    # (the Gregorian calendar repeats every 146,097 days).
    cycles = 5 if year == 0 else 0
    base = calendar.timegm((year or 2000, month, day, hour, minute, min(second, 59)))
    epoch = base - offset - cycles * 146_097 * 86_400
    if second == 60:
        if (epoch // 60) % (24 * 60) != 24 * 60 - 1:
            raise NotATime(f"{text[:60]!r}: a leap second (second 60) comes only at "
                           "23:59:60 UTC")
        epoch += 1  # read as the next day's first second, as a POSIX clock shows it
    return epoch + (float(fraction) if fraction else 0.0)


def _days_in(year: int, month: int) -> int:
    return calendar.monthrange(year or 2000, month)[1]  # year 0 is a leap year, as 2000 is
