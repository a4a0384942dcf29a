"""Schedules: our cron matcher (:mod:`.cron`, standard library only) and the schedule
service behind ``Jobs.schedule``/``run_schedules`` (:mod:`.service`)."""

from .cron import CronSpec, Interval, assert_cron, next_cron_run, parse_cron, zone
from .service import EnsureResult, ScheduleDef, ScheduleInfo, ScheduleMixin, iso_instant, run_key

__all__ = [
    "CronSpec",
    "EnsureResult",
    "Interval",
    "ScheduleDef",
    "ScheduleInfo",
    "ScheduleMixin",
    "assert_cron",
    "iso_instant",
    "next_cron_run",
    "parse_cron",
    "run_key",
    "zone",
]
