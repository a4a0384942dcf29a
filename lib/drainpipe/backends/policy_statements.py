"""Queue policy and payload operations: store a policy, bury a job with a code, page
through and rewrite live payloads (reencrypt), apply retention. See :mod:`drainpipe.statements`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..db import jsonb
from ..db.statement_shapes import Params, Row

ENSURE_POLICY = "SELECT drainpipe.ensure_queue_policy_v3(" + ", ".join(["%s"] * 19) + ")"


def ensure_policy_params(row: Sequence[Any]) -> Params:
    return tuple(row)


BURY = "SELECT drainpipe.bury_job_v1(%s, %s, %s, %s, %s)"


def bury_params(queue: str, job_id: int, attempt: int, error: str, code: str) -> Params:
    return (queue, job_id, attempt, error, code)


def parse_flag(rows: list[Row]) -> bool:
    return bool(rows[0][0]) if rows else False


LIVE_PAYLOADS = "SELECT id, payload FROM drainpipe.live_job_payloads_v1(%s, %s, %s)"


def live_payloads_params(queue: str, after: int, limit: int) -> Params:
    return (queue, after, limit)


def parse_live_payloads(rows: list[Row]) -> list[tuple[int, Any]]:
    return [(int(row[0]), row[1]) for row in rows]


REWRITE_PAYLOAD = "SELECT drainpipe.rewrite_job_payload_v1(%s, %s, %s, %s)"


def rewrite_payload_params(queue: str, job_id: int, old: Any, new: Any) -> Params:
    return (queue, job_id, jsonb(old), jsonb(new))


APPLY_RETENTION = "SELECT drainpipe.apply_job_retention_v1(%s)"


def parse_retention(rows: list[Row]) -> int | None:
    value = rows[0][0] if rows else None
    return None if value is None else int(value)
