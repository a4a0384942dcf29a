"""How drainpipe opens connections: timeouts, and whether statements are prepared.

The prepare decision itself (a pooler in front, or the server reached directly) is
:mod:`.poolers`'; this module turns it and the timeouts into psycopg's connection keywords.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from ..errors import DrainpipeError
from .error_translation import connect_error
from .poolers import prepare_mode

#: Seconds one attempt to open a connection may take (libpq's ``connect_timeout``: whole
#: seconds, at least 2). Short enough to leave a serverless function most of its budget.
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
#: Seconds a call waits for a pooled connection (all busy, or the server away) before
#: ``network``.
DEFAULT_POOL_TIMEOUT: Final = 5.0


def prepare_options(dsn: str, prepare: bool | None) -> dict[str, Any]:
    """Connection keywords that decide whether psycopg prepares statements on a pool
    drainpipe opens for ``dsn`` (see :mod:`.poolers`).

    ``prepare=True`` prepares (psycopg's default: a statement is prepared on a connection
    from its 6th use, so a one-shot serverless call pays no extra round trip); ``False``
    never prepares (``prepare_threshold=None``); ``None`` (the default) opens every
    connection with prepares off and turns them on only for a connection found to reach the
    server directly (never when the DSN names a pooler: port 6543 or 6432, ``pgbouncer=true``).
    """
    return {} if prepare_mode(dsn, prepare) == "always" else {"prepare_threshold": None}


def connect_options(dsn: str, connect_timeout: float) -> dict[str, Any]:
    """Connection keywords for ``dsn``: ``connect_timeout`` unless the DSN sets its own.

    A DSN that does not parse, or names a port that is not a number, raises ``network``
    with code ``INVALID_DSN`` before anything is sent.
    """
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        raise connect_error(exc) from exc
    for port in str(params.get("port") or "").split(","):
        if port and not port.strip().isdigit():
            # libpq would report it as a host it could not resolve
            raise DrainpipeError(
                "network",
                f"invalid database URL: port {port!r} is not a number",
                code="INVALID_DSN",
            )
    own = params.get("connect_timeout")
    if own is not None:
        try:
            seconds = int(float(own))
        except ValueError:
            raise DrainpipeError(
                "network", f"invalid database URL: connect_timeout {own!r}", code="INVALID_DSN"
            ) from None
        # libpq: 0 or less waits forever (psycopg: 130 s), less than 2 means 2
        return {"connect_timeout": seconds if seconds <= 0 else max(2, seconds)}
    return {"connect_timeout": max(2, math.ceil(connect_timeout))}


def positive_seconds(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
    return float(value)


def reporting_connection_class(report: Callable[[BaseException | None], None]) -> type[Any]:
    """An ``AsyncConnection`` class that calls ``report`` after each attempt to connect
    (with the failure, or None): a pool connects in the background and only logs its
    failures, so this is how the error a caller gets can name the cause."""
    import psycopg

    class ReportingConnection(psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, conninfo: str = "", **kwargs: Any) -> ReportingConnection:
            try:
                conn = await super().connect(conninfo, **kwargs)
            except Exception as exc:
                report(exc)
                raise
            report(None)
            return conn

    return ReportingConnection
