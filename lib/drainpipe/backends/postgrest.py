"""Jobs over PostgREST with every feature of a direct connection: drainpipe's own functions,
called as ``POST {url}/rest/v1/rpc/<function>`` in the exposed schema ``drainpipe_api``.

The ``rest-api`` SQL module creates that schema: thin ``SECURITY DEFINER`` wrappers over
the ``drainpipe.*_v1`` functions with plain named arguments and JSON results, executable by
the service role only (``sql/migrations/rest_api/``). So completion is fenced by the
attempt, ``fail`` stores the error and schedules the retry, heartbeats extend leases, and
dedupe keys, stats, dead letters, replay, purge, schedules, job records and queue policies
(``ensure_policies``, retention, ``reencrypt``) all work, one HTTPS request per operation,
batches as JSON arrays.

Only httpx is imported (lazily, on the first request), so a function that speaks nothing
but HTTPS to Supabase starts without psycopg or supabase-py.

When the project exposes only Supabase's ``pgmq_public``,
``await PostgrestBackend.detect(url, key)`` finds that out once and hands back a
:class:`~drainpipe.backends.pgmq_public.PgmqPublicBackend` instead (``fallback=False``
makes it raise ``SCHEMA_NOT_EXPOSED`` with the setting to change).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import SCHEMA_NOT_EXPOSED, DrainpipeError, check_replay_rules, not_installed
from ..models import (
    DeadJob,
    DedupeMode,
    FailOutcome,
    Job,
    JobRecord,
    Position,
    QueueStats,
)
from . import postgrest_rows as rows
from .postgrest_http import RestTransport, expose_hint
from .postgrest_policies import PostgrestPolicies
from .postgrest_schedules import PostgrestSchedules
from .postgrest_steps import PostgrestSteps

if TYPE_CHECKING:
    import httpx

    from .pgmq_public import PgmqPublicBackend

__all__ = ["API_SCHEMA", "PostgrestBackend"]

API_SCHEMA = "drainpipe_api"

log = logging.getLogger("drainpipe.jobs")


class PostgrestBackend(PostgrestSteps, PostgrestPolicies, PostgrestSchedules):
    """Jobs through drainpipe's ``drainpipe_api`` functions over PostgREST (httpx only).

    ``url`` is the project URL (``https://<ref>.supabase.co``; a trailing ``/rest/v1`` is
    accepted), ``key`` the service-role key. ``schema`` is the exposed API schema the
    ``rest-api`` module created. ``timeout`` is per request, in seconds; ``http_client``
    shares an ``httpx.AsyncClient`` (you then close it). Every method is one request.
    """

    api_version: ClassVar[int] = 1
    name = "postgrest"
    leases = True
    #: a complete driver (docs/reference.md#backends): nothing answered from a table
    lacks: frozenset[str] = frozenset()

    def __init__(
        self,
        url: str,
        key: str,
        *,
        schema: str = API_SCHEMA,
        http_client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(schema, str) or not schema:
            raise ValueError("schema must be the name of the exposed API schema")
        self.schema = schema
        self._transport = RestTransport(
            url, key, schema, timeout=timeout, http_client=http_client, hint=_not_exposed_hint
        )
        self.rest_url = self._transport.rest_url

    @classmethod
    async def detect(
        cls,
        url: str,
        key: str,
        *,
        schema: str = API_SCHEMA,
        http_client: httpx.AsyncClient | None = None,
        timeout: float = 30.0,  # noqa: ASYNC109 (per request, handed to httpx)
        fallback: bool = True,
    ) -> PostgrestBackend | PgmqPublicBackend:
        """Ask the project once which API it exposes: this backend when ``schema`` answers,
        else (``fallback=True``, PostgREST said ``PGRST106``) a ``PgmqPublicBackend`` on
        the same URL and key, with its fewer features. Any other failure raises."""
        backend = cls(url, key, schema=schema, http_client=http_client, timeout=timeout)
        try:
            await backend.check()
        except DrainpipeError as exc:
            if not fallback or exc.code != SCHEMA_NOT_EXPOSED:
                await backend.aclose()
                raise
            await backend.aclose()
            from .pgmq_public import PgmqPublicBackend

            log.warning(
                "PostgREST does not expose %s: using pgmq_public (no fenced completion, "
                "heartbeats, dedupe keys, stats, dead letters or schedules)",
                schema,
                extra={"backend": "pgmq_public"},
            )
            return PgmqPublicBackend(url=url, key=key, timeout=timeout, http_client=http_client)
        return backend

    async def check(self) -> dict[str, Any]:
        """One request that proves the API is there: ``{"api": 1, "jobs": {options}}``.
        Unexposed schema → ``invalid_request``/``SCHEMA_NOT_EXPOSED``; the module missing
        → ``unexpected``/``NOT_INSTALLED``; a wrong key → ``unauthorized``."""
        info = await self.rpc("api_info_v1", {})
        if not isinstance(info, dict) or info.get("api") != 1:
            raise rows.malformed(self.schema, "api_info_v1", "an API description", info)
        if info.get("jobs") is None:  # the API without the jobs module it wraps
            raise not_installed(f"{self.schema}.api_info_v1: the jobs module is not installed")
        return info

    async def aclose(self) -> None:
        """Close the httpx client this backend created (one you passed is left open)."""
        await self._transport.aclose()

    async def __aenter__(self) -> PostgrestBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def rpc(self, fn: str, params: Mapping[str, Any]) -> Any:
        """``POST /rpc/<fn>`` in the API schema; its JSON result. Failures raise
        :class:`DrainpipeError` whose message starts with ``drainpipe_api.<fn>:``."""
        return self._transport.call(fn, params)

    # -- QueueBackend ---------------------------------------------------------------------

    async def send(
        self,
        queue: str,
        payload: Any,
        *,
        delay: float = 0,
        max_attempts: int = 5,
        dedupe_key: str | None = None,
        dedupe: DedupeMode = "always",
    ) -> int:
        params: dict[str, Any] = {"queue": queue, "payload": payload}
        if delay or max_attempts != 5 or dedupe_key is not None:
            params["delay"] = float(delay)
            params["max_attempts"] = max_attempts
            params["dedupe_key"] = dedupe_key
            params["dedupe_running"] = dedupe != "waiting"
        return rows.job_id(self.schema, "enqueue_v1", await self.rpc("enqueue_v1", params))

    async def send_flow(
        self,
        queue: str,
        payload: Any,
        *,
        delay: float,
        max_attempts: int,
        dedupe_key: str | None,
        dedupe: DedupeMode,
        key: str,
        debounce: float | None,
        throttle: float | None,
    ) -> int:
        """A debounced or throttled enqueue (``enqueue_flow_job_v1``)."""
        params: dict[str, Any] = {
            "queue": queue,
            "payload": payload,
            "key": key,
            "debounce": debounce,
            "throttle": throttle,
            "delay": float(delay),
            "max_attempts": max_attempts,
            "dedupe_key": dedupe_key,
            "dedupe_running": dedupe != "waiting",
        }
        data = await self.rpc("enqueue_flow_v1", params)
        return rows.job_id(self.schema, "enqueue_flow_v1", data)

    async def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        if not payloads:
            return []
        data = await self.rpc(
            "enqueue_many_v1",
            {
                "queue": queue,
                "payloads": list(payloads),
                "delay": float(delay),
                "max_attempts": max_attempts,
            },
        )
        return rows.job_ids(self.schema, "enqueue_many_v1", data, len(payloads))

    async def read(self, queue: str, *, lease: float, batch: int) -> list[Job[Any]]:
        data = await self.rpc("claim_v1", {"queue": queue, "lease": float(lease), "batch": batch})
        return rows.claimed(self.schema, queue, data)

    async def complete(self, job: Job[Any]) -> bool:
        data = await self.rpc(
            "complete_v1", {"queue": job.queue, "id": job.id, "attempt": job.attempts}
        )
        return rows.flag(self.schema, "complete_v1", data)

    async def complete_many(self, jobs: Sequence[Job[Any]]) -> list[bool]:
        """Complete jobs of one queue in one request; each still fenced by its attempt."""
        if not jobs:
            return []
        data = await self.rpc(
            "complete_many_v1",
            {
                "queue": jobs[0].queue,
                "ids": [job.id for job in jobs],
                "attempts": [job.attempts for job in jobs],
            },
        )
        done = rows.id_set(self.schema, "complete_many_v1", data)
        return [job.id in done for job in jobs]

    async def complete_and_claim(
        self, queue: str, jobs: Sequence[Job[Any]], *, lease: float, batch: int
    ) -> tuple[list[Job[Any]], list[Job[Any]]]:
        """Complete ``jobs`` (each fenced) and claim up to ``batch`` more in one request and
        one transaction; (the jobs whose completion was refused, the claimed jobs)."""
        data = await self.rpc(
            "complete_and_claim_v1",
            {
                "queue": queue,
                "ids": [job.id for job in jobs],
                "attempts": [job.attempts for job in jobs],
                "lease": float(lease),
                "batch": batch,
            },
        )
        if not isinstance(data, dict):
            raise rows.malformed(self.schema, "complete_and_claim_v1", "refused and claimed", data)
        refused = rows.id_set(self.schema, "complete_and_claim_v1", data.get("refused"))
        claimed = rows.claimed(self.schema, queue, data.get("claimed"), "complete_and_claim_v1")
        return [job for job in jobs if job.id in refused], claimed

    async def fail(
        self, job: Job[Any], error: str, retry_in: float | None = None
    ) -> FailOutcome | None:
        data = await self.rpc(
            "fail_v1",
            {
                "queue": job.queue,
                "id": job.id,
                "attempt": job.attempts,
                "error": error,
                "retry_in": None if retry_in is None else float(retry_in),
            },
        )
        return rows.fail_outcome(self.schema, data)

    async def extend(self, job: Job[Any], lease: float) -> bool:
        data = await self.rpc(
            "extend_v1",
            {"queue": job.queue, "id": job.id, "attempt": job.attempts, "lease": float(lease)},
        )
        return rows.flag(self.schema, "extend_v1", data)

    async def extend_many(self, jobs: Sequence[Job[Any]], lease: float) -> set[int]:
        """Extend the leases of jobs of one queue in one request; the ids still held."""
        if not jobs:
            return set()
        data = await self.rpc(
            "extend_many_v1",
            {
                "queue": jobs[0].queue,
                "ids": [job.id for job in jobs],
                "attempts": [job.attempts for job in jobs],
                "lease": float(lease),
            },
        )
        return rows.id_set(self.schema, "extend_many_v1", data)

    # -- stats and dead letters -------------------------------------------------------------

    async def stats(self, queues: Sequence[str]) -> dict[str, QueueStats]:
        return rows.stats(self.schema, await self.rpc("stats_v4", {"queues": list(queues)}))

    # -- pause (docs/policies.md#pause) --------------------------------------------------

    async def pause(self, queue: str) -> bool:
        return rows.flag(self.schema, "pause_v1", await self.rpc("pause_v1", {"queue": queue}))

    async def resume(self, queue: str) -> bool:
        return rows.flag(self.schema, "resume_v1", await self.rpc("resume_v1", {"queue": queue}))

    async def paused(self, queues: Sequence[str]) -> set[str]:
        data = await self.rpc("paused_v1", {"queues": list(queues)})
        return rows.names(self.schema, "paused_v1", data)

    async def queue_holds(
        self, queues: Sequence[str]
    ) -> tuple[set[str], dict[str, dict[str, int]]]:
        """Paused queues and held counts for the drain route's report."""
        data = await self.rpc("queue_holds_v1", {"queues": list(queues)})
        return rows.queue_holds(self.schema, data)

    async def flow_holds(self, jobs: Sequence[tuple[str, int]]) -> dict[tuple[str, int], str]:
        """Why each held one of ``jobs`` (queued, of limited queues) is held."""
        data = await self.rpc(
            "flow_holds_v1",
            {"queues": [queue for queue, _ in jobs], "ids": [job_id for _, job_id in jobs]},
        )
        if not isinstance(data, list) or not all(
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], int)
            and isinstance(item[2], str)
            for item in data
        ):
            raise rows.malformed(self.schema, "flow_holds_v1", "[[queue, id, held_by], ...]", data)
        return {(item[0], item[1]): item[2] for item in data}

    async def list_dead(self, queue: str, *, limit: int, before: int | None) -> list[DeadJob]:
        data = await self.rpc(
            "list_dead_v1", {"queue": queue, "max_rows": limit, "before_id": before}
        )
        return rows.dead(self.schema, queue, data)

    async def retry_dead(self, queue: str, *, ids: Sequence[int] | None, limit: int) -> int:
        found = await self.retry_dead_ruled(
            queue, ids=ids, limit=limit, window=None, replayable=True
        )
        return sum(1 for _, new_id, code in found if new_id is not None and code is None)

    async def replay(self, queue: str, job_id: int) -> int | None:
        new_id, code = await self.replay_ruled(queue, job_id, window=None, replayable=True)
        check_replay_rules(queue, job_id, code)
        return new_id

    async def replay_ruled(
        self, queue: str, job_id: int, *, window: float | None, replayable: bool
    ) -> tuple[int | None, str | None]:
        data = await self.rpc(
            "replay_v3",
            {"queue": queue, "id": job_id, "replay_window": window, "replayable": replayable},
        )
        return rows.replay_outcome(self.schema, "replay_v3", data)

    async def retry_dead_ruled(
        self,
        queue: str,
        *,
        ids: Sequence[int] | None,
        limit: int,
        window: float | None,
        replayable: bool,
    ) -> list[tuple[int, int | None, str | None]]:
        data = await self.rpc(
            "retry_dead_v2",
            {
                "queue": queue,
                "ids": None if ids is None else list(ids),
                "batch": limit,
                "replay_window": window,
                "replayable": replayable,
            },
        )
        return rows.replay_outcomes(self.schema, "retry_dead_v2", data)

    async def purge_archive(
        self, queue: str, *, older_than: timedelta, dead_older_than: timedelta, batch: int
    ) -> int:
        data = await self.rpc(
            "purge_archive_v1",
            {
                "queue": queue,
                "older_than_seconds": older_than.total_seconds(),
                "dead_older_than_seconds": dead_older_than.total_seconds(),
                "batch": batch,
            },
        )
        return rows.count(self.schema, "purge_archive_v1", data)

    # -- job records and coded settlements ------------------------------------------------

    async def skip(self, job: Job[Any], code: str) -> bool:
        data = await self.rpc(
            "skip_v1", {"queue": job.queue, "id": job.id, "attempt": job.attempts, "code": code}
        )
        return rows.flag(self.schema, "skip_v1", data)

    async def fail_coded(
        self, job: Job[Any], error: str, retry_in: float | None, *, code: str, discard: bool
    ) -> FailOutcome | None:
        data = await self.rpc(
            "fail_coded_v1",
            {
                "queue": job.queue,
                "id": job.id,
                "attempt": job.attempts,
                "error": error,
                "retry_in": None if retry_in is None else float(retry_in),
                "code": code,
                "discard": discard,
            },
        )
        return rows.fail_outcome(self.schema, data, "fail_coded_v1")

    async def bury(self, job: Job[Any], error: str, code: str) -> bool:
        """End a held job dead now: a discarding coded failure (one request)."""
        outcome = await self.fail_coded(job, error, None, code=code, discard=True)
        return outcome == "dead"

    async def get_record(self, queue: str, job_id: int) -> JobRecord | None:
        data = await self.rpc("get_job_v1", {"queue": queue, "id": job_id})
        return None if data is None else rows.record(self.schema, "get_job_v1", data)

    async def list_records(
        self,
        queue: str | None,
        *,
        state: str | None,
        tenant: str | None,
        limit: int,
        before: Position | None,
    ) -> tuple[list[JobRecord], Position | None]:
        data = await self.rpc(
            "list_jobs_v2",  # newest first by enqueued_at
            {
                "queue": queue,
                "state": state,
                "tenant": tenant,
                "row_limit": limit + 1,  # the extra one says whether a next page exists
                "before_at": None
                if before is None or before.enqueued_at is None
                else before.enqueued_at.isoformat(),
                "before_id": None if before is None else before.id,
                "before_queue": None if before is None else before.queue,
            },
        )
        return rows.record_page(self.schema, data, limit)

    async def cancel(self, queue: str, job_id: int) -> str | None:
        data = await self.rpc("cancel_v1", {"queue": queue, "id": job_id})
        if data is None or data in ("cancelled", "terminal"):
            return data  # type: ignore[no-any-return]
        raise rows.malformed(self.schema, "cancel_v1", '"cancelled", "terminal" or null', data)


def _not_exposed_hint(schema: str) -> str:
    return (
        f"{expose_hint(schema)}; create it with `drainpipe sql apply --modules rest-api`;"
        " or use `PostgrestBackend.detect(url, key)` to fall back to pgmq_public"
    )
