"""Transaction poolers: what drainpipe must not do behind one, and how it tells.

A transaction pooler (PgBouncer in transaction mode, Supavisor on Supabase's port 6543)
hands each transaction to whichever server session is free. Three things break there:
a prepared statement exists on one server session only (PgBouncer 1.18, or a newer one with
``max_prepared_statements=0``, lets the next client trip over ``_pg3_0``), a ``SET`` stays
on a server session another client gets next, and ``LISTEN`` hears nothing once its
transaction is over. So drainpipe prepares only on a connection it knows is direct:

* the DSN names a pooler (port 6543 or 6432, or ``pgbouncer=true``): never;
* otherwise each new connection is asked once where it ended up
  (:data:`DIRECT_CHECK_SQL`): a session whose server listens on the port and address the
  client connected to is direct; anything else (a pooler, a proxy, a mapped port) is not.

``pgbouncer=true`` is not a libpq parameter: :func:`split_dsn` takes it out of the DSN
before libpq sees it.
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal

#: Ports poolers listen on by convention: Supavisor's transaction port on Supabase (6543)
#: and PgBouncer's default (6432).
POOLER_PORTS: Final = frozenset({"6543", "6432"})

#: psycopg's own threshold: a statement is prepared from its 6th use on a connection.
PREPARE_THRESHOLD: Final = 5

#: Where a session's server listens; compared with where the client connected.
DIRECT_CHECK_SQL: Final = "SELECT current_setting('port'), host(inet_server_addr())"

PrepareMode = Literal["always", "never", "detect"]

_URI = re.compile(r"^postgres(ql)?://", re.IGNORECASE)
_KEYWORD_FLAG = re.compile(r"(?:^|\s)pgbouncer\s*=\s*('[^']*'|\S*)")
_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_FALSE: Final = frozenset({"false", "0", "no", "off"})


def _flag(value: str) -> bool:
    text = value.strip("'").lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    from ..errors import DrainpipeError

    raise DrainpipeError(
        "network",
        f"invalid database URL: pgbouncer={value!r} (true or false)",
        code="INVALID_DSN",
    )


def split_dsn(dsn: str) -> tuple[str, bool]:
    """``dsn`` without drainpipe's ``pgbouncer`` parameter, and whether it said ``true``.

    A URL keeps every other query parameter exactly as written (no re-encoding); a
    ``key=value`` conninfo loses the ``pgbouncer=...`` pair only.
    """
    if "pgbouncer" not in dsn.lower():
        return dsn, False
    said = False
    if _URI.match(dsn):
        head, mark, query = dsn.partition("?")
        if not mark:
            return dsn, False
        kept = []
        for part in query.split("&"):
            name, _, value = part.partition("=")
            if name.lower() == "pgbouncer":
                said = _flag(value) or said
            elif part:
                kept.append(part)
        return head + ("?" + "&".join(kept) if kept else ""), said
    for match in _KEYWORD_FLAG.finditer(dsn):
        said = _flag(match[1]) or said
    return _KEYWORD_FLAG.sub("", dsn).strip(), said


def dsn_ports(dsn: str) -> list[str]:
    """The ports a DSN names (a URL's ``host:port`` list and ``port=`` parameter, or a
    conninfo's ``port=``), read without psycopg: constructing a :class:`Database` loads
    nothing."""
    if _URI.match(dsn):
        rest = dsn.split("://", 1)[1]
        authority = re.split(r"[/?]", rest, maxsplit=1)[0].rpartition("@")[2]
        ports = [
            match[1] for host in authority.split(",") if (match := re.search(r":(\d+)$", host))
        ]
        query = rest.partition("?")[2]
        for part in query.split("&"):
            name, _, value = part.partition("=")
            if name == "port":
                ports += value.split(",")
        return [port.strip() for port in ports if port.strip()]
    found = re.search(r"(?:^|\s)port\s*=\s*'?([0-9,\s]+)", dsn)
    return [port.strip() for port in found[1].split(",") if port.strip()] if found else []


def names_pooler(dsn: str) -> bool:
    """True when the DSN itself says a pooler is in front: ``pgbouncer=true``, or every
    port it names is a pooler's (:data:`POOLER_PORTS`)."""
    clean, said = split_dsn(dsn)
    if said:
        return True
    ports = dsn_ports(clean)
    return bool(ports) and all(port in POOLER_PORTS for port in ports)


def prepare_mode(dsn: str, prepare: bool | None) -> PrepareMode:
    """``prepare=True``: always; ``False``: never; ``None`` (the default): never when the
    DSN names a pooler, else per connection, where it is known to be direct."""
    if prepare is not None and not isinstance(prepare, bool):
        raise ValueError(f"prepare must be True, False or None, not {prepare!r}")
    if prepare is True:
        return "always"
    if prepare is False or names_pooler(dsn):
        return "never"
    return "detect"


def is_direct(conn: Any, answer: tuple[Any, ...] | None) -> bool:
    """Whether ``conn`` reaches the server itself: the server's ``port`` setting is the
    port the client connected to, and over TCP its address is the one connected to.
    ``answer`` is :data:`DIRECT_CHECK_SQL`'s row on that connection."""
    if answer is None:
        return False
    server_port, server_addr = answer
    info = conn.info
    if str(server_port) != str(info.port):
        return False
    client_addr = info.hostaddr or ""
    if server_addr is None:
        # the server sees a Unix socket: direct when the client used one too (the socket's
        # name carries the port, compared above)
        return not client_addr and str(info.host).startswith("/")
    return bool(client_addr) and client_addr == server_addr


async def decide_prepare(conn: Any) -> None:
    """Turn psycopg's prepares on for ``conn`` when it is direct (it was opened with them
    off: nothing is prepared before this)."""
    cur = await conn.execute(DIRECT_CHECK_SQL)
    if is_direct(conn, await cur.fetchone()):
        conn.prepare_threshold = PREPARE_THRESHOLD


def decide_prepare_sync(conn: Any) -> None:
    """:func:`decide_prepare` for a sync connection."""
    if is_direct(conn, conn.execute(DIRECT_CHECK_SQL).fetchone()):
        conn.prepare_threshold = PREPARE_THRESHOLD
