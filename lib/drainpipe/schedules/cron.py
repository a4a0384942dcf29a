"""Cron expressions with a time zone per schedule, right across daylight-saving changes.

Pure functions, no I/O and no clock: ``assert_cron(expr)`` and
``next_cron_run(expr, time_zone, after)``. Forms:

- five fields ``minute hour day month weekday`` with lists, ranges, steps, ``JAN``-``DEC``
  and ``SUN``-``SAT`` (weekday 0 and 7 are Sunday);
- macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly``;
- intervals ``N second(s)|minute(s)|hour(s)`` (N >= 1), counted from ``after`` in real time.

Day of month and day of week follow Vixie cron: when either field starts with ``*`` a date
must match both, otherwise it matches when either does (``0 0 1,15 * MON`` is the 1st, the
15th and every Monday).

Daylight saving (the schedule's wall clock is the truth):

- Wall-clock schedules (the hour field does not start with ``*``, so ``0 9 * * *``,
  ``30 2 * * *``, ``@daily``): 09:00 stays 09:00 local whatever the offset. A time that a
  spring-forward gap skips runs at the first instant after the gap (02:30 in a 02:00→03:00
  gap runs at 03:00 local; several skipped times collapse into that one run). A time in a
  repeated fall-back hour runs once, at its first occurrence.
- Real-time schedules (the hour field starts with ``*``: ``*/15 * * * *``, ``0 * * * *``,
  ``@hourly``): every local time that happens runs, so both passes of a repeated hour run
  and skipped times do not; ``*/15`` stays every 15 minutes of real time through both
  transitions.

Written here rather than on a library: croniter runs wall-clock jobs twice on fall-back
nights and accepts ``0 0 30 2 *``; cronsim gets the DST cases right but cannot give our
error messages, accepts ``L``/``W``/``#``/``?``, and resolves a time in the repeated hour
from its naive wall time, so a search starting inside the second pass can return an instant
before ``after``. The tests use cronsim as an oracle for zones without DST.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any

__all__ = ["CronSpec", "Interval", "assert_cron", "next_cron_run", "parse_cron", "zone"]

_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day", 1, 31),
    ("month", 1, 12),
    ("weekday", 0, 7),
)
_MONTHS = {
    n: i
    for i, n in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}
_WEEKDAYS = {n: i for i, n in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_NAMES: dict[int, dict[str, int]] = {3: _MONTHS, 4: _WEEKDAYS}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600}
# Whitespace is ASCII only, as Postgres's \s (assert_schedule_form) sees it in the C locale: a
# no-break space splitting fields here but not there would pass Python and fail in SQL.
_SPACE = " \t\n\r\v\f"
_SPACES = re.compile(r"[ \t\n\r\v\f]+")
_INTERVAL = re.compile(r"^([0-9]+)[ \t\n\r\v\f]+(second|minute|hour)s?$")
_PART = re.compile(r"^(\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/([0-9]+))?$")
#: Longest interval accepted: a longer one is almost surely a typo, and datetimes overflow.
MAX_INTERVAL_SECONDS = 366 * 24 * 3600
# Days without a match before a cron "never matches a date": 9 years covers Feb 29 across
# a skipped leap year (2096 → 2104).
_SEARCH_DAYS = 9 * 366
# A fall-back never repeats more than this much wall time, so a wall time earlier than
# ``after`` minus this cannot happen after ``after``.
_MAX_REPEAT = timedelta(hours=3)
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # February as in a leap year
_MINUTE = timedelta(minutes=1)
_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Interval:
    """``N seconds|minutes|hours``: runs every ``seconds`` of real time after ``after``."""

    seconds: int


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A parsed five-field cron (macros expand to one)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday … 6 = Saturday
    #: a date must match both day fields (one of them starts with ``*``), else either
    day_and: bool
    #: wall-clock DST rules (hour field not ``*…``); False = real-time cadence
    wall_clock: bool

    def matches_date(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.weekday() + 1) % 7 in self.weekdays
        return (dom and dow) if self.day_and else (dom or dow)


def _invalid(expr: str, reason: str) -> ValueError:
    return ValueError(f'Invalid cron "{expr}": {reason}')


def _number(digits: str) -> int:
    """ASCII digits as an int; one with more than 18 significant digits is out of every range
    anyway, and ``int()`` refuses over 4300 digits with a message that is not ours."""
    significant = digits.lstrip("0")
    return int(significant or "0") if len(significant) <= 18 else 10**18


def _value(text: str, index: int) -> int | None:
    if text.isascii() and text.isdigit():
        return _number(text)
    names = _NAMES.get(index)
    if names is not None and text in names:
        return names[text]
    return None


def _field(expr: str, index: int, text: str) -> set[int]:
    _name, low, high = _FIELDS[index]
    values: set[int] = set()
    for part in text.split(","):
        match = _PART.match(part.lower())
        if match is None:
            raise _invalid(expr, f'"{part}" is not a cron field')
        base, step_text = match.groups()
        if base == "*":
            start, end = low, high
        else:
            first, _, last = base.partition("-")
            start_value = _value(first, index)
            end_value = _value(last, index) if last else None
            if start_value is None or (last and end_value is None):
                raise _invalid(expr, f'"{part}" is not a cron field')
            start = start_value
            # "N/S" runs from N to the field's maximum
            end = end_value if end_value is not None else (high if step_text else start)
        step = _number(step_text) if step_text is not None else 1
        if not (low <= start <= end <= high) or step < 1:
            raise _invalid(expr, f'"{part}" is outside {low}-{high}')
        values.update(range(start, end + 1, step))
    return values


def parse_cron(expr: str) -> CronSpec | Interval:
    """Parse a schedule; raises ``ValueError('Invalid cron "<expr>": <reason>')``."""
    if not isinstance(expr, str):
        raise ValueError(f'Invalid cron "{expr}": expected a string')
    return _parse(expr)


@lru_cache(maxsize=512)
def _parse(expr: str) -> CronSpec | Interval:
    shown = expr.strip(_SPACE)
    text = shown.lower()
    interval = _INTERVAL.match(text)
    if interval is not None:
        seconds = _number(interval.group(1)) * _UNIT_SECONDS[interval.group(2)]
        if seconds < 1:
            raise _invalid(shown, "the interval must be positive")
        if seconds > MAX_INTERVAL_SECONDS:
            raise _invalid(shown, "the interval must be at most 366 days")
        return Interval(seconds)
    fields = _SPACES.split(_MACROS.get(text, shown)) if shown else []
    if len(fields) != 5:
        raise _invalid(shown, "expected 5 fields (minute hour day month weekday)")
    minutes, hours, days, months, weekdays = (
        _field(shown, index, part) for index, part in enumerate(fields)
    )
    day_and = fields[2].startswith("*") or fields[4].startswith("*")
    if day_and and not any(day <= _DAYS_IN_MONTH[month - 1] for month in months for day in days):
        raise _invalid(shown, "it never matches a date")
    return CronSpec(
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(day % 7 for day in weekdays),
        day_and=day_and,
        wall_clock=not fields[1].startswith("*"),
    )


def assert_cron(expr: str) -> None:
    """Raise ``ValueError('Invalid cron "<expr>": <reason>')`` unless ``expr`` is a schedule
    drainpipe can run (case and outer whitespace are ignored)."""
    parse_cron(expr)


_HOST_ZONES = frozenset({"localtime", "posixrules"})


@lru_cache(maxsize=256)
def zone(time_zone: str) -> Any:
    """The ``ZoneInfo`` for an IANA name; ``ValueError('Unknown time zone "<name>"')``."""
    from zoneinfo import ZoneInfo

    if not isinstance(time_zone, str) or not time_zone:
        raise ValueError(f'Unknown time zone "{time_zone}"')
    # files in the zone database that are not zones: "localtime" is whatever the host is set
    # to and "posixrules" a host's default for POSIX TZ strings, so a schedule in them would
    # run at other times on another machine
    if _HOST_ZONES.intersection(time_zone.lower().split("/")):
        raise ValueError(
            f'Unknown time zone "{time_zone}": it names the host\'s setting, not a zone'
        )
    try:
        return ZoneInfo(time_zone)
    except (ValueError, OSError, KeyError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(f'Unknown time zone "{time_zone}"') from exc


def next_cron_run(expr: str, time_zone: str = "UTC", after: datetime | None = None) -> datetime:
    """The first run of ``expr`` in ``time_zone`` strictly after ``after`` (an aware datetime,
    default now), as an aware UTC datetime.

    Raises ``ValueError`` for an invalid cron (``Invalid cron "<expr>": <reason>``, including
    ``it never matches a date``) or an unknown zone (``Unknown time zone "<name>"``); a naive
    ``after`` is a ``validation`` :class:`~drainpipe.DrainpipeError`.
    """
    from ..validation import aware

    spec = parse_cron(expr)
    tz = zone(time_zone)
    start = datetime.now(UTC) if after is None else aware(after, "after").astimezone(UTC)
    if isinstance(spec, Interval):
        return start + timedelta(seconds=spec.seconds)
    found = _next_run(spec, tz, start.replace(tzinfo=None))
    if found is None:
        raise _invalid(expr.strip(_SPACE), "it never matches a date")
    return found.replace(tzinfo=UTC)


def _next_run(spec: CronSpec, tz: Any, after: datetime) -> datetime | None:
    """Naive UTC in and out. Walks wall times in ascending order; every instant of a wall
    time is at or after its earliest one (``key``), and keys never decrease, so the walk
    stops at the first wall time whose key is not earlier than the best run found."""
    lowest = (after.replace(tzinfo=UTC).astimezone(tz).replace(tzinfo=None) - _MAX_REPEAT).replace(
        second=0, microsecond=0
    )
    best: datetime | None = None
    day = lowest.date()
    for _ in range(_SEARCH_DAYS):
        if spec.matches_date(day):
            for hour in spec.hours:
                for minute in spec.minutes:
                    wall = datetime(day.year, day.month, day.day, hour, minute)
                    if wall < lowest:
                        continue
                    key, runs = _instants(wall, tz, spec.wall_clock)
                    if best is not None and key >= best:
                        return best
                    for run in runs:
                        if run > after and (best is None or run < best):
                            best = run
        if day == date.max:
            break
        day += timedelta(days=1)
    return best


def _instants(wall: datetime, tz: Any, wall_clock: bool) -> tuple[datetime, list[datetime]]:
    """(earliest instant at or after which ``wall`` happens, the runs for ``wall``), naive UTC."""
    before = wall.replace(tzinfo=tz).utcoffset()
    after = wall.replace(tzinfo=tz, fold=1).utcoffset()
    assert before is not None and after is not None
    first, second = wall - before, wall - after
    if first == second:
        return first, [first]
    if first < second:  # a repeated (fall-back) wall time: it happens at both instants
        return first, [first] if wall_clock else [first, second]
    # a skipped (spring-forward) wall time: the gap's end lies in (second, first]
    gap_end = _transition(tz, second, first, after)
    return gap_end, [gap_end] if wall_clock else []


def _transition(tz: Any, low: datetime, high: datetime, offset: timedelta) -> datetime:
    """The first whole second in (low, high] whose UTC offset in ``tz`` is ``offset``."""
    low_s = int((low - datetime(1970, 1, 1)).total_seconds())
    high_s = int((high - datetime(1970, 1, 1)).total_seconds())
    while high_s - low_s > 1:
        middle = (low_s + high_s) // 2
        moment = datetime.fromtimestamp(middle, UTC).astimezone(tz)
        if moment.utcoffset() == offset:
            high_s = middle
        else:
            low_s = middle
    return datetime(1970, 1, 1) + timedelta(seconds=high_s)
