"""The ``drainpipe`` command.

drainpipe sql add MODULE... [--out DIR] [--backend pgmq|table] [--scheduler drain|pg_cron]
drainpipe sql apply [--database-url URL] [--modules MODULE...] [--backend] [--scheduler]
                    [--timeout SECONDS] [--contract]
drainpipe sql verify [--database-url URL] [--modules MODULE...] [--backend] [--scheduler]
                     [--timeout SECONDS] [--contract]
drainpipe dev [--port N] [--every SECONDS] [--database-url URL] [--functions DIR]
drainpipe serve [--functions DIR] [--host H] [--port N] [--graceful SECONDS]
drainpipe work [QUEUE...] --app module:attr [--concurrency N] [--batch N] [--lease S] [--grace S]
drainpipe jobs stats [--queue QUEUE]... | jobs dead QUEUE | jobs retry QUEUE [--id ID...]
drainpipe inbox list SOURCE [--status S] [--tenant T]
drainpipe keys new [--kid ID]
drainpipe bench [--database-url URL] [--backend pgmq|table] [--jobs N] [--workers C]
                [--batch N] [--latency-jobs N] [--rate R] [--hold-snapshot] [--force]
drainpipe --version

Exit status: 0 done, 1 failed (one line on stderr says why), 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import DrainpipeError
from ..sqlmodules import MODULES
from .arguments import port, seconds
from .ops import DEFAULT_TIMEOUT

# Supabase names migrations <14-digit UTC timestamp>_<name>.sql; others number them 0001_...


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=("pgmq", "table"),
        default="pgmq",
        help="where jobs are stored (default pgmq)",
    )
    parser.add_argument(
        "--scheduler",
        choices=("drain", "pg_cron"),
        default="drain",
        help="who enqueues due schedules (default: the drain route)",
    )


def _add_contract(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--contract", action="store_true", help=text)


def build_parser() -> argparse.ArgumentParser:
    from . import ops as cli_ops

    parser = argparse.ArgumentParser(
        prog="drainpipe", description="Background jobs, schedules and webhooks on Postgres."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"drainpipe {package_version()}",
        help="print drainpipe's version and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sql = commands.add_parser("sql", help="write or apply the SQL modules")
    sql_commands = sql.add_subparsers(dest="sql_command", required=True)
    add = sql_commands.add_parser("add", help="write numbered migration files")
    add.add_argument(
        "modules",
        nargs="+",
        choices=MODULES,
        metavar="MODULE",
        help=f"one or more of: {', '.join(MODULES)}",
    )
    add.add_argument(
        "--out",
        default="migrations",
        help="migrations folder (default ./migrations; e.g. supabase/migrations)",
    )
    _add_options(add)
    _add_contract(
        add, "also write the contract migrations (drops of the previous release's functions)"
    )
    apply = sql_commands.add_parser("apply", help="apply the pending migrations to a database now")
    cli_ops.add_connection_options(apply)
    apply.add_argument(
        "--modules",
        nargs="+",
        choices=MODULES,
        metavar="MODULE",
        default=None,
        help="modules to apply (default: all)",
    )
    _add_options(apply)
    _add_contract(
        apply, "also apply the contract migrations: only once no previous release's code runs"
    )
    verify = sql_commands.add_parser(
        "verify", help="exit 0 when every migration is applied and unchanged, else list them"
    )
    cli_ops.add_connection_options(verify)
    verify.add_argument(
        "--modules",
        nargs="+",
        choices=MODULES,
        metavar="MODULE",
        default=None,
        help="modules to check (default: those the database has, else all)",
    )
    verify.add_argument(
        "--backend", choices=("pgmq", "table"), default=None, help="default: as installed"
    )
    verify.add_argument(
        "--scheduler", choices=("drain", "pg_cron"), default=None, help="default: as installed"
    )
    _add_contract(verify, "count contract migrations that are not applied as pending")

    dev = commands.add_parser("dev", help="run the functions and the drain loop locally")
    dev.add_argument("--port", type=port, default=3000, help="HTTP port (default 3000, 0: any)")
    dev.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    dev.add_argument(
        "--every", type=seconds, default=5.0, help="seconds between drain calls (default 5)"
    )
    dev.add_argument(
        "--database-url",
        default=None,
        help="Postgres URL (default $DATABASE_URL, else an embedded Postgres)",
    )
    dev.add_argument(
        "--functions",
        default="api",
        help="the folder Vercel makes functions of (default ./api), served as Vercel serves it",
    )
    dev.add_argument(
        "--backend",
        choices=("pgmq", "table"),
        default="pgmq",
        help="where jobs are stored in the embedded database (default pgmq)",
    )
    dev.add_argument(
        "--pgdata",
        default=None,
        help=(
            "embedded Postgres data folder (default ~/.cache/drainpipe/dev-pgdata-NAME-HASH,"
            " one per checkout; a folder in use by another session is refused)"
        ),
    )
    cli_ops.add_commands(commands)

    keys = commands.add_parser("keys", help="payload encryption keys")
    keys_commands = keys.add_subparsers(dest="keys_command", required=True)
    new_key = keys_commands.add_parser(
        "new", help="print a fresh kid:key entry for DRAINPIPE_PAYLOAD_KEYS (put it first)"
    )
    new_key.add_argument("--kid", default=None, help="the key id (default: k + 8 hex digits)")

    from .bench import add_bench_arguments

    add_bench_arguments(
        commands.add_parser(
            "bench", help="measure enqueue, processing and latency in a throw-away database"
        )
    )

    from .. import serve

    serve.add_serve_arguments(commands.add_parser("serve", help="serve functions/ (a container)"))
    serve.add_work_arguments(commands.add_parser("work", help="work queues until SIGTERM"))
    return parser


def package_version() -> str:
    """The installed distribution's version (``unknown`` when run from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("drainpipe")
    except PackageNotFoundError:
        return "unknown"


async def connect(database_url: str, *, timeout_seconds: float = DEFAULT_TIMEOUT) -> Any:
    """One autocommit connection, failing at once (no pool retrying) when unreachable.

    ``timeout_seconds`` bounds the connect (libpq's ``connect_timeout``, whole seconds, at least
    2, and a client-side guard for servers that accept but never answer), and each
    statement and lock wait on the connection (``statement_timeout``, ``lock_timeout``),
    set with ``SET LOCAL`` in the statement's own transaction: a session ``SET`` would stay
    on the server session, which a transaction pooler hands to other clients next.
    """
    import psycopg

    from ..db import connect_error, connect_options
    from ..db.poolers import split_dsn

    database_url = split_dsn(database_url)[0]
    options = connect_options(database_url, timeout_seconds)
    # libpq's timeout is per address tried; the guard also stops a DSN's connect_timeout=0
    # (wait forever) from hanging a command that was given a timeout
    own = options["connect_timeout"]
    guard = (own if own > 0 else timeout_seconds) + 1.0
    milliseconds = max(1, round(timeout_seconds * 1000))
    try:
        async with asyncio.timeout(guard):
            connection_class, cursor_class = _timed_connection_class()
            conn = await connection_class.connect(
                database_url,
                autocommit=True,
                prepare_threshold=None,
                cursor_factory=cursor_class,
                **options,
            )
    except TimeoutError:
        raise DrainpipeError(
            "network",
            f"the database did not answer within {guard:g} s",
            code="CONNECT_TIMEOUT",
        ) from None
    except psycopg.Error as exc:
        raise connect_error(exc) from exc
    conn.timeout_milliseconds = milliseconds
    return conn


#: Statements Postgres refuses inside a transaction block: they run bare, without the
#: ``SET LOCAL`` timeouts (``drainpipe bench`` creates and drops its database with them).
_OUTSIDE_TRANSACTIONS = re.compile(
    r"\s*(CREATE\s+DATABASE|DROP\s+DATABASE|VACUUM|ALTER\s+SYSTEM)\b", re.IGNORECASE
)

#: Sets both timeouts for the rest of the current transaction only (``is_local``).
_LOCAL_TIMEOUTS = (
    "SELECT set_config('statement_timeout', %(ms)s, true), set_config('lock_timeout', %(ms)s, true)"
)


def _timed_connection_class() -> tuple[type[Any], type[Any]]:
    """An ``AsyncConnection`` whose every transaction starts with ``SET LOCAL`` timeouts:
    a statement run outside one gets a transaction of its own (the CLI is not hot: the
    extra round trips do not matter), and ``transaction()`` sets them on entry."""
    import psycopg
    from psycopg.pq import TransactionStatus

    class TimedCursor(psycopg.AsyncCursor[Any]):
        async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            conn = self.connection
            if conn.info.transaction_status != TransactionStatus.IDLE or (
                isinstance(query, str) and _OUTSIDE_TRANSACTIONS.match(query)
            ):
                return await super().execute(query, params, **kwargs)
            async with conn.transaction():  # sets the timeouts first (TimedConnection)
                return await super().execute(query, params, **kwargs)

    class TimedConnection(psycopg.AsyncConnection[Any]):
        timeout_milliseconds = 0

        @contextlib.asynccontextmanager
        async def transaction(
            self, savepoint_name: str | None = None, force_rollback: bool = False
        ) -> AsyncIterator[Any]:
            outermost = self.info.transaction_status == TransactionStatus.IDLE
            async with super().transaction(savepoint_name, force_rollback) as tx:
                if outermost and self.timeout_milliseconds:
                    await self.pgconn_timeouts()
                yield tx

        async def pgconn_timeouts(self) -> None:
            # a plain cursor: TimedCursor would open another transaction for it
            cur = psycopg.AsyncCursor(self)
            await cur.execute(_LOCAL_TIMEOUTS, {"ms": str(self.timeout_milliseconds)})

    return TimedConnection, TimedCursor


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; the exit status (0 ok, 1 failed, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # a usage error exits 2 with argparse's message
    from .ops import UsageError

    try:
        return _run(args)
    except UsageError as exc:
        print(f"drainpipe: {exc}", file=sys.stderr)
        return 2
    except DrainpipeError as exc:
        code = f" {exc.code}" if exc.code else ""
        # the server's "canceling statement due to statement timeout" does not say whose
        limit = getattr(args, "timeout", None)
        hint = f" (--timeout {limit:g} s)" if exc.kind == "timeout" and limit else ""
        print(f"drainpipe: {exc.kind}{code}: {_one_line(str(exc))}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("drainpipe: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an operator gets the cause in one line, never a traceback
        print(f"drainpipe: {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr)
        return 1


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "(no message)"


def _rest_api_note(modules: Sequence[str]) -> None:
    """The step after creating the rest-api schema: PostgREST must serve it."""
    if "rest-api" in modules:
        from ..backends.postgrest import API_SCHEMA
        from ..backends.postgrest_http import expose_hint

        print(f"rest-api: {expose_hint(API_SCHEMA)}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    if args.command == "sql":
        from .sql import print_verify, sql_add, sql_apply, sql_verify
    if args.command == "sql" and args.sql_command == "add":
        for path in sql_add(
            args.modules, Path(args.out), args.backend, args.scheduler, args.contract
        ):
            print(path)
        _rest_api_note(args.modules)
        return 0
    if args.command == "sql" and args.sql_command in ("apply", "verify"):
        from ..sqlmodules import MODULES
        from .ops import database_url

        url = database_url(args)
        if args.sql_command == "verify":
            report = asyncio.run(
                sql_verify(
                    url,
                    args.modules,
                    args.backend,
                    args.scheduler,
                    args.contract,
                    timeout_seconds=args.timeout,
                )
            )
            return print_verify(report)
        modules = args.modules or list(MODULES)
        ran = asyncio.run(
            sql_apply(
                url,
                modules,
                args.backend,
                args.scheduler,
                timeout_seconds=args.timeout,
                contract=args.contract,
            )
        )
        if not ran:
            print("up to date")
            return 0
        print(f"applied: {', '.join(dict.fromkeys(m.module for m in ran))}")
        for migration in ran:
            print(f"  {migration.module} {migration.label}")
        _rest_api_note([m.module for m in ran])
        return 0
    if args.command == "keys":
        from ..keyring import Keyring

        try:
            print(Keyring.new_entry(args.kid))
        except ValueError as exc:
            print(f"drainpipe: {exc}", file=sys.stderr)
            return 2
        return 0
    if args.command == "serve":
        from ..serve import serve_command

        return serve_command(args)
    if args.command == "bench":
        from .bench import bench_command

        return bench_command(args)
    if args.command == "work":
        from ..serve import work_command

        return work_command(args)
    if args.command in ("jobs", "inbox"):
        from .ops import run

        print(asyncio.run(run(args)))
        return 0
    from ..dev import run as dev_run

    return dev_run.main(
        database_url=args.database_url or os.environ.get("DATABASE_URL"),
        functions=args.functions,
        host=args.host,
        port=args.port,
        every=args.every,
        backend=args.backend,
        pgdata=args.pgdata,
    )
