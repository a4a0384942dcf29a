"""The connection a :class:`~drainpipe.db.Database` keeps between statements, and the
cursor drainpipe keeps on each pooled connection (shared by the async and sync executors).
"""

from __future__ import annotations

from typing import Any, Final

from .json import use_fast_json

#: A connection drainpipe's own pool (a DSN's) lent to a statement stays with the
#: :class:`Database` between statements while nothing else waits for one ("parked"), so a
#: caller that sends one statement after another skips the pool's checkout and return.
#: It goes back to the pool when it has been idle this many seconds ...
PARK_IDLE: Final = 1.0
#: ... and, in a steady stream of statements, when it left the pool this long ago (the
#: pool then applies its max_lifetime and hands out another or the same one).
PARK_ROUND: Final = 30.0

#: The attribute of a pooled connection that holds drainpipe's cursor on it (kept_cursor)
_KEPT_CURSOR: Final = "_drainpipe_cursor"


def kept_cursor(conn: Any, row_factory: Any, fast_json: bool) -> Any:
    """drainpipe's cursor on a pooled connection (sync or async): made the first time the
    connection runs a statement of ours, and kept on the connection for the next, so it
    goes when the pool drops the connection. A new cursor for every statement cost a single
    enqueue 18-38 us of client CPU (docs/benchmarks.md). Only for a connection checked out
    of a pool, which has one user at a time; ``fast_json`` for a connection of the
    caller's (our cursor decodes JSON with orjson, their connection is left as it is)."""
    cur = getattr(conn, _KEPT_CURSOR, None)
    if cur is None or cur.closed:
        cur = conn.cursor(row_factory=row_factory)
        if fast_json:
            use_fast_json(cur)
        setattr(conn, _KEPT_CURSOR, cur)
    return cur
