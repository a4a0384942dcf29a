"""Storing jobs on the SQL backend: the enqueue statements (one job, a debounced or
throttled one, many), their parameters and the reading of their rows, beside the calls of
:class:`~drainpipe.backends.sql.SqlQueueBackend` that run them (:class:`SqlEnqueue`).

Each is one call of a ``drainpipe.*`` function (the same for the pgmq and the table
storage), one round trip. ``drainpipe.sync.backend_enqueue`` is generated from this module
(``./scripts/sync-twin``): its calls run these very statements on a
:class:`~drainpipe.db.sync.SyncDatabase`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..db import Database, jsonb
from ..db.statement_shapes import Params, Row
from ..models import DedupeMode

#: ``enqueue`` with the SQL defaults (no delay, 5 attempts, no dedupe key): two parameters
#: to send and for psycopg to dump instead of six.
ENQUEUE_DEFAULT = "SELECT drainpipe.enqueue_job_v1(%s, %s)"
ENQUEUE = "SELECT drainpipe.enqueue_job_v1(%s, %s, %s, %s, %s, %s)"


def enqueue_query(
    queue: str,
    payload: Any,
    delay: float,
    max_attempts: int,
    dedupe_key: str | None,
    dedupe: DedupeMode,
) -> tuple[str, Params]:
    """The statement and its parameters: :data:`ENQUEUE_DEFAULT` when the options are the
    SQL defaults, else :data:`ENQUEUE` (one call for both: this runs once per enqueue)."""
    if not delay and max_attempts == 5 and dedupe_key is None:
        return ENQUEUE_DEFAULT, (queue, jsonb(payload))
    # the last parameter: may a dedupe key coalesce onto a running job ("always")?
    return ENQUEUE, (
        queue,
        jsonb(payload),
        float(delay),
        max_attempts,
        dedupe_key,
        dedupe != "waiting",
    )


#: a debounced or throttled enqueue (docs/flow-control.md)
ENQUEUE_FLOW = "SELECT drainpipe.enqueue_flow_job_v1(%s, %s, %s, %s, %s, %s, %s, %s, %s)"


def enqueue_flow_params(
    queue: str,
    payload: Any,
    delay: float,
    max_attempts: int,
    dedupe_key: str | None,
    dedupe: DedupeMode,
    key: str,
    debounce: float | None,
    throttle: float | None,
) -> Params:
    return (
        queue,
        jsonb(payload),
        float(delay),
        max_attempts,
        dedupe_key,
        dedupe != "waiting",
        key,
        debounce,
        throttle,
    )


def parse_enqueue(rows: list[Row]) -> int:
    """The job id (the existing one on a dedupe hit)."""
    return int(rows[0][0])


ENQUEUE_MANY = "SELECT drainpipe.enqueue_jobs_v1(%s, %s, %s, %s)"


def enqueue_many_params(
    queue: str, payloads: Sequence[Any], delay: float, max_attempts: int
) -> Params:
    return (queue, jsonb(list(payloads)), float(delay), max_attempts)


def parse_enqueue_many(rows: list[Row]) -> list[int]:
    """The new ids, in the order of the payloads."""
    return [int(row[0]) for row in rows]


# -- the calls that run them (SqlQueueBackend's enqueue) ----------------------------------


class SqlEnqueue:
    """The enqueue calls of :class:`~drainpipe.backends.sql.SqlQueueBackend`."""

    db: Database

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
        statement, params = enqueue_query(queue, payload, delay, max_attempts, dedupe_key, dedupe)
        return parse_enqueue(await self.db.fetch(statement, params))

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
        params = enqueue_flow_params(
            queue, payload, delay, max_attempts, dedupe_key, dedupe, key, debounce, throttle
        )
        return parse_enqueue(await self.db.fetch(ENQUEUE_FLOW, params))

    async def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        rows = await self.db.fetch(
            ENQUEUE_MANY, enqueue_many_params(queue, payloads, delay, max_attempts)
        )
        return parse_enqueue_many(rows)
