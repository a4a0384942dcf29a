"""Schedules: recurring jobs with a cron and a time zone, run by the drain or by pg_cron.
This module is the schedule calls of :class:`drainpipe.Jobs` (:class:`ScheduleMixin`); their
checks are :mod:`~drainpipe.schedules.schedule_rules` and the plan of each run
:mod:`~drainpipe.schedules.runs`. ``drainpipe.sync.schedules`` is generated from this module
(``./scripts/sync-twin``): the same calls over the sync twin's SQL backend.

Under ``scheduler="drain"`` each schedule is a row with its next run; ``run_schedules``
(also called by the drain route) leases the due rows, enqueues one run per schedule with
the dedupe key ``schedule:<name>:<run ISO>`` and advances each to its next run, computed
from the later of now and the due time so runs missed while nothing drained collapse into
one. Under ``scheduler="pg_cron"`` each schedule is a pg_cron job whose command enqueues;
pg_cron knows neither time zones nor tenants, so those are refused before any SQL.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..backends.reduced import refused_as
from ..errors import DrainpipeError
from ..models import DueSchedule, JobContext, ScheduleInfo
from ..validation import positive_int, seconds
from .runs import SCHEDULED_MAX_ATTEMPTS, iso_instant, plan_run, run_key
from .schedule_rules import EnsureResult, Prepared, ScheduleDef, ScheduleRules

if TYPE_CHECKING:
    from ..backends import QueueBackend
    from ..backends.driver import Driver

__all__ = [
    "SCHEDULED_MAX_ATTEMPTS",
    "EnsureResult",
    "ScheduleDef",
    "ScheduleInfo",
    "ScheduleMixin",
    "ScheduleRules",
    "iso_instant",
    "plan_run",
    "run_key",
]


class ScheduleMixin(ScheduleRules):
    """Schedule methods of :class:`drainpipe.Jobs`."""

    if TYPE_CHECKING:
        backend: QueueBackend
        driver: Driver

    async def _write(self, prepared: Prepared) -> None:
        await self.driver.schedule(
            prepared.name,
            prepared.cron,
            prepared.queue,
            prepared.payload,
            time_zone=prepared.time_zone,
            next_run=prepared.next_run,
            tenant=prepared.tenant,
        )

    # -- public API ------------------------------------------------------------------------

    async def schedule(
        self,
        name: str,
        cron: str,
        queue: str,
        payload: Any,
        *,
        time_zone: str = "UTC",
        tenant: str | None = None,
        context: JobContext | Mapping[str, Any] | None = None,
    ) -> None:
        """Create or replace the schedule ``name``: enqueue ``payload`` on ``queue`` at every
        run of ``cron`` in ``time_zone``.

        The tenant is ``tenant``, else the context's tenant. Keeping the cron and zone of an
        existing schedule keeps its next run. Bad cron, unknown zone or a payload failing the
        schema → ``validation`` (issue paths start with ``name``), nothing written. Under
        pg_cron a zone other than UTC or a tenant → ``invalid_request``, before any SQL.
        """
        await self._write(self._prepare(name, cron, queue, payload, time_zone, tenant, context))

    async def unschedule(self, name: str) -> bool:
        """Remove a schedule; False when there was none of that name."""
        name = self._unschedule_args(name)
        return bool(await self.driver.unschedule(name))

    async def list_schedules(
        self, *, prefix: str | None = None, tenant: str | None = None
    ) -> list[ScheduleInfo]:
        """Schedules ordered by name, optionally only names starting with ``prefix`` and only
        ``tenant``'s (under pg_cron a tenant filter matches nothing)."""
        self._list_schedules_args(prefix, tenant)
        return [
            _schedule_info(row)
            for row in await self.driver.list_schedules(prefix=prefix, tenant=tenant)
        ]

    async def unschedule_all(self, *, tenant: str) -> int:
        """Remove every schedule of ``tenant``; returns how many (always 0 under pg_cron)."""
        tenant = self._unschedule_all_args(tenant)
        return int(await self.driver.unschedule_tenant(tenant))

    async def ensure_schedules(
        self,
        definitions: Iterable[ScheduleDef | Mapping[str, Any]],
        *,
        prefix: str,
        tenant: str | None = None,
    ) -> EnsureResult:
        """Make the schedules under ``prefix`` (and ``tenant``, when given) exactly
        ``definitions``: write each one, unschedule the others.

        Every definition is checked before anything is written, so these write nothing: an
        empty prefix, a name outside the prefix, a repeated name or a malformed definition →
        ``invalid_request``; a bad cron, zone or payload → ``validation``. The writes
        themselves are one call per schedule, not a transaction: a database error while
        writing (network, a zone Postgres does not know, a trigger) leaves the schedules
        before it written and removes nothing; calling again with the same set finishes the
        job. A definition's own tenant wins over ``tenant``. Rewriting a schedule with the
        same cron and zone keeps its next run (and a drain's claim on it).
        """
        self._ensure_args(prefix, tenant, definitions)
        driver = self.driver
        prepared = self._ensure_plan(definitions, prefix, tenant)
        seen = {one.name for one in prepared}
        with refused_as("ensure_schedules"):
            existing = [
                _schedule_info(row).name
                for row in await driver.list_schedules(prefix=prefix, tenant=tenant)
            ]
            for one in prepared:
                await self._write(one)
            removed = []
            for name in existing:
                if name not in seen and await driver.unschedule(name):
                    removed.append(name)
        return EnsureResult(scheduled=[one.name for one in prepared], removed=removed)

    async def run_schedules(self, *, lease: float = 60, batch: int = 100) -> int:
        """Enqueue one run of every due schedule (up to ``batch``); returns the runs enqueued.

        Each run gets the dedupe key ``schedule:<name>:<run ISO>`` and 5 attempts; the next
        run counts from the later of now and the due time, so missed runs collapse into one.
        Schedules are leased for ``lease`` seconds while this call works on them, so
        overlapping calls never enqueue a run twice. 0 under pg_cron (it runs them itself)
        or on a backend without schedules. A schedule that fails to enqueue does not stop the
        others; the first such error is raised after the rest ran.
        """
        lease = seconds(lease, "lease", minimum=1)
        positive_int(batch, "batch")
        if self.scheduler == "pg_cron":
            return 0
        driver = self.driver
        ran = 0
        failure: BaseException | None = None
        for row in await driver.due_schedules(lease=lease, batch=batch):
            due = row if isinstance(row, DueSchedule) else DueSchedule(*row)
            # only this claim may advance the schedule (not one whose lease ran out before)
            held = functools.partial(driver.advance_schedule, claim_token=due.claim_token)
            try:
                if await self._run_one(
                    held,
                    due.name,
                    due.cron,
                    due.time_zone,
                    due.queue,
                    due.payload,
                    due.next_run,
                    due.first_after,
                ):
                    ran += 1
            except DrainpipeError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return ran

    async def _run_one(
        self,
        advance: Any,
        name: str,
        cron: str,
        time_zone: str,
        queue: str,
        payload: Any,
        next_run: datetime | None,
        first_after: datetime | None,
    ) -> bool:
        plan = plan_run(cron, time_zone, next_run, first_after, self._now())
        if plan is None:
            return False
        run, following = plan
        if run is None:  # not due yet: only the first run is written
            await advance(name, None, following)
            return False
        await self.driver.send(
            queue,
            payload,
            delay=0,
            max_attempts=SCHEDULED_MAX_ATTEMPTS,
            dedupe_key=run_key(name, run),
            dedupe="always",
        )
        return bool(await advance(name, run, following))


def _schedule_info(row: Any) -> ScheduleInfo:
    # a backend written before ScheduleInfo rows (api_version 1) answers 9-tuples
    return row if isinstance(row, ScheduleInfo) else ScheduleInfo(*row)
