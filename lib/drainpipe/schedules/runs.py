"""When a schedule's run happens, and what marks it: the plan of one due schedule's run at a
given instant, and the dedupe key that makes a run enqueue once however many drains race for
it. No I/O: the async :class:`~drainpipe.schedules.service.ScheduleMixin` and the sync
twin's both run these."""

from __future__ import annotations

from datetime import UTC, datetime

from .cron import next_cron_run

#: Scheduled runs are enqueued with this many attempts.
SCHEDULED_MAX_ATTEMPTS = 5


def floor_ms(moment: datetime) -> datetime:
    # stored and compared at millisecond precision, so advance_schedule's fence matches
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def iso_instant(moment: datetime) -> str:
    """ISO-8601 UTC with ``Z``, milliseconds only when there are any."""
    moment = moment.astimezone(UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    millis = moment.microsecond // 1000
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


def run_key(name: str, run: datetime) -> str:
    """The dedupe key of one scheduled run: ``schedule:<name>:<run ISO>``."""
    return f"schedule:{name}:{iso_instant(run)}"


def plan_run(
    cron: str,
    time_zone: str,
    next_run: datetime | None,
    first_after: datetime | None,
    now: datetime,
) -> tuple[datetime | None, datetime] | None:
    """What a due schedule's run does at ``now``: ``(run, following)`` enqueues the run
    (dedupe key ``run_key(name, run)``) and advances to ``following``; ``(None, first)``
    only writes the first run (not due yet); None: a cron Python cannot read never runs."""
    try:
        if next_run is None:
            # written from SQL (or cron/zone changed without a next run): compute the first
            first = floor_ms(next_cron_run(cron, time_zone, first_after or now))
            if first > now:
                return None, first
            next_run = first
        following = floor_ms(next_cron_run(cron, time_zone, max(now, next_run)))
    except ValueError:
        # SQL only checks the shape; a cron Python cannot read never runs (it keeps no
        # next run and list_schedules shows it) rather than failing every drain
        return None
    return next_run, following
