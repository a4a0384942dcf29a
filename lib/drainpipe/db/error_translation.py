"""The one place where Postgres and connection failures become :class:`DrainpipeError`.

:func:`translate_error` maps a failed statement (by SQLSTATE: the table is
:func:`drainpipe.errors.sql_error`, shared with the PostgREST backends);
:func:`connect_error` names why a connection could not be opened, with a stable ``code``.
The async :class:`~drainpipe.db.Database` and the sync twin's executor both answer with
these, so both report the same kinds and codes.
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import DrainpipeError, sql_error


def translate_error(exc: BaseException) -> DrainpipeError:
    """Map a database or connection exception to a :class:`DrainpipeError` of the contract.

    SQLSTATE 23505 → conflict (constraint kept as ``code``), 42501 → forbidden,
    P0001 → raised, 57014 → timeout, 40001/40P01 → serialization, 22xxx (and a value
    psycopg refuses to send, such as a NUL character) → invalid_input, 08xxx and connection
    failures (a session the server ended: 57P01-57P03, 53300) → network, else unexpected;
    drainpipe's SQL missing → unexpected with code ``NOT_INSTALLED``. The SQLSTATE table is
    :func:`drainpipe.errors.sql_error`, shared with the PostgREST backends.
    """
    if isinstance(exc, DrainpipeError):
        return exc
    import psycopg

    sqlstate: str | None = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    message = primary or str(exc).strip() or type(exc).__name__
    if sqlstate is not None:
        constraint = getattr(diag, "constraint_name", None) if diag is not None else None
        return sql_error(sqlstate, message, constraint=constraint)
    if isinstance(exc, psycopg.OperationalError | OSError | ConnectionError):
        return DrainpipeError("network", message)
    if isinstance(exc, psycopg.DataError):
        # refused by psycopg before sending (a NUL character in text): a bad value, like 22xxx
        return DrainpipeError("invalid_input", message)
    if type(exc).__module__.startswith("psycopg_pool"):
        # PoolTimeout / TooManyRequests: no connection could be had in time
        return DrainpipeError("network", message)
    return DrainpipeError("unexpected", message)


#: Codes of connection failures that retrying cannot fix: the configuration is wrong.
PERMANENT_CONNECT_CODES: Final = frozenset(
    {"INVALID_DSN", "DATABASE_NOT_FOUND", "AUTHENTICATION_FAILED", "HOST_NOT_FOUND"}
)

# libpq reports connection failures as text only (no SQLSTATE reaches the client), so the
# code is read from the server's or libpq's message; the first match wins.
_CONNECT_FAILURES: Final = (
    (re.compile(r'database ".*" does not exist'), "DATABASE_NOT_FOUND"),
    (
        re.compile(
            r"authentication failed|no password supplied|no pg_hba\.conf entry"
            r'|role ".*" does not exist|password is too long|SCRAM',
            re.IGNORECASE,
        ),
        "AUTHENTICATION_FAILED",
    ),
    (
        re.compile(r"could not translate host name|failed to resolve host", re.IGNORECASE),
        "HOST_NOT_FOUND",
    ),
    (re.compile(r"Connection refused", re.IGNORECASE), "CONNECTION_REFUSED"),
    (re.compile(r"timeout expired|timed out", re.IGNORECASE), "CONNECT_TIMEOUT"),
    (
        re.compile(r"too many (clients|connections)|connection slots are reserved", re.I),
        "TOO_MANY_CONNECTIONS",
    ),
    (
        re.compile(r"the database system is (starting up|shutting down|in recovery)", re.I),
        "SERVER_NOT_READY",
    ),
)

# libpq's words for a conninfo value it refuses before connecting (sslmode=sometimes)
_BAD_CONNINFO: Final = re.compile(
    r'^invalid [\w ]+ value|^invalid URI|^invalid connection option|^missing "=" after'
    r"|^unterminated quoted string|^invalid port number"
)


def connect_error(exc: BaseException) -> DrainpipeError:
    """The contract's error for a failed attempt to open a connection.

    Always kind ``network`` (section 1: connection failures), with libpq's message and a
    stable ``code``: ``INVALID_DSN``, ``DATABASE_NOT_FOUND``, ``AUTHENTICATION_FAILED``,
    ``HOST_NOT_FOUND`` (see :data:`PERMANENT_CONNECT_CODES`: retrying cannot fix them),
    ``CONNECTION_REFUSED``, ``CONNECT_TIMEOUT``, ``TOO_MANY_CONNECTIONS``,
    ``SERVER_NOT_READY`` or ``CONNECTION_FAILED`` (anything else).
    """
    if isinstance(exc, DrainpipeError):
        return exc
    text = str(exc).strip() or type(exc).__name__
    # psycopg prefixes "connection failed: " and libpq "FATAL:  "; the rest is the cause
    text = re.sub(r"^(connection failed|connection is bad): ", "", text)
    text = re.sub(r"FATAL:\s+", "", text)
    text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    if type(exc).__name__ == "ProgrammingError" or _BAD_CONNINFO.search(text):
        # the DSN did not parse (psycopg) or libpq refused one of its values
        return DrainpipeError("network", f"invalid database URL: {text}", code="INVALID_DSN")
    for pattern, code in _CONNECT_FAILURES:
        if pattern.search(text):
            return DrainpipeError("network", text, code=code)
    return DrainpipeError("network", text, code="CONNECTION_FAILED")


def database_error(exc: Exception) -> DrainpipeError | None:
    """The contract's error for a database or connection failure; None for anything else
    (a DrainpipeError already, or an error that is not the database's)."""
    if isinstance(exc, DrainpipeError) or not is_database_error(exc):
        return None
    return translate_error(exc)


def is_database_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("psycopg", "psycopg_pool")) or isinstance(exc, OSError)
