"""The checks and plans of the schedule calls, without I/O (:class:`ScheduleRules`): a
schedule's name, tenant, time zone, cron and payload checked and prepared for storage before
any SQL, and an ``ensure_schedules`` set checked whole before anything is written. Shared by
the async :class:`~drainpipe.schedules.service.ScheduleMixin` and the sync twin's."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..context import coerce_context
from ..errors import DrainpipeError, invalid_request, validation_error
from ..models import JobContext
from ..validation import (
    MAX_NAME_LENGTH,
    check_text,
    text_fault,
)
from .cron import Interval, next_cron_run, parse_cron, zone
from .runs import floor_ms

MAX_NAME = 200  # keeps "schedule:<name>:<ISO>" within the 255-character dedupe key limit
_DEFINITION_KEYS = ("name", "cron", "queue", "payload", "time_zone", "tenant", "context")
_REQUIRED_KEYS = ("name", "cron", "queue", "payload")
# pg_cron (1.5+) understands "N seconds" for 1-59; it has no minute or hour intervals.
_PG_CRON_SECONDS = re.compile(r"^([1-9]|[1-5][0-9])\s+seconds?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ScheduleDef:
    """One schedule of an :meth:`~drainpipe.Jobs.ensure_schedules` set (``schedule()``'s arguments)."""

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
class Prepared:
    name: str
    cron: str
    queue: str
    payload: Any
    time_zone: str
    tenant: str | None
    next_run: datetime | None


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
    ) -> Prepared:
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
            return Prepared(name, text, queue, value, time_zone, None, None)
        return Prepared(name, text, queue, value, time_zone, owner, floor_ms(first))

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
    ) -> list[Prepared]:
        """Every definition checked and prepared before anything is written."""
        seen: set[str] = set()
        prepared: list[Prepared] = []
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
