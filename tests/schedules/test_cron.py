"""Cron parsing and next runs: the DST table, properties against independent oracles, errors."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from drainpipe import DrainpipeError
from drainpipe.schedules.cron import CronSpec, assert_cron, next_cron_run, parse_cron


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def runs(expr: str, zone: str, after: str, count: int) -> list[str]:
    out, moment = [], utc(after)
    for _ in range(count):
        moment = next_cron_run(expr, zone, moment)
        assert moment.tzinfo is UTC
        out.append(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return out


# (expression, zone, after, the next runs chained from there) — exact to the second.
# 2025 transitions: Amsterdam 03-30 02:00→03:00 (01:00Z), 10-26 03:00→02:00 (01:00Z);
# New York 03-09 02:00→03:00 (07:00Z), 11-02 02:00→01:00 (06:00Z); Lord Howe 10-05
# 02:00→02:30 (10-04 15:30Z), 04-06 02:00→01:30 (04-05 15:00Z); Kolkata has no DST (+05:30).
DST_TABLE = [
    # -- Europe/Amsterdam, spring forward
    (
        "30 2 * * *",
        "Europe/Amsterdam",
        "2025-03-29T12:00:00Z",
        ["2025-03-30T01:00:00Z", "2025-03-31T00:30:00Z"],
    ),  # 02:30 skipped → 03:00 local, once
    (
        "0 2 * * *",
        "Europe/Amsterdam",
        "2025-03-29T12:00:00Z",
        ["2025-03-30T01:00:00Z", "2025-03-31T00:00:00Z"],
    ),
    (
        "*/20 2 * * *",
        "Europe/Amsterdam",
        "2025-03-29T12:00:00Z",
        ["2025-03-30T01:00:00Z", "2025-03-31T00:00:00Z"],
    ),  # three skipped times → one run
    (
        "0 9 * * *",
        "Europe/Amsterdam",
        "2025-03-28T12:00:00Z",
        ["2025-03-29T08:00:00Z", "2025-03-30T07:00:00Z", "2025-03-31T07:00:00Z"],
    ),  # 09:00 stays
    (
        "*/30 * * * *",
        "Europe/Amsterdam",
        "2025-03-30T00:00:00Z",
        ["2025-03-30T00:30:00Z", "2025-03-30T01:00:00Z", "2025-03-30T01:30:00Z"],
    ),
    (
        "0 * * * *",
        "Europe/Amsterdam",
        "2025-03-29T23:30:00Z",
        ["2025-03-30T00:00:00Z", "2025-03-30T01:00:00Z", "2025-03-30T02:00:00Z"],
    ),
    (
        "5 minutes",
        "Europe/Amsterdam",
        "2025-03-30T00:57:00Z",
        ["2025-03-30T01:02:00Z", "2025-03-30T01:07:00Z"],
    ),
    # -- Europe/Amsterdam, fall back (02:00-02:59 happens twice)
    (
        "30 2 * * *",
        "Europe/Amsterdam",
        "2025-10-25T12:00:00Z",
        ["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"],
    ),  # first pass only
    (
        "30 2 * * *",
        "Europe/Amsterdam",
        "2025-10-26T01:10:00Z",
        ["2025-10-27T01:30:00Z"],
    ),  # from inside the second pass: not again that night
    (
        "0 9 * * *",
        "Europe/Amsterdam",
        "2025-10-25T00:00:00Z",
        ["2025-10-25T07:00:00Z", "2025-10-26T08:00:00Z"],
    ),
    (
        "*/30 * * * *",
        "Europe/Amsterdam",
        "2025-10-25T23:45:00Z",
        [
            "2025-10-26T00:00:00Z",
            "2025-10-26T00:30:00Z",
            "2025-10-26T01:00:00Z",
            "2025-10-26T01:30:00Z",
            "2025-10-26T02:00:00Z",
        ],
    ),  # both passes: every 30 real minutes
    (
        "1 hours",
        "Europe/Amsterdam",
        "2025-10-26T00:30:00Z",
        ["2025-10-26T01:30:00Z", "2025-10-26T02:30:00Z"],
    ),
    # -- America/New_York, spring forward
    (
        "30 2 * * *",
        "America/New_York",
        "2025-03-08T12:00:00Z",
        ["2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z"],
    ),
    (
        "0 9 * * 1-5",
        "America/New_York",
        "2025-03-07T00:00:00Z",
        ["2025-03-07T14:00:00Z", "2025-03-10T13:00:00Z"],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2025-03-09T05:30:00Z",
        ["2025-03-09T06:00:00Z", "2025-03-09T07:00:00Z", "2025-03-09T08:00:00Z"],
    ),
    (
        "90 seconds",
        "America/New_York",
        "2025-03-09T06:59:00Z",
        ["2025-03-09T07:00:30Z", "2025-03-09T07:02:00Z"],
    ),
    # -- America/New_York, fall back (01:00-01:59 happens twice)
    (
        "30 1 * * *",
        "America/New_York",
        "2025-11-01T12:00:00Z",
        ["2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"],
    ),
    (
        "*/20 * * * *",
        "America/New_York",
        "2025-11-02T05:30:00Z",
        [
            "2025-11-02T05:40:00Z",
            "2025-11-02T06:00:00Z",
            "2025-11-02T06:20:00Z",
            "2025-11-02T06:40:00Z",
            "2025-11-02T07:00:00Z",
        ],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2025-11-02T04:30:00Z",
        ["2025-11-02T05:00:00Z", "2025-11-02T06:00:00Z", "2025-11-02T07:00:00Z"],
    ),
    (
        "15 minutes",
        "America/New_York",
        "2025-11-02T05:50:00Z",
        ["2025-11-02T06:05:00Z", "2025-11-02T06:20:00Z"],
    ),
    # -- Australia/Lord_Howe, spring forward by 30 minutes (02:00-02:29 skipped)
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2025-10-04T00:00:00Z",
        ["2025-10-04T15:30:00Z", "2025-10-05T15:15:00Z"],
    ),  # 02:15 → 02:30 local
    (
        "0 2 * * *",
        "Australia/Lord_Howe",
        "2025-10-04T00:00:00Z",
        ["2025-10-04T15:30:00Z", "2025-10-05T15:00:00Z"],
    ),
    (
        "*/30 * * * *",
        "Australia/Lord_Howe",
        "2025-10-04T14:45:00Z",
        ["2025-10-04T15:00:00Z", "2025-10-04T15:30:00Z", "2025-10-04T16:00:00Z"],
    ),
    (
        "0 * * * *",
        "Australia/Lord_Howe",
        "2025-10-04T14:00:00Z",
        ["2025-10-04T14:30:00Z", "2025-10-04T16:00:00Z"],
    ),  # 02:00 does not exist that night
    (
        "45 minutes",
        "Australia/Lord_Howe",
        "2025-10-04T15:00:00Z",
        ["2025-10-04T15:45:00Z", "2025-10-04T16:30:00Z"],
    ),
    # -- Australia/Lord_Howe, fall back by 30 minutes (01:30-01:59 happens twice)
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2025-04-05T00:00:00Z",
        ["2025-04-05T14:45:00Z", "2025-04-06T15:15:00Z"],
    ),
    (
        "*/15 * * * *",
        "Australia/Lord_Howe",
        "2025-04-05T14:20:00Z",
        [
            "2025-04-05T14:30:00Z",
            "2025-04-05T14:45:00Z",
            "2025-04-05T15:00:00Z",
            "2025-04-05T15:15:00Z",
            "2025-04-05T15:30:00Z",
        ],
    ),
    (
        "0 9 * * *",
        "Australia/Lord_Howe",
        "2025-04-04T12:00:00Z",
        ["2025-04-04T22:00:00Z", "2025-04-05T22:30:00Z"],
    ),
    # -- Asia/Kolkata: the same nights change nothing (+05:30 all year)
    (
        "30 2 * * *",
        "Asia/Kolkata",
        "2025-03-29T12:00:00Z",
        ["2025-03-29T21:00:00Z", "2025-03-30T21:00:00Z"],
    ),
    (
        "0 * * * *",
        "Asia/Kolkata",
        "2025-10-26T00:10:00Z",
        ["2025-10-26T00:30:00Z", "2025-10-26T01:30:00Z"],
    ),
    (
        "*/45 * * * *",
        "Asia/Kolkata",
        "2025-11-02T00:00:00Z",
        ["2025-11-02T00:15:00Z", "2025-11-02T00:30:00Z", "2025-11-02T01:15:00Z"],
    ),
    (
        "2 hours",
        "Asia/Kolkata",
        "2025-11-02T06:00:00Z",
        ["2025-11-02T08:00:00Z", "2025-11-02T10:00:00Z"],
    ),
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), DST_TABLE)
def test_dst_table(expr: str, zone: str, after: str, expected: list[str]) -> None:
    assert runs(expr, zone, after, len(expected)) == expected


def test_forms_case_whitespace_names_and_macros() -> None:
    after = utc("2025-01-01T10:07:00Z")  # a Wednesday
    assert next_cron_run("  @DAILY \n", after=after) == utc("2025-01-02T00:00:00Z")
    assert next_cron_run("@hourly", after=after) == utc("2025-01-01T11:00:00Z")
    assert next_cron_run("@weekly", after=after) == utc("2025-01-05T00:00:00Z")
    assert next_cron_run("@monthly", after=after) == utc("2025-02-01T00:00:00Z")
    assert next_cron_run("@yearly", after=after) == next_cron_run("@annually", after=after)
    assert next_cron_run("@midnight", after=after) == utc("2025-01-02T00:00:00Z")
    assert next_cron_run("0 9 * jan-mar MON-fri", after=after) == utc("2025-01-02T09:00:00Z")
    assert next_cron_run("0 9 * * 7", after=after) == utc("2025-01-05T09:00:00Z")  # 7 = Sunday
    assert next_cron_run("10/20 * * * *", after=after) == utc("2025-01-01T10:10:00Z")
    assert next_cron_run("0 0 1-10/3 * *", after=after) == utc("2025-01-04T00:00:00Z")
    assert next_cron_run("3 SECONDS", after=after) == after + timedelta(seconds=3)
    assert next_cron_run("1 second", after=after) == after + timedelta(seconds=1)
    assert next_cron_run("2 Hour", after=after) == after + timedelta(hours=2)


def test_day_of_month_or_day_of_week() -> None:
    after = utc("2025-01-01T12:00:00Z")  # Wednesday
    # both restricted: either matches (the 15th, or any Friday)
    assert runs("0 0 15 * FRI", "UTC", "2025-01-01T12:00:00Z", 3) == [
        "2025-01-03T00:00:00Z",
        "2025-01-10T00:00:00Z",
        "2025-01-15T00:00:00Z",
    ]
    # a field starting with * makes both apply (Vixie cron): odd days that are Fridays
    assert next_cron_run("0 0 */2 * FRI", after=after) == utc("2025-01-03T00:00:00Z")
    assert next_cron_run("0 0 */2 * 5", after=utc("2025-01-03T01:00:00Z")) == utc(
        "2025-01-17T00:00:00Z"
    )
    assert next_cron_run("0 0 13 * *", after=after) == utc("2025-01-13T00:00:00Z")


def test_strictly_after_and_aware_utc() -> None:
    at = utc("2025-01-01T10:00:00Z")
    assert next_cron_run("0 10 * * *", after=at) == utc("2025-01-02T10:00:00Z")
    assert next_cron_run("* * * * *", after=at + timedelta(microseconds=1)) == utc(
        "2025-01-01T10:01:00Z"
    )
    paris = at.astimezone(ZoneInfo("Europe/Paris"))
    assert next_cron_run("0 12 * * *", after=paris).tzinfo is UTC
    assert next_cron_run("0 0 29 2 *", after=utc("2097-03-01T00:00:00Z")) == utc(
        "2104-02-29T00:00:00Z"
    )


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("", "expected 5 fields (minute hour day month weekday)"),
        ("* * * *", "expected 5 fields (minute hour day month weekday)"),
        ("* * * * * *", "expected 5 fields (minute hour day month weekday)"),
        ("@reboot", "expected 5 fields (minute hour day month weekday)"),
        ("5 days", "expected 5 fields (minute hour day month weekday)"),
        ("60 * * * *", '"60" is outside 0-59'),
        ("* 24 * * *", '"24" is outside 0-23'),
        ("* * 0 * *", '"0" is outside 1-31'),
        ("* * 32 * *", '"32" is outside 1-31'),
        ("* * * 13 *", '"13" is outside 1-12'),
        ("* * * * 8", '"8" is outside 0-7'),
        ("*/0 * * * *", '"*/0" is outside 0-59'),
        ("5-1 * * * *", '"5-1" is outside 0-59'),
        ("* * * * SAT-SUN", '"SAT-SUN" is outside 0-7'),
        ("* * * * L", '"L" is not a cron field'),
        ("* * ? * *", '"?" is not a cron field'),
        ("* * * * 1#2", '"1#2" is not a cron field'),
        ("* * * JANUARY *", '"JANUARY" is not a cron field'),
        ("MON * * * *", '"MON" is not a cron field'),
        ("* * * * JAN", '"JAN" is not a cron field'),
        ("1,,2 * * * *", '"" is not a cron field'),
        ("-1 * * * *", '"-1" is not a cron field'),
        ("*/-1 * * * *", '"*/-1" is not a cron field'),
        ("0 0 30 2 *", "it never matches a date"),
        ("0 0 31 4,6,9,11 *", "it never matches a date"),
        ("0 seconds", "the interval must be positive"),
        ("0 minutes", "the interval must be positive"),
        ("00 hours", "the interval must be positive"),
        # past int()'s 4300-digit limit: still our message, not Python's
        ("1" * 5000 + " * * * *", f'"{"1" * 5000}" is outside 0-59'),
        ("9" * 5000 + " seconds", "the interval must be at most 366 days"),
        ("0" * 5000 + " minutes", "the interval must be positive"),
        # only ASCII whitespace separates, as in Postgres (a no-break space is not a space)
        ("0\u00a00 * * *", "expected 5 fields (minute hour day month weekday)"),
        ("0\u20030 * * *", "expected 5 fields (minute hour day month weekday)"),
        ("5\u00a0minutes", "expected 5 fields (minute hour day month weekday)"),
        ("0\x1c0 * * *", "expected 5 fields (minute hour day month weekday)"),
    ],
)
def test_error_messages(expr: str, reason: str) -> None:
    message = f'Invalid cron "{expr.strip(" ")}": {reason}'
    with pytest.raises(ValueError, match=r"^Invalid cron") as caught:
        assert_cron(expr)
    assert str(caught.value) == message
    with pytest.raises(ValueError, match=r"^Invalid cron") as caught:
        next_cron_run(expr, "UTC", utc("2025-01-01T00:00:00Z"))
    assert str(caught.value) == message


def test_other_errors() -> None:
    with pytest.raises(ValueError, match=r'^Invalid cron "None": expected a string$'):
        assert_cron(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r'^Unknown time zone "Mars/Olympus"$'):
        next_cron_run("@daily", "Mars/Olympus", utc("2025-01-01T00:00:00Z"))
    with pytest.raises(ValueError, match=r"^Unknown time zone"):
        next_cron_run("@daily", "../etc/passwd", utc("2025-01-01T00:00:00Z"))
    with pytest.raises(DrainpipeError) as caught:
        next_cron_run("@daily", "UTC", datetime(2025, 1, 1))
    assert caught.value.kind == "validation"
    # 29 February with a weekday restriction through "*": valid (some leap day is a Monday)
    assert_cron("0 0 29 2 *")
    assert_cron("0 0 30 2 MON")  # OR rule: every Monday of February
    # huge numbers with leading zeros are still the small number they spell
    assert next_cron_run("0" * 5000 + "1 minutes", after=utc("2025-01-01T00:00:00Z")) == utc(
        "2025-01-01T00:01:00Z"
    )
    # a step past the range keeps only the start, however many digits it has (like */100)
    assert next_cron_run("*/" + "7" * 5000 + " * * * *", after=utc("2025-01-01T00:00:00Z")) == (
        utc("2025-01-01T01:00:00Z")
    )
    assert_cron(" \t@daily\r\n")
    assert_cron("0\t0\v*\f* *")  # what Postgres's \\s also splits on


# -- properties ----------------------------------------------------------------------------

ZONES = ["UTC", "Europe/Amsterdam", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"]
# instants near the 2025 transitions, where mistakes would show
TRANSITIONS = [
    utc("2025-03-30T01:00:00Z"),
    utc("2025-10-26T01:00:00Z"),
    utc("2025-03-09T07:00:00Z"),
    utc("2025-11-02T06:00:00Z"),
    utc("2025-10-04T15:30:00Z"),
    utc("2025-04-05T15:00:00Z"),
]
FIELD_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


@st.composite
def field_text(draw: st.DrawFn, index: int) -> str:
    low, high = FIELD_RANGES[index]
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["*", "*/s", "n", "n-m", "n-m/s", "n/s"]))
        a = draw(st.integers(low, high))
        b = draw(st.integers(a, high))
        s = draw(st.integers(1, max(1, (high - low) // 2)))
        parts.append(
            {
                "*": "*",
                "*/s": f"*/{s}",
                "n": f"{a}",
                "n-m": f"{a}-{b}",
                "n-m/s": f"{a}-{b}/{s}",
                "n/s": f"{a}/{s}",
            }[kind]
        )
    return ",".join(parts)


@st.composite
def cron_text(draw: st.DrawFn) -> str:
    fields = [draw(field_text(i)) for i in range(5)]
    # keep most expressions frequent enough for the brute-force oracle's window
    if draw(st.booleans()):
        fields[2], fields[3], fields[4] = (
            "*",
            "*",
            draw(st.sampled_from(["*", "1-5", "0,6", "*/2"])),
        )
    return " ".join(fields)


afters = st.one_of(
    st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)
    ),
    st.builds(
        lambda base, minutes, micro: base + timedelta(minutes=minutes, microseconds=micro),
        st.sampled_from(TRANSITIONS),
        st.integers(-26 * 60, 26 * 60),
        st.integers(0, 999_999),
    ),
)


def _matches(spec: CronSpec, local: datetime) -> bool:
    return (
        local.minute in spec.minutes
        and local.hour in spec.hours
        and spec.matches_date(local.date())
    )


def _gap_runs(spec: CronSpec, tz: ZoneInfo, moment: datetime) -> bool:
    """``moment`` ends a spring-forward gap in which some matching wall time was skipped."""
    before = (moment - timedelta(seconds=1)).astimezone(tz)
    after = moment.astimezone(tz)
    assert before.utcoffset() is not None and after.utcoffset() is not None
    jump = after.utcoffset() - before.utcoffset()  # type: ignore[operator]
    if jump <= timedelta(0):
        return False
    wall = after.replace(tzinfo=None) - jump
    while wall < after.replace(tzinfo=None):
        if _matches(spec, wall):
            return True
        wall += timedelta(minutes=1)
    return False


def oracle_runs_at(spec: CronSpec, tz: ZoneInfo, moment: datetime) -> bool:
    """Whether a schedule runs at ``moment``, decided from the instant alone (the contract's
    DST rules restated), independent of the implementation's search."""
    local = moment.astimezone(tz)
    if spec.wall_clock:
        return (_matches(spec, local) and local.fold == 0) or _gap_runs(spec, tz, moment)
    return _matches(spec, local)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=cron_text(), zone=st.sampled_from(ZONES), after=afters)
def test_next_run_is_the_first_matching_instant_strictly_after(
    expr: str, zone: str, after: datetime
) -> None:
    try:
        spec = parse_cron(expr)
    except ValueError as exc:
        assume("never matches" not in str(exc))
        raise
    assert isinstance(spec, CronSpec)
    tz = ZoneInfo(zone)
    result = next_cron_run(expr, zone, after)
    assert result > after
    assert result.tzinfo is UTC
    assert oracle_runs_at(spec, tz, result), (expr, zone, after, result)
    # nothing ran in between: walk every minute (2 days at most) between after and result
    moment = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    horizon = min(result, after + timedelta(days=2))
    while moment < horizon:
        assert not oracle_runs_at(spec, tz, moment), (expr, zone, after, moment, result)
        moment += timedelta(minutes=1)


@settings(max_examples=300, deadline=None)
@given(expr=cron_text(), zone=st.sampled_from(["UTC", "Asia/Kolkata"]), after=afters)
def test_agrees_with_cronsim_where_there_is_no_dst(expr: str, zone: str, after: datetime) -> None:
    from cronsim import CronSim

    # cronsim reads a one-value range with a step ("7-7/2") as "7/2" (7 to the maximum)
    assume(not re.search(r"(?<![0-9])([0-9]+)-\1/", expr))
    try:
        ours = next_cron_run(expr, zone, after)
    except ValueError:
        assume(False)
        raise
    theirs = next(CronSim(expr, after.astimezone(ZoneInfo(zone))))
    assert ours == theirs.astimezone(UTC), (expr, zone, after)


@settings(max_examples=100, deadline=None)
@given(
    amount=st.integers(1, 500),
    unit=st.sampled_from(["second", "seconds", "minute", "minutes", "hour", "hours"]),
    zone=st.sampled_from(ZONES),
    after=afters,
)
def test_intervals_count_real_time(amount: int, unit: str, zone: str, after: datetime) -> None:
    scale = {"second": 1, "minute": 60, "hour": 3600}[unit.rstrip("s")]
    assert next_cron_run(f"{amount} {unit}", zone, after) == after + timedelta(
        seconds=amount * scale
    )


def test_wall_clock_schedule_runs_once_per_day_for_a_year() -> None:
    # every day of 2025 in every zone: exactly one 02:30 run per local date
    for zone in ZONES:
        tz = ZoneInfo(zone)
        moment = utc("2024-12-31T12:00:00Z")
        seen: list[date] = []
        while True:
            moment = next_cron_run("30 2 * * *", zone, moment)
            if moment.year > 2025 or (
                moment.year == 2025 and moment.month == 12 and moment.day == 31
            ):
                break
            seen.append(moment.astimezone(tz).date())
        assert len(seen) == len(set(seen)), zone
        assert len(seen) >= 364, zone
