"""The schedule calls of :class:`drainpipe.sync.Jobs`: the checks and run plans of
:class:`~drainpipe.schedules.service.ScheduleRules`, run on the sync backend."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import DrainpipeError
from ..models import JobContext, ScheduleInfo
from ..schedules.service import (
    SCHEDULED_MAX_ATTEMPTS,
    EnsureResult,
    ScheduleDef,
    ScheduleRules,
    _Prepared,
    plan_run,
    run_key,
)
from ..validation import positive_int, seconds

if TYPE_CHECKING:
    from .backend import SyncSqlBackend


class SyncScheduleMixin(ScheduleRules):
    """``schedule``, ``unschedule``, ``list_schedules``, ``unschedule_all``,
    ``ensure_schedules`` and ``run_schedules``, as :class:`drainpipe.Jobs` has them."""

    if TYPE_CHECKING:
        backend: SyncSqlBackend

    def _write(self, prepared: _Prepared) -> None:
        self.backend.schedule(
            prepared.name,
            prepared.cron,
            prepared.queue,
            prepared.payload,
            time_zone=prepared.time_zone,
            next_run=prepared.next_run,
            tenant=prepared.tenant,
        )

    def schedule(
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
        """Create or replace the schedule ``name`` (see :meth:`drainpipe.Jobs.schedule`)."""
        self._write(self._prepare(name, cron, queue, payload, time_zone, tenant, context))

    def unschedule(self, name: str) -> bool:
        """Remove a schedule; False when there was none of that name."""
        return self.backend.unschedule(self._unschedule_args(name))

    def list_schedules(
        self, *, prefix: str | None = None, tenant: str | None = None
    ) -> list[ScheduleInfo]:
        """Schedules ordered by name, optionally only under ``prefix`` and ``tenant``."""
        self._list_schedules_args(prefix, tenant)
        return self.backend.list_schedules(prefix=prefix, tenant=tenant)

    def unschedule_all(self, *, tenant: str) -> int:
        """Remove every schedule of ``tenant``; returns how many."""
        return self.backend.unschedule_tenant(self._unschedule_all_args(tenant))

    def ensure_schedules(
        self,
        definitions: Iterable[ScheduleDef | Mapping[str, Any]],
        *,
        prefix: str,
        tenant: str | None = None,
    ) -> EnsureResult:
        """Make the schedules under ``prefix`` exactly ``definitions`` (see
        :meth:`drainpipe.Jobs.ensure_schedules`: everything is checked before a write)."""
        self._ensure_args(prefix, tenant, definitions)
        prepared = self._ensure_plan(definitions, prefix, tenant)
        seen = {one.name for one in prepared}
        existing = [row.name for row in self.backend.list_schedules(prefix=prefix, tenant=tenant)]
        for one in prepared:
            self._write(one)
        removed = [name for name in existing if name not in seen and self.backend.unschedule(name)]
        return EnsureResult(scheduled=[one.name for one in prepared], removed=removed)

    def run_schedules(self, *, lease: float = 60, batch: int = 100) -> int:
        """Enqueue one run of every due schedule (up to ``batch``); returns the runs
        enqueued (see :meth:`drainpipe.Jobs.run_schedules`). 0 under pg_cron."""
        lease = seconds(lease, "lease", minimum=1)
        positive_int(batch, "batch")
        if self.scheduler == "pg_cron":
            return 0
        backend = self.backend
        ran = 0
        failure: DrainpipeError | None = None
        for due in backend.due_schedules(lease=lease, batch=batch):
            plan = plan_run(due.cron, due.time_zone, due.next_run, due.first_after, self._now())
            if plan is None:
                continue
            run, following = plan
            try:
                if run is None:
                    backend.advance_schedule(due.name, None, following, due.claim_token)
                    continue
                backend.send(
                    due.queue,
                    due.payload,
                    delay=0,
                    max_attempts=SCHEDULED_MAX_ATTEMPTS,
                    dedupe_key=run_key(due.name, run),
                    dedupe="always",
                )
                if backend.advance_schedule(due.name, run, following, due.claim_token):
                    ran += 1
            except DrainpipeError as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return ran
