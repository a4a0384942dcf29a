"""Lease operations: acquire, extend, release. See :mod:`drainpipe.statements` for the shape."""

from __future__ import annotations

from datetime import datetime

from ..db.statement_shapes import Params, Row

# ``now`` (p_now): the caller's clock, or None for the database's (clock_timestamp())
ACQUIRE = "SELECT drainpipe.acquire_lease_v1(%s, %s, %s, %s)"


def acquire_params(key: str, seconds: float, scope: str, now: datetime | None = None) -> Params:
    return (key, seconds, scope, now)


def parse_acquire(rows: list[Row]) -> str | None:
    """The new holder token, or None when someone else holds an unexpired lease."""
    holder = rows[0][0] if rows else None
    return None if holder is None else str(holder)


EXTEND = "SELECT drainpipe.extend_lease_v1(%s, %s::uuid, %s, %s, %s)"


def extend_params(
    key: str, holder: str, seconds: float, scope: str, now: datetime | None = None
) -> Params:
    return (key, holder, seconds, scope, now)


def parse_extend(rows: list[Row]) -> bool:
    """False: the lease was taken over (or released); nothing changed."""
    return bool(rows[0][0]) if rows else False


RELEASE = "SELECT drainpipe.release_lease_v1(%s, %s::uuid, %s)"


def release_params(key: str, holder: str, scope: str) -> Params:
    return (key, holder, scope)


parse_release = parse_extend
