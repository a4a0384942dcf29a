"""Schedules: recurring jobs with a cron and a time zone, run by the drain or by pg_cron.

Under ``scheduler="drain"`` each schedule is a row with its next run; ``run_schedules``
(also called by the drain route) leases the due rows, enqueues one run per schedule with
the dedupe key ``schedule:<name>:<run ISO>`` and advances each to its next run, computed
from the later of now and the due time so runs missed while nothing drained collapse into
one. Under ``scheduler="pg_cron"`` each schedule is a pg_cron job whose command enqueues;
pg_cron knows neither time zones nor tenants, so those are refused before any SQL.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..backends.capabilities import (
    SupportsListSchedules,
    SupportsSchedule,
    SupportsScheduleRuns,
    SupportsUnschedule,
    SupportsUnscheduleTenant,
    lacking,
)
from ..context import coerce_context
from ..errors import DrainpipeError, invalid_request, validation_error
from ..models import DueSchedule, JobContext, ScheduleInfo
from ..validation import (
    MAX_NAME_LENGTH,
    check_text,
    positive_int,
    seconds,
    text_fault,
)
from .cron import Interval, next_cron_run, parse_cron, zone

if TYPE_CHECKING:
    from ..backends import QueueBackend

__all__ = [
    "EnsureResult",
    "ScheduleDef",
    "ScheduleInfo",
    "ScheduleMixin",
    "ScheduleRules",
    "plan_run",
    "run_key",
]

#: Scheduled runs are enqueued with this many attempts.
SCHEDULED_MAX_ATTEMPTS = 5
MAX_NAME = 200  # keeps "schedule:<name>:<ISO>" within the 255-character dedupe key limit
_DEFINITION_KEYS = ("name", "cron", "queue", "payload", "time_zone", "tenant", "context")
_REQUIRED_KEYS = ("name", "cron", "queue", "payload")
# pg_cron (1.5+) understands "N seconds" for 1-59; it has no minute or hour intervals.
_PG_CRON_SECONDS = re.compile(r"^([1-9]|[1-5][0-9])\s+seconds?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ScheduleDef:
    """One schedule of an :meth:`~ScheduleMixin.ensure_schedules` set (``schedule()``'s arguments)."""

    name: str
    cron: str
    queue: str
    payload: Any
    time_zone: str = "UTC"
    tenant: str | None = None
    context: JobContext | Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class EnsureResult:
    """``scheduled``: every name of the set, in order; ``removed``: the names unscheduled."""

    scheduled: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Prepared:
    name: str
    cron: str
    queue: str
    payload: Any
    time_zone: str
    tenant: str | None
    next_run: datetime | None


def _floor_ms(moment: datetime) -> datetime:
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


def _prefixed(exc: DrainpipeError, *path: Any) -> DrainpipeError:
    for issue in exc.issues or []:
        issue["path"] = [*path, *issue.get("path", [])]
    return exc


class ScheduleRules:
    """The checks and plans of the schedule calls, without I/O: shared by the async
    :class:`ScheduleMixin` of :class:`drainpipe.Jobs` and the sync twin's."""

    if TYPE_CHECKING:
        scheduler: str
        _now: Callable[[], datetime]

        def _check_queue(self, queue: str) -> str: ...
        def serialise(self, queue: str, payload: Any) -> Any: ...
        def _store(self, queue: str, payload: Any, context: JobContext | None) -> Any: ...

    # -- checks shared by schedule and ensure_schedules -----------------------------------

    def _prepare(
        self,
        name: Any,
        cron: Any,
        queue: str,
        payload: Any,
        time_zone: Any,
        tenant: Any,
        context: Any,
        default_tenant: str | None = None,
    ) -> _Prepared:
        if not isinstance(name, str) or not name or len(name) > MAX_NAME:
            raise validation_error(
                f"A schedule name is a string of 1 to {MAX_NAME} characters, not {name!r}",
                [{"message": "Invalid schedule name", "path": ["name"]}],
            )
        check_text(name, "The schedule name", max_length=MAX_NAME, path=["name"])
        self._check_queue(queue)
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise validation_error(
                f'Schedule "{name}": tenant must be a non-empty string or None',
                [{"message": "Invalid tenant", "path": [name, "tenant"]}],
            )
        if tenant is not None:
            check_text(tenant, f'Schedule "{name}": tenant', path=[name, "tenant"])
        try:
            recorded = coerce_context(context)
        except DrainpipeError as exc:
            raise _prefixed(exc, name) from None
        owner = tenant or (recorded.tenant if recorded else None) or default_tenant
        if not isinstance(time_zone, str):
            raise validation_error(
                f'Schedule "{name}": time_zone must be an IANA name such as "Europe/Amsterdam"',
                [{"message": "Invalid time zone", "path": [name, "time_zone"]}],
            )
        if self.scheduler == "pg_cron":
            if time_zone != "UTC":
                raise invalid_request(
                    f'Schedule "{name}": pg_cron runs schedules in UTC only, not {time_zone}; '
                    'use scheduler="drain" for time zones'
                )
            if owner is not None:
                raise invalid_request(
                    f'Schedule "{name}": pg_cron schedules have no tenant; '
                    'use scheduler="drain" for tenant schedules'
                )
        try:
            # the stored form: sealed on an encrypted queue (jobs/guard.py), so neither the
            # schedule nor the jobs it enqueues hold the payload in clear
            value = self._store(queue, self.serialise(queue, payload), recorded)
        except DrainpipeError as exc:
            raise _prefixed(exc, name, "payload") from None
        try:
            zone(time_zone)
        except ValueError as exc:
            raise validation_error(
                str(exc), [{"message": str(exc), "path": [name, "time_zone"]}]
            ) from None
        try:
            spec = parse_cron(cron)
            first = next_cron_run(cron, time_zone, self._now())
        except ValueError as exc:
            raise validation_error(
                str(exc), [{"message": str(exc), "path": [name, "cron"]}]
            ) from None
        text = cron.strip()
        if self.scheduler == "pg_cron":
            if isinstance(spec, Interval) and not _PG_CRON_SECONDS.match(text):
                raise invalid_request(
                    f'Schedule "{name}": pg_cron has no interval "{text}" (only 1-59 seconds); '
                    'use five cron fields or scheduler="drain"'
                )
            return _Prepared(name, text, queue, value, time_zone, None, None)
        return _Prepared(name, text, queue, value, time_zone, owner, _floor_ms(first))

    def _unschedule_args(self, name: Any) -> str:
        if not isinstance(name, str):
            raise validation_error(
                "A schedule name is a string",
                [{"message": "Invalid schedule name", "path": ["name"]}],
            )
        check_text(name, "The schedule name", max_length=MAX_NAME, allow_empty=True, path=["name"])
        return name

    def _list_schedules_args(self, prefix: Any, tenant: Any) -> None:
        for label, value in (("prefix", prefix), ("tenant", tenant)):
            if value is not None and not isinstance(value, str):
                raise validation_error(
                    f"{label} must be a string or None",
                    [{"message": "Expected a string", "path": [label]}],
                )
            if value is not None:
                limit = MAX_NAME if label == "prefix" else MAX_NAME_LENGTH
                check_text(value, label, max_length=limit, allow_empty=True)

    def _unschedule_all_args(self, tenant: Any) -> str:
        if not isinstance(tenant, str) or not tenant:
            raise validation_error(
                "unschedule_all needs a non-empty tenant",
                [{"message": "Invalid tenant", "path": ["tenant"]}],
            )
        check_text(tenant, "tenant")
        return tenant

    def _ensure_args(self, prefix: Any, tenant: Any, definitions: Any) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise invalid_request("ensure_schedules needs a non-empty prefix")
        if tenant is not None and (not isinstance(tenant, str) or not tenant):
            raise invalid_request("ensure_schedules: tenant must be a non-empty string or None")
        for label, text in (("prefix", prefix), ("tenant", tenant)):
            fault = None if text is None else text_fault(text)
            if fault is not None or (text is not None and len(text) > MAX_NAME_LENGTH):
                raise invalid_request(
                    f"ensure_schedules: {label} {fault or 'is longer than 255 characters'}"
                )
        if isinstance(definitions, str | bytes | Mapping):
            raise invalid_request("ensure_schedules needs a list of ScheduleDef or mappings")

    def _ensure_plan(
        self, definitions: Iterable[Any], prefix: str, tenant: str | None
    ) -> list[_Prepared]:
        """Every definition checked and prepared before anything is written."""
        seen: set[str] = set()
        prepared: list[_Prepared] = []
        for index, definition in enumerate(definitions):
            item = _definition(index, definition)
            name = item.name
            if not isinstance(name, str) or not name.startswith(prefix):
                raise invalid_request(f'Schedule "{name}" does not start with "{prefix}"')
            if name in seen:
                raise invalid_request(f'Schedule "{name}" is defined twice')
            seen.add(name)
            prepared.append(
                self._prepare(
                    name,
                    item.cron,
                    item.queue,
                    item.payload,
                    item.time_zone,
                    item.tenant,
                    item.context,
                    default_tenant=tenant,
                )
            )
        return prepared


class ScheduleMixin(ScheduleRules):
    """Schedule methods of :class:`drainpipe.Jobs`."""

    if TYPE_CHECKING:
        backend: QueueBackend

    async def _write(self, backend: SupportsSchedule, prepared: _Prepared) -> None:
        await backend.schedule(
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
        backend = self.backend
        if not isinstance(backend, SupportsSchedule):
            raise lacking(backend, "schedule")
        await self._write(
            backend, self._prepare(name, cron, queue, payload, time_zone, tenant, context)
        )

    async def unschedule(self, name: str) -> bool:
        """Remove a schedule; False when there was none of that name."""
        name = self._unschedule_args(name)
        backend = self.backend
        if not isinstance(backend, SupportsUnschedule):
            raise lacking(backend, "unschedule")
        return bool(await backend.unschedule(name))

    async def list_schedules(
        self, *, prefix: str | None = None, tenant: str | None = None
    ) -> list[ScheduleInfo]:
        """Schedules ordered by name, optionally only names starting with ``prefix`` and only
        ``tenant``'s (under pg_cron a tenant filter matches nothing)."""
        self._list_schedules_args(prefix, tenant)
        backend = self.backend
        if not isinstance(backend, SupportsListSchedules):
            raise lacking(backend, "list_schedules")
        return [
            _schedule_info(row)
            for row in await backend.list_schedules(prefix=prefix, tenant=tenant)
        ]

    async def unschedule_all(self, *, tenant: str) -> int:
        """Remove every schedule of ``tenant``; returns how many (always 0 under pg_cron)."""
        tenant = self._unschedule_all_args(tenant)
        backend = self.backend
        if not isinstance(backend, SupportsUnscheduleTenant):
            raise lacking(backend, "unschedule_all")
        return int(await backend.unschedule_tenant(tenant))

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
        writer = self.backend
        if not isinstance(writer, SupportsSchedule):
            raise lacking(writer, "ensure_schedules")
        lister = self.backend
        if not isinstance(lister, SupportsListSchedules):
            raise lacking(lister, "ensure_schedules")
        remover = self.backend
        if not isinstance(remover, SupportsUnschedule):
            raise lacking(remover, "ensure_schedules")
        prepared = self._ensure_plan(definitions, prefix, tenant)
        seen = {one.name for one in prepared}
        existing = [
            _schedule_info(row).name
            for row in await lister.list_schedules(prefix=prefix, tenant=tenant)
        ]
        for one in prepared:
            await self._write(writer, one)
        removed = []
        for name in existing:
            if name not in seen and await remover.unschedule(name):
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
        backend = self.backend
        if self.scheduler == "pg_cron" or not isinstance(backend, SupportsScheduleRuns):
            return 0
        ran = 0
        failure: BaseException | None = None
        for row in await backend.due_schedules(lease=lease, batch=batch):
            due = row if isinstance(row, DueSchedule) else DueSchedule(*row)
            # only this claim may advance the schedule (not one whose lease ran out before)
            held = functools.partial(backend.advance_schedule, claim_token=due.claim_token)
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
        await self.backend.send(
            queue,
            payload,
            delay=0,
            max_attempts=SCHEDULED_MAX_ATTEMPTS,
            dedupe_key=run_key(name, run),
            dedupe="always",
        )
        return bool(await advance(name, run, following))


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
            first = _floor_ms(next_cron_run(cron, time_zone, first_after or now))
            if first > now:
                return None, first
            next_run = first
        following = _floor_ms(next_cron_run(cron, time_zone, max(now, next_run)))
    except ValueError:
        # SQL only checks the shape; a cron Python cannot read never runs (it keeps no
        # next run and list_schedules shows it) rather than failing every drain
        return None
    return next_run, following


def _schedule_info(row: Any) -> ScheduleInfo:
    # a backend written before ScheduleInfo rows (api_version 1) answers 9-tuples
    return row if isinstance(row, ScheduleInfo) else ScheduleInfo(*row)


def _definition(index: int, definition: Any) -> ScheduleDef:
    if isinstance(definition, ScheduleDef):
        return definition
    if not isinstance(definition, Mapping):
        raise invalid_request(f"Schedule definition {index} must be a ScheduleDef or a mapping")
    unknown = sorted(str(key) for key in definition if key not in _DEFINITION_KEYS)
    if unknown:
        raise invalid_request(
            f"Schedule definition {index} has unknown keys: {', '.join(unknown)}"
            f" (allowed: {', '.join(_DEFINITION_KEYS)})"
        )
    missing = [key for key in _REQUIRED_KEYS if key not in definition]
    if missing:
        raise invalid_request(f"Schedule definition {index} needs {', '.join(missing)}")
    return ScheduleDef(**{str(key): value for key, value in definition.items()})
