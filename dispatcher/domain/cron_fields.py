"""The six fields of an EventBridge cron expression as the values each allows, and the wall-clock
minutes they name, walked in order without stepping minute by minute.

The fields and their wildcards, from
https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html#eb-cron-expressions
(the same table as https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html):

    Minutes       0-59              , - * /
    Hours         0-23              , - * /
    Day-of-month  1-31              , - * ? / L W
    Month         1-12 or JAN-DEC   , - * /
    Day-of-week   1-7 or SUN-SAT    , - * ? L #
    Year          1970-2199         , - * /

Where those pages are silent this module follows Quartz's CronExpression, whose syntax they copy
(1 = SUN, ``L`` alone in day-of-week = SAT, ``nL`` = the month's last weekday n, ``n#k``): see
schedule_times' docstring for the choices made.
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

MONTHS = {name.upper(): number for number, name in enumerate(calendar.month_abbr) if name}
WEEKDAYS = {"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}
FIRST_YEAR, LAST_YEAR = 1970, 2199

# One list item: a value, a range or *, and an optional step ("10-50/20", "*/5", "0/15", "MON").
_ITEM = re.compile(r"(\*|[A-Z0-9]+)(?:-([A-Z0-9]+))?(?:/([0-9]+))?")
_NEAREST_WEEKDAY = re.compile(r"([0-9]+)W")
_LAST_OF_WEEK = re.compile(r"([0-9]+|[A-Z]{3})L")
_NTH_OF_WEEK = re.compile(r"([0-9]+|[A-Z]{3})#([0-9]+)")

Wall = tuple[int, int, int, int, int]  # year, month, day, hour, minute in the schedule's zone


class FieldError(ValueError):
    """One field's problem, said without the expression (schedule_times prefixes it)."""


@dataclass(frozen=True)
class Days:
    """A day-of-month or day-of-week field. kind: "any" (?), "set" (values are days of the
    month or 1-7 weekdays), "last" (L), "last_weekday" (LW), "nearest_weekday" (nW: values
    (n,)), "last_of_week" (nL: (n,)), "nth" (n#k: (n, k))."""

    kind: str
    values: tuple[int, ...] = ()


@dataclass(frozen=True)
class CronFields:
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    day_of_month: Days
    months: tuple[int, ...]
    day_of_week: Days
    years: tuple[int, ...]


def parse_fields(fields: list[str]) -> CronFields:
    """The six fields (already split on white space), or FieldError naming the first bad one."""
    minutes, hours, dom_text, month_text, dow_text, year_text = (f.upper() for f in fields)
    parsed = CronFields(
        minutes=_values("minutes", minutes, 0, 59),
        hours=_values("hours", hours, 0, 23),
        day_of_month=_day_of_month(dom_text),
        months=_values("month", month_text, 1, 12, MONTHS),
        day_of_week=_day_of_week(dow_text),
        years=_values("year", year_text, FIRST_YEAR, LAST_YEAR),
    )
    # https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html
    # ("Limitations"): one of the two day fields must be ?, and not both.
    any_dom, any_dow = parsed.day_of_month.kind == "any", parsed.day_of_week.kind == "any"
    if any_dom and any_dow:
        raise FieldError("day-of-month and day-of-week are both ?: give one of them a value "
                         "and keep ? in the other, e.g. * ? for every day")
    if not any_dom and not any_dow:
        raise FieldError(f"day-of-month ({dom_text}) and day-of-week ({dow_text}) both have a "
                         "value: one of them must be ? (e.g. * ? for every day, ? MON-FRI for "
                         "weekdays)")
    return parsed


def walk(fields: CronFields, start: Wall) -> Iterator[Wall]:
    """Every wall-clock minute the fields name, in order, from ``start`` (included): years, then
    months, then that month's matching days, then hours, then minutes; a month no day matches
    (Feb 30, a fifth Friday) costs one step, not a month of minutes."""
    y0, mo0, d0, h0, mi0 = start
    for year in fields.years[bisect_left(fields.years, y0):]:
        first_year = year == y0
        for month in fields.months[bisect_left(fields.months, mo0) if first_year else 0:]:
            first_month = first_year and month == mo0
            days = month_days(fields.day_of_month, fields.day_of_week, year, month)
            for day in days[bisect_left(days, d0) if first_month else 0:]:
                first_day = first_month and day == d0
                for hour in fields.hours[bisect_left(fields.hours, h0) if first_day else 0:]:
                    first_hour = first_day and hour == h0
                    for minute in fields.minutes[
                            bisect_left(fields.minutes, mi0) if first_hour else 0:]:
                        yield year, month, day, hour, minute


@lru_cache(maxsize=8192)
def month_days(dom: Days, dow: Days, year: int, month: int) -> tuple[int, ...]:
    """The days of that month the two day fields name, ascending (exactly one is "any")."""
    first_weekday, length = calendar.monthrange(year, month)

    def weekday(day: int) -> int:  # EventBridge's numbering: 1 = SUN ... 7 = SAT
        return (first_weekday + day) % 7 + 1

    if dom.kind == "set":
        return tuple(d for d in dom.values if d <= length)
    if dom.kind == "last":
        return (length,)
    if dom.kind == "last_weekday":
        return (length - {7: 1, 1: 2}.get(weekday(length), 0),)
    if dom.kind == "nearest_weekday":
        (day,) = dom.values
        if day > length:  # 31W in a 30-day month: like plain 31, that month has no such day
            return ()
        # Quartz's rule (the nearest weekday, never leaving the month): Saturday -> Friday
        # unless the 1st (-> Monday 3rd); Sunday -> Monday unless the last day (-> Friday).
        if weekday(day) == 7:
            return (3,) if day == 1 else (day - 1,)
        if weekday(day) == 1:
            return (day - 2,) if day == length else (day + 1,)
        return (day,)
    if dow.kind == "set":
        return tuple(d for d in range(1, length + 1) if weekday(d) in dow.values)
    if dow.kind == "last_of_week":
        (wanted,) = dow.values
        return (length - (weekday(length) - wanted) % 7,)
    (wanted, nth) = dow.values  # "nth"
    day = 1 + (wanted - weekday(1)) % 7 + 7 * (nth - 1)
    return (day,) if day <= length else ()


def _values(field: str, text: str, lo: int, hi: int,
            names: dict[str, int] | None = None) -> tuple[int, ...]:
    """A field of , - * / items as its sorted values, or FieldError naming field, value, range."""
    allowed = f"{lo}-{hi}" + (f" or {_name_range(names)}" if names else "")
    chosen: set[int] = set()
    for item in text.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            raise FieldError(f"{field} {item or '(empty)'!r} is not valid: {field} takes "
                             f"{allowed} with , - * /")
        first, last, step = match.groups()
        if first == "*":
            if last is not None:
                raise FieldError(f"{field} {item!r}: * cannot start a range; write {lo}-{last}")
            low, high = lo, hi
        else:
            low = _value(field, first, lo, hi, allowed, names)
            # "0/15" runs from 0 to the field's end, as Quartz reads it (the AWS example 1/10
            # in Minutes: "every tenth minute, starting from the first minute of the hour").
            high = hi if last is None and step else low
            if last is not None:
                high = _value(field, last, lo, hi, allowed, names)
        if low > high:
            raise FieldError(f"{field} {item!r}: a range must run upward ({first} is after "
                             f"{last}); split it, e.g. {first}-{hi},{lo}-{last}")
        if step is not None and int(step) < 1:
            raise FieldError(f"{field} {item!r}: the step after / must be 1 or more")
        chosen.update(range(low, high + 1, int(step) if step else 1))
    return tuple(sorted(chosen))


def _value(field: str, text: str, lo: int, hi: int, allowed: str,
           names: dict[str, int] | None) -> int:
    if text.isdigit():
        if not lo <= int(text) <= hi:
            raise FieldError(f"{field} {int(text)} is out of range {allowed}")
        return int(text)
    if names is not None and text in names:
        return names[text]
    raise FieldError(f"{field} {text!r} is not valid: use {allowed}")


def _name_range(names: dict[str, int]) -> str:
    ordered = sorted(names, key=names.__getitem__)
    return f"{ordered[0]}-{ordered[-1]}"


def _day_of_month(text: str) -> Days:
    if text == "?":
        return Days("any")
    if text == "L":
        return Days("last")
    if text == "LW":
        return Days("last_weekday")
    nearest = _NEAREST_WEEKDAY.fullmatch(text)
    if nearest is not None:
        day = int(nearest.group(1))
        if not 1 <= day <= 31:
            raise FieldError(f"day-of-month {text!r}: {day} is out of range 1-31")
        return Days("nearest_weekday", (day,))
    if "L" in text or "W" in text:
        # Quartz allows L and W only on their own (not in a list or range); so do we.
        raise FieldError(f"day-of-month {text!r}: L and W stand alone: write L (last day), LW "
                         "(last weekday) or nW (weekday nearest day n, e.g. 15W)")
    return Days("set", _values("day-of-month", text, 1, 31))


def _day_of_week(text: str) -> Days:
    if text == "?":
        return Days("any")
    if text == "L":  # Quartz: L alone in day-of-week is the week's last day, 7 = SAT
        return Days("set", (7,))
    last = _LAST_OF_WEEK.fullmatch(text)
    if last is not None:
        return Days("last_of_week", (_weekday(text, last.group(1)),))
    nth = _NTH_OF_WEEK.fullmatch(text)
    if nth is not None:
        weekday, week = _weekday(text, nth.group(1)), int(nth.group(2))
        if not 1 <= week <= 5:
            raise FieldError(f"day-of-week {text!r}: the number after # is the week of the "
                             f"month and must be 1-5, not {week}")
        return Days("nth", (weekday, week))
    if "L" in text or "#" in text:  # (no day name has an L)
        # AWS: "If you use the '#' character, you can define only one expression in the
        # day-of-week field"; Quartz likewise for L.
        raise FieldError(f"day-of-week {text!r}: L and # stand alone: write one nL (last "
                         "weekday n of the month, e.g. 6L) or n#k (e.g. 2#1), not in a list")
    # Steps (1/2: every other day from SUN) are taken: EventBridge's cron reference lists / among
    # day-of-week's wildcards in some of its versions and not in others; refusing what Scheduler
    # takes would be worse than Scheduler refusing it at CreateSchedule, with its own words.
    # https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-cron-expressions.html
    return Days("set", _values("day-of-week", text, 1, 7, WEEKDAYS))


def _weekday(text: str, value: str) -> int:
    if value in WEEKDAYS:
        return WEEKDAYS[value]
    if value.isdigit() and 1 <= int(value) <= 7:
        return int(value)
    raise FieldError(f"day-of-week {text!r}: {value} is not a day: use 1-7 (1 = SUN) or SUN-SAT")
