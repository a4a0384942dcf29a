"""Durable steps over PostgREST: the ``rest-api`` module's wrappers of the jobs module's
fenced step functions (docs/steps.md), one request each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import postgrest_rows as rows

if TYPE_CHECKING:
    from ..models import Job

__all__ = ["PostgrestSteps"]


class PostgrestSteps:
    """The durable-step operations of :class:`~drainpipe.backends.postgrest.PostgrestBackend`."""

    schema: str
    if TYPE_CHECKING:

        def rpc(self, fn: str, params: Mapping[str, Any]) -> Any: ...

    async def load_steps(self, queue: str, job_id: int) -> dict[int, tuple[str, str, Any]]:
        data = await self.rpc("load_steps_v1", {"queue": queue, "id": job_id})
        return {
            int(item["number"]): (str(item["name"]), str(item["state"]), item.get("result"))
            for item in data or ()
        }

    async def record_step(
        self,
        job: Job[Any],
        number: int,
        name: str,
        state: str,
        result: Any,
        code: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        params = {
            "queue": job.queue, "id": job.id, "attempt": job.attempts, "number": number,
            "name": name, "state": state, "result": result, "code": code,
            "started_at": rows.instant(started_at),
        }  # fmt: skip
        return str(await self.rpc("record_step_v1", params) or "lost")

    async def suspend(
        self,
        job: Job[Any],
        delay: float,
        waiting_for: str | None,
        number: int | None = None,
        name: str | None = None,
        started_at: datetime | None = None,
    ) -> str:
        params = {
            "queue": job.queue, "id": job.id, "attempt": job.attempts, "delay": delay,
            "waiting_for": waiting_for, "number": number, "name": name,
            "started_at": rows.instant(started_at),
        }  # fmt: skip
        return str(await self.rpc("suspend_v1", params) or "lost")

    async def wait_event(
        self,
        job: Job[Any],
        event: str,
        key: str,
        timeout: float | None,  # noqa: ASYNC109 - the wait's stored deadline, in seconds
        number: int,
        name: str,
        started_at: datetime | None = None,
    ) -> tuple[str, Any]:
        params = {
            "queue": job.queue, "id": job.id, "attempt": job.attempts, "event": event,
            "key": key, "timeout": timeout, "number": number, "name": name,
            "started_at": rows.instant(started_at),
        }  # fmt: skip
        data = await self.rpc("wait_event_v1", params)
        if not isinstance(data, dict):
            return "lost", None
        return str(data.get("outcome") or "lost"), data.get("data")

    async def emit(self, event: str, key: str, data: Any = None) -> int:
        return int(await self.rpc("emit_v1", {"event": event, "key": key, "data": data}))

    async def spawn(
        self,
        job: Job[Any],
        number: int,
        name: str,
        queue: str,
        payloads: Sequence[Any],
        delay: float,
        max_attempts: int,
        started_at: datetime | None = None,
    ) -> tuple[str, list[int]]:
        params = {
            "queue": job.queue, "id": job.id, "attempt": job.attempts, "number": number,
            "name": name, "child_queue": queue, "payloads": list(payloads), "delay": delay,
            "max_attempts": max_attempts, "started_at": rows.instant(started_at),
        }  # fmt: skip
        data = await self.rpc("spawn_v1", params)
        if not isinstance(data, dict):
            return "lost", []
        return str(data.get("outcome") or "lost"), [int(i) for i in data.get("ids") or ()]

    async def join(
        self,
        job: Job[Any],
        queue: str,
        ids: Sequence[int],
        number: int,
        name: str,
        started_at: datetime | None = None,
    ) -> str:
        params = {
            "queue": job.queue, "id": job.id, "attempt": job.attempts, "child_queue": queue,
            "ids": list(ids), "number": number, "name": name,
            "started_at": rows.instant(started_at),
        }  # fmt: skip
        return str(await self.rpc("join_v1", params) or "lost")

    async def child_outcomes(
        self, queue: str, ids: Sequence[int]
    ) -> list[tuple[int, str, str | None, bool, Any]]:
        data = await self.rpc("child_outcomes_v1", {"queue": queue, "ids": list(ids)})
        return [
            (
                int(i["id"]),
                str(i["state"]),
                i.get("last_code"),
                bool(i.get("kept")),
                i.get("result"),
            )
            for i in data or ()
        ]

    async def cancel_children(self, queue: str, job_id: int) -> int:
        return int(await self.rpc("cancel_children_v1", {"queue": queue, "id": job_id}) or 0)

    async def job_workflow(self, queue: str, job_id: int) -> Any:
        from .step_statements import parse_workflow

        data = await self.rpc("job_workflow_v1", {"queue": queue, "id": job_id})
        return parse_workflow([(data,)])

    async def job_result(self, queue: str, job_id: int) -> tuple[bool, Any]:
        data = await self.rpc("result_v1", {"queue": queue, "id": job_id})
        if not isinstance(data, dict):
            return False, None
        return bool(data.get("kept")), data.get("result")
