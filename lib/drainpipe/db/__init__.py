"""Connections, and the one place where Postgres errors become :class:`DrainpipeError`.

* :mod:`.database`: :class:`Database`, the async executor (one statement per call).
* :mod:`.error_translation`: :func:`translate_error` and :func:`connect_error`.
* :mod:`.connection_options`: timeouts and prepared statements for a DSN's pool.
* :mod:`.parking`: the connection kept between statements and its cursor.
* :mod:`.json`: how JSON reaches and leaves jsonb (orjson, checked, exact numbers).
* :mod:`.outage` and :mod:`.poolers`: a database that went away; a pooler in front.
* :mod:`.sync`: the sync twin's executor.

psycopg is imported on first use, not at import time: a serverless function that only
builds a route pays nothing for it until a request needs the database.
"""

from __future__ import annotations

from .connection_options import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_POOL_TIMEOUT,
    connect_options,
    prepare_options,
)
from .database import Database, Row, as_database
from .error_translation import PERMANENT_CONNECT_CODES, connect_error, translate_error
from .json import careful_dumps, dump_json, jsonb, use_fast_json
from .parking import PARK_IDLE, PARK_ROUND, kept_cursor

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_POOL_TIMEOUT",
    "PARK_IDLE",
    "PARK_ROUND",
    "PERMANENT_CONNECT_CODES",
    "Database",
    "Row",
    "as_database",
    "careful_dumps",
    "connect_error",
    "connect_options",
    "dump_json",
    "jsonb",
    "kept_cursor",
    "prepare_options",
    "translate_error",
    "use_fast_json",
]
