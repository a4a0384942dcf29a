# generated from lib/drainpipe/backends/sql_enqueue.py by ./scripts/sync-twin: do not edit.
# Change the async source (or tools/sync_twin.py) and run ./scripts/sync-twin again.
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

from ..backends.sql_enqueue import (
    ENQUEUE_FLOW,
    ENQUEUE_MANY,
    enqueue_flow_params,
    enqueue_many_params,
    enqueue_query,
    parse_enqueue,
    parse_enqueue_many,
)
from ..db.sync import SyncDatabase
from ..models import DedupeMode

# -- the calls that run them (SqlQueueBackend's enqueue) ----------------------------------


class SyncSqlEnqueue:
    """The enqueue calls of :class:`~drainpipe.backends.sql.SqlQueueBackend`."""

    db: SyncDatabase

    def send(
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
        return parse_enqueue(self.db.fetch(statement, params))

    def send_flow(
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
        return parse_enqueue(self.db.fetch(ENQUEUE_FLOW, params))

    def send_many(
        self, queue: str, payloads: Sequence[Any], *, delay: float = 0, max_attempts: int = 5
    ) -> list[int]:
        rows = self.db.fetch(
            ENQUEUE_MANY, enqueue_many_params(queue, payloads, delay, max_attempts)
        )
        return parse_enqueue_many(rows)
