"""EventBridge Scheduler's expressions: what is refused, and the fire times, as Scheduler computes
them (dispatcher/domain/schedule_times.py cites the AWS pages for each rule)."""

from __future__ import annotations

import calendar
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.domain.schedule_times import BadSchedule, check_at, fires, parse, zone


def utc(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: float = 0) -> float:
    return calendar.timegm((y, mo, d, h, mi, 0)) + s


def wall(tz: str, y: int, mo: int, d: int, h: int = 0, mi: int = 0, fold: int = 0) -> float:
    return datetime(y, mo, d, h, mi, tzinfo=ZoneInfo(tz), fold=fold).timestamp()


def walls(times: list[float], tz: str) -> list[str]:
    return [datetime.fromtimestamp(t, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z") for t in times]


# --- known next fires ---------------------------------------------------------------------

@pytest.mark.parametrize(("expression", "tz", "after", "expected"), [
    # daily, hourly
    ("cron(0 2 * * ? *)", "UTC", utc(2026, 1, 1, 3),
     ["2026-01-02 02:00 UTC", "2026-01-03 02:00 UTC", "2026-01-04 02:00 UTC"]),
    ("cron(15 * * * ? *)", "UTC", utc(2026, 1, 1, 23, 15),
     ["2026-01-02 00:15 UTC", "2026-01-02 01:15 UTC", "2026-01-02 02:15 UTC"]),
    ("cron(0/20 8-9 * * ? *)", "UTC", utc(2026, 1, 1, 9, 30),
     ["2026-01-01 09:40 UTC", "2026-01-02 08:00 UTC", "2026-01-02 08:20 UTC"]),
    ("cron(10-50/20 12 * * ? *)", "UTC", utc(2026, 1, 1),
     ["2026-01-01 12:10 UTC", "2026-01-01 12:30 UTC", "2026-01-01 12:50 UTC"]),
    # weekdays, across New York's spring-forward (2026-03-08): the wall time stays 09:00
    ("cron(0 9 ? * MON-FRI *)", "America/New_York", wall("America/New_York", 2026, 3, 6, 10),
     ["2026-03-09 09:00 EDT", "2026-03-10 09:00 EDT", "2026-03-11 09:00 EDT"]),
    ("cron(0 9 ? * 2-6 *)", "America/New_York", wall("America/New_York", 2026, 3, 6, 8),
     ["2026-03-06 09:00 EST", "2026-03-09 09:00 EDT", "2026-03-10 09:00 EDT"]),
    # L: the month's last day, in Berlin across its spring-forward (2026-03-29)
    ("cron(0 12 L * ? *)", "Europe/Berlin", utc(2026, 2, 1),
     ["2026-02-28 12:00 CET", "2026-03-31 12:00 CEST", "2026-04-30 12:00 CEST"]),
    # LW: the last weekday (2026-01-31 is a Saturday, 2026-05-31 a Sunday)
    ("cron(0 9 LW JAN,MAY ? *)", "UTC", utc(2026, 1, 1),
     ["2026-01-30 09:00 UTC", "2026-05-29 09:00 UTC", "2027-01-29 09:00 UTC"]),
    # nW: 2026-03-15 is a Sunday (-> Mon 16), 2026-08-15 a Saturday (-> Fri 14)
    ("cron(0 8 15W MAR,AUG ? *)", "UTC", utc(2026, 1, 1),
     ["2026-03-16 08:00 UTC", "2026-08-14 08:00 UTC", "2027-03-15 08:00 UTC"]),
    # 1W never leaves the month: 2026-08-01 is a Saturday -> Monday the 3rd, not July 31
    ("cron(0 8 1W 8 ? 2026)", "UTC", utc(2026, 1, 1), ["2026-08-03 08:00 UTC"]),
    # 31W: 2026-05-31 is a Sunday and the last day -> Friday the 29th
    ("cron(0 8 31W 5 ? 2026)", "UTC", utc(2026, 1, 1), ["2026-05-29 08:00 UTC"]),
    # #: the second Tuesday; the fifth Monday (only March has one in 2026's first quarter)
    ("cron(0 10 ? * 3#2 *)", "Europe/Berlin", utc(2026, 1, 1),
     ["2026-01-13 10:00 CET", "2026-02-10 10:00 CET", "2026-03-10 10:00 CET"]),
    ("cron(0 10 ? * MON#5 2026)", "UTC", utc(2026, 1, 1),
     ["2026-03-30 10:00 UTC", "2026-06-29 10:00 UTC", "2026-08-31 10:00 UTC"]),
    # nL: the last Friday; L alone in day-of-week: Saturday
    ("cron(0 18 ? * 6L *)", "America/New_York", utc(2026, 1, 1),
     ["2026-01-30 18:00 EST", "2026-02-27 18:00 EST", "2026-03-27 18:00 EDT"]),
    ("cron(0 18 ? * FRIL *)", "UTC", utc(2026, 1, 1),
     ["2026-01-30 18:00 UTC", "2026-02-27 18:00 UTC", "2026-03-27 18:00 UTC"]),
    ("cron(0 7 ? * L *)", "UTC", utc(2026, 1, 1),
     ["2026-01-03 07:00 UTC", "2026-01-10 07:00 UTC", "2026-01-17 07:00 UTC"]),
    # a year-limited cron ends: two fires, though five were asked for
    ("cron(0 0 1 1 ? 2027-2028)", "UTC", utc(2026, 6, 1),
     ["2027-01-01 00:00 UTC", "2028-01-01 00:00 UTC"]),
    ("cron(0 0 1 1 ? 2020)", "UTC", utc(2026, 6, 1), []),
    # month names, lower case read as upper
    ("cron(0 6 1 jan-mar/2 ? *)", "UTC", utc(2026, 1, 1, 12),
     ["2026-03-01 06:00 UTC", "2027-01-01 06:00 UTC", "2027-03-01 06:00 UTC"]),
])
def test_known_next_fires(expression: str, tz: str, after: float, expected: list[str]) -> None:
    got = fires(parse(expression), tz, after, 5 if len(expected) < 3 else 3)
    assert walls(got, tz) == expected
    assert all(t == int(t) for t in got)


def test_fires_are_strictly_after_and_within_start_and_end() -> None:
    daily = parse("cron(0 2 * * ? *)")
    assert fires(daily, "UTC", utc(2026, 1, 1, 2), 1) == [utc(2026, 1, 2, 2)]
    assert fires(daily, "UTC", utc(2026, 1, 1, 1, 59, 59.5), 1) == [utc(2026, 1, 1, 2)]
    assert fires(daily, "UTC", utc(2026, 1, 1), 2, start=utc(2026, 1, 3, 2)) == [
        utc(2026, 1, 3, 2), utc(2026, 1, 4, 2)]
    assert fires(daily, "UTC", utc(2026, 1, 1), 9, end=utc(2026, 1, 3, 2)) == [
        utc(2026, 1, 1, 2), utc(2026, 1, 2, 2), utc(2026, 1, 3, 2)]
    assert fires(daily, "UTC", utc(2026, 1, 1), 0) == []
    assert fires(daily, "UTC", utc(2200, 1, 1), 3) == []


# --- daylight saving time -----------------------------------------------------------------

def test_a_cron_in_the_spring_gap_is_skipped_that_day_and_fires_the_next() -> None:
    got = fires(parse("cron(30 2 * * ? *)"), "Europe/Berlin", utc(2026, 3, 27), 3)
    assert walls(got, "Europe/Berlin") == [
        "2026-03-27 02:30 CET", "2026-03-28 02:30 CET", "2026-03-30 02:30 CEST"]


def test_a_cron_in_the_repeated_autumn_hour_fires_once_at_its_first_occurrence() -> None:
    got = fires(parse("cron(30 1 * * ? *)"), "America/New_York", utc(2026, 10, 31, 12), 2)
    assert got == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]  # 01:30 EDT, then EST
    every_20 = fires(parse("cron(0/20 1 * * ? *)"), "America/New_York", utc(2026, 11, 1), 4)
    assert walls(every_20, "America/New_York") == [
        "2026-11-01 01:00 EDT", "2026-11-01 01:20 EDT", "2026-11-01 01:40 EDT",
        "2026-11-02 01:00 EST"]


def test_a_start_inside_the_repeated_hour_skips_the_minutes_already_passed() -> None:
    # 01:10 EST on 2026-11-01 is the hour's second pass: 01:20 fired in the first, not again.
    second_pass = wall("America/New_York", 2026, 11, 1, 1, 10, fold=1)
    got = fires(parse("cron(20 * * * ? *)"), "America/New_York", second_pass, 2)
    assert walls(got, "America/New_York") == ["2026-11-01 02:20 EST", "2026-11-01 03:20 EST"]


# --- rate ---------------------------------------------------------------------------------

def test_a_rate_is_anchored_at_its_start() -> None:
    start = utc(2026, 5, 4, 10, 7)
    every_15 = parse("rate(15 minutes)")
    assert walls(fires(every_15, "UTC", start, 3, start=start), "UTC") == [
        "2026-05-04 10:22 UTC", "2026-05-04 10:37 UTC", "2026-05-04 10:52 UTC"]
    # Its first fire is the start itself; far later, the phase is still the start's.
    assert fires(every_15, "UTC", start - 60, 1, start=start) == [start]
    assert fires(every_15, "UTC", start + 86_400 * 30 + 1, 1, start=start) == [
        start + 86_400 * 30 + 900]
    assert fires(every_15, "UTC", start, 9, start=start, end=start + 1800) == [
        start + 900, start + 1800]


def test_a_rate_in_days_stays_86400_seconds_apart_across_a_dst_change() -> None:
    start = wall("Europe/Berlin", 2026, 3, 27, 9)
    got = fires(parse("rate(1 day)"), "Europe/Berlin", start, 4, start=start)
    assert [b - a for a, b in zip([start, *got], got, strict=False)] == [86_400.0] * 4
    assert walls(got, "Europe/Berlin")[-1] == "2026-03-31 10:00 CEST"


def test_a_rate_without_its_start_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="start="):
        fires(parse("rate(1 hour)"), "UTC", utc(2026, 1, 1), 1)


def test_seconds_rates_only_in_local_mode() -> None:
    assert parse("rate(30 seconds)", seconds=True).period == 30
    assert parse("rate(1 second)", seconds=True).period == 1
    assert fires(parse("rate(30 seconds)", seconds=True), "UTC", 100.0, 2, start=100.0) == [
        130.0, 160.0]
    assert parse("rate(2 hours)").period == 7200 and parse("rate(2 days)").period == 172_800


# --- at() ---------------------------------------------------------------------------------

def test_at_fires_once_at_its_wall_time_in_the_zone() -> None:
    christmas = parse("at(2026-12-24T18:00:00)")
    expected = [wall("Europe/Berlin", 2026, 12, 24, 18)]
    assert expected == [utc(2026, 12, 24, 17)]
    assert fires(christmas, "Europe/Berlin", utc(2026, 1, 1), 5) == expected
    assert fires(christmas, "Europe/Berlin", expected[0], 5) == []
    # Scheduler ignores StartDate and EndDate for one-time schedules.
    assert fires(christmas, "Europe/Berlin", 0, 1, start=utc(2027, 1, 1), end=1) == expected


def test_check_at_refuses_a_time_the_clocks_skip_and_passes_others() -> None:
    with pytest.raises(BadSchedule, match=r"does not exist in Europe/Berlin.*T03:30:00"):
        check_at(parse("at(2026-03-29T02:30:00)"), "Europe/Berlin")
    assert fires(parse("at(2026-03-29T02:30:00)"), "Europe/Berlin", 0, 1) == []
    check_at(parse("at(2026-03-29T02:30:00)"), "UTC")
    check_at(parse("at(2026-10-25T02:30:00)"), "Europe/Berlin")  # ambiguous: fires once
    assert fires(parse("at(2026-10-25T02:30:00)"), "Europe/Berlin", 0, 2) == [
        utc(2026, 10, 25, 0, 30)]
    check_at(parse("cron(30 2 * * ? *)"), "Europe/Berlin")  # nothing to check


# --- validation ---------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "says"), [
    ("cron(0 2 * * ? * *)", "has 7 fields, a cron has 6"),
    ("cron(0 2 * * ?)", "has 5 fields"),
    ("cron(0 2 ? * ? *)", "both ?"),
    ("cron(0 2 * * * *)", "one of them must be ?"),
    ("cron(0 2 1 * MON *)", "one of them must be ?"),
    ("cron(60 2 * * ? *)", "minutes 60 is out of range 0-59"),
    ("cron(0 25 * * ? *)", "hours 25 is out of range 0-23"),
    ("cron(0 2 32 * ? *)", "day-of-month 32 is out of range 1-31"),
    ("cron(0 2 * 13 ? *)", "month 13 is out of range 1-12 or JAN-DEC"),
    ("cron(0 2 * JAM ? *)", "month 'JAM' is not valid: use 1-12 or JAN-DEC"),
    ("cron(0 2 ? * 8 *)", "day-of-week 8 is out of range 1-7 or SUN-SAT"),
    ("cron(0 2 ? * FUN *)", "day-of-week 'FUN' is not valid"),
    ("cron(0 2 * * ? 1969)", "year 1969 is out of range 1970-2199"),
    ("cron(0 2 ? * 2#6 *)", "must be 1-5, not 6"),
    ("cron(0 2 ? * 2#1,3#1 *)", "stand alone"),
    ("cron(0 2 L,15 * ? *)", "L and W stand alone"),
    ("cron(0 22-2 * * ? *)", "split it, e.g. 22-23,0-2"),
    ("cron(*/0 2 * * ? *)", "step after / must be 1 or more"),
    ("cron(0 2 ? * L# *)", "day-of-week 'L#'"),
    ("cron(0 0 30 2 ? *)", "never fires"),
    ("rate(1 minutes)", "write rate(1 minute)"),
    ("rate(5 minute)", "write rate(5 minutes)"),
    ("rate(0 minutes)", "positive whole number"),
    ("rate(30 seconds)", "smallest rate is 1 minute"),
    ("rate(2 weeks)", "unit 'weeks' is not one of minute(s), hour(s), day(s)"),
    ("rate(1.5 hours)", "write rate(value unit)"),
    ("rate(minutes)", "write rate(value unit)"),
    ("at(2026-12-24 18:00:00)", "write at(yyyy-mm-ddThh:mm:ss)"),
    ("at(2026-12-24T18:00:00Z)", "no offset"),
    ("at(2026-02-30T18:00:00)", "2026-02 has no day 30"),
    ("at(2026-12-24T24:00:00)", "is no time of day"),
    ("every 5 minutes", "is not a schedule expression"),
    ("Cron(0 2 * * ? *)", "is not a schedule expression"),
])
def test_every_refusal_names_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(BadSchedule) as refused:
        parse(text)
    message = str(refused.value)
    assert says in message
    assert "\n" not in message
    assert message.startswith(text) or message.startswith(repr(text))


def test_an_unknown_zone_is_named_with_what_to_use() -> None:
    for name in ("Mars/Olympus", "", "../etc/passwd", "utc"):
        with pytest.raises(BadSchedule, match="use an IANA name such as Europe/Berlin"):
            zone(name)
    with pytest.raises(BadSchedule, match="'Mars/Olympus'"):
        fires(parse("cron(0 2 * * ? *)"), "Mars/Olympus", 0, 1)
    assert zone("Europe/Berlin").key == "Europe/Berlin"


def test_parse_normalises_white_space_and_keeps_the_text() -> None:
    assert parse("  cron( 0  2 * *\t? * ) ").text == "cron(0 2 * * ? *)"
    assert parse("cron(0 2 * * ? *)").kind == "cron"
    assert parse("rate(2 days)").kind == "rate" and parse("at(2026-12-24T18:00:00)").kind == "at"
    assert parse("cron(0 2 * * ? *)") == parse("cron(0  2 * * ?  *)")


# --- performance --------------------------------------------------------------------------

def test_a_february_29_cron_finds_the_leap_days_without_walking_minutes() -> None:
    began = time.perf_counter()
    got = fires(parse("cron(0 0 29 2 ? *)"), "Europe/Berlin", utc(2026, 3, 1), 3)
    assert time.perf_counter() - began < 0.05
    assert walls(got, "Europe/Berlin") == [
        "2028-02-29 00:00 CET", "2032-02-29 00:00 CET", "2036-02-29 00:00 CET"]


def test_ten_thousand_next_fires_take_well_under_a_second_or_two() -> None:
    schedules = [(parse(f"cron({i % 60} {i % 24} * * ? *)"), "Europe/Berlin") for i in range(50)]
    schedules += [(parse(f"cron(0/{1 + i % 30} 8-18 ? * MON-FRI *)"), "America/New_York")
                  for i in range(50)]
    day = utc(2026, 3, 28)
    began = time.perf_counter()
    for i in range(10_000):
        expression, tz = schedules[i % len(schedules)]
        assert fires(expression, tz, day + i * 8.64, 1)
    assert time.perf_counter() - began < 2.0


# --- against a brute-force reference -----------------------------------------------------

def _matches(field: str, value: int, lo: int, hi: int) -> bool:
    """The plain meaning of a numeric field (list, range, step, *), independently written."""
    for item in field.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            first, last = lo, hi
        elif "-" in base:
            first, last = (int(v) for v in base.split("-"))
        else:
            first = int(base)
            last = hi if step else first
        if first <= value <= last and (value - first) % int(step or 1) == 0:
            return True
    return False


def _brute_force(expression: str, tz: str, after: int, minutes: int) -> list[float]:
    minute, hour, dom, month, dow, _year = expression[5:-1].split(" ")
    out: list[float] = []
    first = (after // 60 + 1) * 60
    for t in range(first, first + minutes * 60, 60):
        local = datetime.fromtimestamp(t, ZoneInfo(tz))
        if local.fold:  # the repeated hour's second pass: Scheduler fires once, on the first
            continue
        weekday = (local.weekday() + 1) % 7 + 1  # 1 = SUN
        if (_matches(minute, local.minute, 0, 59) and _matches(hour, local.hour, 0, 23)
                and _matches(month, local.month, 1, 12)
                and (dom == "?" or _matches(dom, local.day, 1, 31))
                and (dow == "?" or _matches(dow, weekday, 1, 7))):
            out.append(float(t))
    return out


def _field(lo: int, hi: int) -> st.SearchStrategy[str]:
    number = st.integers(lo, hi)
    pair = st.tuples(number, number).map(sorted)
    item = st.one_of(number.map(str), pair.map(lambda p: f"{p[0]}-{p[1]}"))
    item |= st.one_of(
        st.tuples(number, st.integers(1, hi - lo + 1)).map(lambda p: f"{p[0]}/{p[1]}"),
        st.tuples(pair, st.integers(1, 10)).map(lambda p: f"{p[0][0]}-{p[0][1]}/{p[1]}"),
        st.integers(1, 12).map(lambda s: f"*/{s}"),
    )
    return st.one_of(st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join))


@st.composite
def _crons(draw: st.DrawFn) -> str:
    minute, hour = draw(_field(0, 59)), draw(st.one_of(st.just("*"), _field(0, 23)))
    month = draw(st.one_of(st.just("*"), _field(1, 12)))
    if draw(st.booleans()):
        days = f"{draw(_field(1, 31))} {month} ?"
    else:
        days = f"? {month} {draw(_field(1, 7))}"
    return f"cron({minute} {hour} {days} *)"


@settings(max_examples=150, deadline=None)
@given(expression=_crons(), tz=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]),
       base=st.sampled_from([(2026, 3, 27), (2026, 10, 23), (2026, 3, 6), (2026, 10, 30),
                             (2028, 2, 27)]),
       offset=st.integers(0, 86_400 * 2))
def test_fires_match_a_minute_by_minute_reference(expression: str, tz: str,
                                                  base: tuple[int, int, int],
                                                  offset: int) -> None:
    try:
        parsed = parse(expression)
    except BadSchedule as refused:  # only a cron no date can match is refused here
        message = str(refused)
    else:
        message = ""
    if message:
        assert "never fires" in message
        return
    after = int(utc(*base)) + offset
    window = 3 * 24 * 60
    expected = _brute_force(expression, tz, after, window)
    got = fires(parsed, tz, after, len(expected) + 1, end=after + window * 60)
    assert got == expected
