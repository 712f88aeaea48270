"""EventBridge Scheduler's schedule expressions: which it accepts, and when each fires.

Local mode runs schedules itself and the dispatcher shows their next fires; both must agree with
what Scheduler does once the schedule is deployed, so the rules are AWS's, cited beside each.

- ``cron(minutes hours day-of-month month day-of-week year)``, on the schedule zone's wall clock
  (cron_fields has the fields); ``rate(value unit)``; ``at(yyyy-mm-ddThh:mm:ss)``:
  https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html
- Daylight saving time, https://repost.aws/knowledge-center/eventbridge-scheduler-adjust-dst:
  "When the time shifts forward in Spring, your schedule invocation gets skipped if the cron
  expression falls on a non-existent date and time. When the time shifts back in the Fall, your
  schedule runs only once and doesn't repeat its invocation." A cron minute in the spring gap
  does not fire; one in the repeated hour fires at its first occurrence (fold=0).

Choices where AWS's pages are silent (Quartz, whose syntax they copy, decides most):
- a range must run upward (22-2 is refused, with the split 22-23,0-2 to write instead), and a
  step ``a/n`` runs from a to the field's end (in day-of-week too, which some versions of
  AWS's cron reference give / and others do not: Scheduler has the last word);
- L, LW, nW, nL and n#k stand alone in their field; ``nW`` for a day the month lacks (31W in
  April) fires not that month, like plain 31; a fifth weekday a month lacks (2#5) likewise;
- field names (JAN, MON) are read in any case; the keywords cron/rate/at and rate's units only
  in lower case, as AWS spells them;
- an expression no date can match (``cron(0 0 30 2 ? *)``) is refused: it can never fire;
- a rate's first fire is at its start (CreateSchedule's StartDate "sets the first occurrence"),
  then every period after it, in absolute seconds (a day is 86,400 s whatever the zone does);
  a start with a fraction of a second is rounded up to the next whole second;
- an ``at()`` ignores start and end, as Scheduler ignores StartDate and EndDate for one-time
  schedules (https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html);
  an ``at()`` in the spring gap never fires (check_at refuses it up front); its year, like a
  cron's, is 1970-2199.
"""

from __future__ import annotations

import calendar
import math
import re
import zoneinfo
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from dispatcher.domain.cron_fields import (
    FIRST_YEAR,
    LAST_YEAR,
    CronFields,
    FieldError,
    parse_fields,
    walk,
)

_SHAPE = re.compile(r"(cron|rate|at)\((.*)\)")
_RATE = re.compile(r"([0-9]+) ([a-z]+)")
_AT = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})")
_UNITS = {"minute": 60, "hour": 3600, "day": 86_400}
_FORMS = ("cron(minutes hours day-of-month month day-of-week year), rate(value unit) or "
          "at(yyyy-mm-ddThh:mm:ss), e.g. cron(0 2 * * ? *), rate(15 minutes)")
# Cron years end in 2199: past this no cron fires (and datetime's range stays far off).
_AFTER_LAST_YEAR = calendar.timegm((LAST_YEAR + 1, 1, 2, 0, 0, 0))
_BEFORE_FIRST_YEAR = calendar.timegm((FIRST_YEAR - 1, 12, 30, 0, 0, 0))


class BadSchedule(ValueError):
    """An expression, time zone or time that Scheduler would refuse or that cannot fire; str()
    names what is wrong and what to write instead (one line, no traceback), e.g.
    "cron(0 25 * * ? *): hours 25 is out of range 0-23"."""


@dataclass(frozen=True)
class Expression:
    text: str  # as given, white space normalised, e.g. "cron(0 2 * * ? *)"
    kind: str  # "cron" | "rate" | "at"
    cron: CronFields | None = None  # kind "cron"
    period: int = 0  # kind "rate": seconds between fires
    wall: tuple[int, int, int, int, int, int] | None = None  # kind "at": y, m, d, h, min, s


def parse(text: str, *, seconds: bool = False) -> Expression:
    """The expression, or BadSchedule saying what Scheduler would refuse in it. ``seconds``
    (local mode only) also accepts rate(N second(s)), which AWS refuses."""
    normal = re.sub(r"\s*\)$", ")", re.sub(r"^(\w+)\(\s*", r"\1(", " ".join(text.split())))
    return _parse(normal, seconds)


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA time zone ``name``, or BadSchedule naming it."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise BadSchedule(f"time zone {name!r} is unknown: use an IANA name such as "
                          "Europe/Berlin, America/New_York or UTC") from None


def fires(expr: Expression, timezone: str, after: float, count: int, *,
          start: float | None = None, end: float | None = None) -> list[float]:
    """The next ``count`` fire times (UTC epoch seconds, whole) strictly after ``after``, none
    before ``start`` nor after ``end``; fewer when the schedule ends first. A rate needs
    ``start`` (its StartDate, or its creation time): its fires are counted from it."""
    if count <= 0:
        return []
    if expr.kind == "rate":
        if start is None:
            raise ValueError(f"{expr.text}: a rate fires every period from its start; pass "
                             "start= (the schedule's StartDate or creation time)")
        return _rate_fires(expr.period, math.ceil(start), after, count, end)
    tz = zone(timezone)
    if expr.kind == "at":
        assert expr.wall is not None
        when = _exact(tz, expr.wall)
        return [float(when)] if when is not None and when > after else []
    assert expr.cron is not None
    lower = math.floor(after) + 1  # fires are whole seconds: "strictly after" is this or later
    if start is not None:
        lower = max(lower, math.ceil(start))
    return _cron_fires(expr.cron, tz, lower, end, count)


def check_at(expr: Expression, timezone: str) -> None:
    """BadSchedule if an ``at()`` names a wall time its zone skips (the spring-forward gap):
    it could never fire. Other kinds have nothing to check."""
    if expr.kind != "at" or expr.wall is None:
        return
    tz = zone(timezone)
    if _exact(tz, expr.wall) is None:
        y, mo, d, h, mi, s = expr.wall
        later = datetime.fromtimestamp(datetime(y, mo, d, h, mi, s, tzinfo=tz).timestamp(), tz)
        raise BadSchedule(f"{expr.text}: {h:02d}:{mi:02d}:{s:02d} on {y:04d}-{mo:02d}-{d:02d} "
                          f"does not exist in {timezone} (the clocks spring forward over it): "
                          f"choose a time outside the gap, e.g. at({later:%Y-%m-%dT%H:%M:%S})")


@lru_cache(maxsize=4096)
def _parse(text: str, seconds: bool) -> Expression:
    shape = _SHAPE.fullmatch(text)
    if shape is None:
        raise BadSchedule(f"{text[:80]!r} is not a schedule expression: write {_FORMS}")
    kind, body = shape.groups()
    try:
        if kind == "cron":
            return Expression(text, kind, cron=_cron(body))
        if kind == "rate":
            return Expression(text, kind, period=_rate(body, seconds))
        return Expression(text, kind, wall=_at(body))
    except FieldError as error:
        raise BadSchedule(f"{text}: {error}") from None


def _cron(body: str) -> CronFields:
    fields = body.split(" ")
    if len(fields) != 6:
        raise FieldError(f"has {len(fields)} field{'s' if len(fields) != 1 else ''}, a cron has "
                         "6: minutes hours day-of-month month day-of-week year, e.g. "
                         "cron(0 2 * * ? *) for 02:00 every day")
    parsed = parse_fields(fields)
    if next(walk(parsed, (FIRST_YEAR, 1, 1, 0, 0)), None) is None:
        raise FieldError("never fires: no date in its years and months has a day its "
                         "day-of-month or day-of-week names (e.g. 30 in FEB)")
    return parsed


def _rate(body: str, seconds: bool) -> int:
    """A rate's period in seconds: https://docs.aws.amazon.com/scheduler/latest/UserGuide/
    schedule-types.html#rate-based ("value: a positive number"; units minute | minutes | hour
    | hours | day | days; AWS refuses 1 with a plural unit and more than 1 with a singular)."""
    match = _RATE.fullmatch(body)
    units = _UNITS | ({"second": 1} if seconds else {})
    if match is None:
        raise FieldError("write rate(value unit): a whole number and minute(s), hour(s) or "
                         "day(s), e.g. rate(15 minutes)")
    value, unit = int(match.group(1)), match.group(2)
    singular = unit.removesuffix("s")
    if singular == "second" and not seconds:
        raise FieldError("the smallest rate is 1 minute: write rate(1 minute)")
    if singular not in units:
        raise FieldError(f"unit {unit!r} is not one of minute(s), hour(s), day(s)"
                         + (", second(s)" if seconds else ""))
    if value < 1:
        raise FieldError(f"the value must be a positive whole number, e.g. rate(1 {singular})")
    spelled = singular if value == 1 else singular + "s"
    if unit != spelled:
        which = "the singular" if value == 1 else "the plural"
        raise FieldError(f"a value of {value} takes {which} unit: write rate({value} {spelled})")
    return value * units[singular]


def _at(body: str) -> tuple[int, int, int, int, int, int]:
    match = _AT.fullmatch(body)
    if match is None:
        raise FieldError("write at(yyyy-mm-ddThh:mm:ss), a wall time with no offset (the "
                         "schedule's time zone applies), e.g. at(2026-12-24T18:00:00)")
    y, mo, d, h, mi, s = (int(g) for g in match.groups())
    if not FIRST_YEAR <= y <= LAST_YEAR:  # AWS is silent; the cron field's years, kept here
        raise FieldError(f"year {y} is out of range {FIRST_YEAR}-{LAST_YEAR}")
    if not 1 <= mo <= 12 or not 1 <= d <= calendar.monthrange(y, mo)[1]:
        raise FieldError(f"{y:04d}-{mo:02d} has no day {d:02d}")
    if h > 23 or mi > 59 or s > 59:
        raise FieldError(f"{h:02d}:{mi:02d}:{s:02d} is no time of day (00:00:00-23:59:59)")
    return y, mo, d, h, mi, s


def _rate_fires(period: int, anchor: int, after: float, count: int,
                end: float | None) -> list[float]:
    # Fires are anchor + k*period, k >= 0: the first one strictly after `after` is found by
    # division, however far the anchor lies behind.
    k = max(0, (math.floor(after) - anchor) // period + 1)
    first = anchor + k * period
    out = [float(first + i * period) for i in range(count)]
    return out if end is None else [t for t in out if t <= end]


def _cron_fires(fields: CronFields, tz: zoneinfo.ZoneInfo, lower: int, end: float | None,
                count: int) -> list[float]:
    lower = max(lower, _BEFORE_FIRST_YEAR)
    if lower >= _AFTER_LAST_YEAR:
        return []
    # Walk from the wall minute holding `lower`; a candidate before `lower` (that minute's
    # second 0) is dropped below.
    local = datetime.fromtimestamp(lower, tz)
    out: list[float] = []
    for wall in walk(fields, (local.year, local.month, local.day, local.hour, local.minute)):
        when = _exact(tz, (*wall, 0))
        # None: the minute is in the spring gap and is skipped. Below `lower`: a first
        # occurrence (fold=0) earlier than a start inside the repeated autumn hour.
        if when is None or when < lower:
            continue
        if end is not None and when > end:
            break
        out.append(float(when))
        if len(out) == count:
            break
    return out


def _exact(tz: zoneinfo.ZoneInfo, wall: tuple[int, int, int, int, int, int]) -> int | None:
    """The UTC epoch second of that wall time's first occurrence (fold=0), or None where the
    zone skips it (the round trip lands elsewhere: Python maps a gap time across the gap)."""
    y, mo, d, h, mi, s = wall
    if tz.key == "UTC":
        return calendar.timegm((y, mo, d, h, mi, s))
    when = int(datetime(y, mo, d, h, mi, s, tzinfo=tz).timestamp())
    back = datetime.fromtimestamp(when, tz)
    if (back.day, back.hour, back.minute, back.second) != (d, h, mi, s):
        return None
    return when

