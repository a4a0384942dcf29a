"""The ``drainpipe`` command.

drainpipe sql add MODULE... [--out DIR] [--backend pgmq|table] [--scheduler drain|pg_cron]
drainpipe sql apply [--database-url URL] [--modules MODULE...] [--backend] [--scheduler]
drainpipe dev [--port N] [--every SECONDS] [--database-url URL] [--functions DIR]
drainpipe serve [--functions DIR] [--host H] [--port N] [--graceful SECONDS]
drainpipe work [QUEUE...] --app module:attr [--concurrency N] [--batch N] [--lease S] [--grace S]
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import math
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .sqlmodules import MODULES, Backend, Scheduler

# Supabase names migrations <14-digit UTC timestamp>_<name>.sql; others number them 0001_...
_TIMESTAMPED = re.compile(r"^(\d{14})_")
_NUMBERED = re.compile(r"^(\d+)_")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("a port is 0-65535 (0: any free port)")
    return value


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="drainpipe", description="Background jobs, schedules and webhooks on Postgres."
    )
    commands = parser.add_subparsers(dest="command", required=True)

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
    apply = sql_commands.add_parser("apply", help="apply the modules to a database now")
    apply.add_argument("--database-url", default=None, help="Postgres URL (default $DATABASE_URL)")
    apply.add_argument(
        "--modules",
        nargs="+",
        choices=MODULES,
        metavar="MODULE",
        default=None,
        help="modules to apply (default: all)",
    )
    _add_options(apply)

    dev = commands.add_parser("dev", help="run the functions and the drain loop locally")
    dev.add_argument("--port", type=_port, default=3000, help="HTTP port (default 3000, 0: any)")
    dev.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    dev.add_argument(
        "--every", type=_seconds, default=5.0, help="seconds between drain calls (default 5)"
    )
    dev.add_argument(
        "--database-url",
        default=None,
        help="Postgres URL (default $DATABASE_URL, else an embedded Postgres)",
    )
    dev.add_argument(
        "--functions", default="functions", help="functions folder (default ./functions)"
    )
    dev.add_argument("--backend", choices=("pgmq", "table"), default="pgmq")
    dev.add_argument(
        "--pgdata",
        default=None,
        help="embedded Postgres data folder (default ~/.cache/drainpipe/dev-pgdata)",
    )
    from . import serve

    serve.add_serve_arguments(commands.add_parser("serve", help="serve functions/ (a container)"))
    serve.add_work_arguments(commands.add_parser("work", help="work queues until SIGTERM"))
    return parser


def migration_names(out: Path, modules: Sequence[str], now: float | None = None) -> list[str]:
    """File names for ``modules`` that sort after the folder's existing migrations:
    timestamps when the folder already uses them (Supabase), else the next numbers."""
    existing = [path.name for path in out.glob("*.sql")] if out.is_dir() else []
    stems = [module.replace("-", "_") for module in modules]
    if any(_TIMESTAMPED.match(name) for name in existing):
        latest = max(int(m.group(1)) for name in existing if (m := _TIMESTAMPED.match(name)))
        stamp = int(time.strftime("%Y%m%d%H%M%S", time.gmtime(now)))
        names = []
        for stem in stems:
            stamp = _next_stamp(max(stamp, latest))
            latest = stamp
            names.append(f"{stamp}_drainpipe_{stem}.sql")
        return names
    numbers = [int(m.group(1)) for name in existing if (m := _NUMBERED.match(name))]
    first = max(numbers, default=0) + 1
    return [f"{first + i:04d}_drainpipe_{stem}.sql" for i, stem in enumerate(stems)]


def _next_stamp(stamp: int) -> int:
    """The timestamp one second after ``stamp`` (YYYYmmddHHMMSS)."""
    seconds = calendar.timegm(time.strptime(str(stamp), "%Y%m%d%H%M%S")) + 1
    return int(time.strftime("%Y%m%d%H%M%S", time.gmtime(seconds)))


def sql_add(modules: Sequence[str], out: Path, backend: str, scheduler: str) -> list[Path]:
    """Write one migration file per module (in the given order); the paths written."""
    from .sqlmodules import render_module

    texts = []
    for module in dict.fromkeys(modules):
        text = render_module(module, backend=backend, scheduler=scheduler)
        if module == "jobs" and backend == "pgmq":
            text = pgmq_prelude() + "\n" + text
        texts.append((module, text))
    out.mkdir(parents=True, exist_ok=True)
    names = migration_names(out, [module for module, _ in texts])
    written = []
    for (_, text), name in zip(texts, names, strict=True):
        path = out / name
        path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        written.append(path)
    return written


_PGMQ_TAG = "$drainpipe_pgmq_sql$"


def pgmq_prelude() -> str:
    """SQL that provides pgmq the way :func:`drainpipe.install` does: the extension where
    the server has it (Supabase), else pgmq's SQL-only distribution; nothing when pgmq is
    already there. A bare ``CREATE EXTENSION pgmq`` would fail on a plain Postgres."""
    from .sqlmodules import pgmq_sql_path

    distribution = pgmq_sql_path().read_text(encoding="utf-8")
    if _PGMQ_TAG in distribution:  # cannot happen with pgmq's files; never quote it wrongly
        raise RuntimeError(f"pgmq's SQL contains {_PGMQ_TAG}; cannot embed it")
    return (
        "-- pgmq: the extension where the server offers it, else its SQL-only distribution\n"
        "-- (the pgmq package's sql/pgmq.sql), once: it is not safe to run twice.\n"
        "DO $drainpipe_pgmq$\n"
        "BEGIN\n"
        "    IF to_regclass('pgmq.meta') IS NOT NULL THEN\n"
        "        RETURN;\n"
        "    END IF;\n"
        "    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pgmq') THEN\n"
        "        CREATE EXTENSION IF NOT EXISTS pgmq;\n"
        "    ELSE\n"
        f"        EXECUTE {_PGMQ_TAG}\n{distribution}\n{_PGMQ_TAG};\n"
        "    END IF;\n"
        "END\n"
        "$drainpipe_pgmq$;\n"
    )


async def sql_apply(
    database_url: str, modules: Sequence[str], backend: Backend, scheduler: Scheduler
) -> list[str]:
    from .sqlmodules import install

    conn = await connect(database_url)
    try:
        return await install(conn, modules, backend=backend, scheduler=scheduler)
    finally:
        await conn.close()


async def connect(database_url: str) -> Any:
    """One autocommit connection, failing at once (no pool retrying) when unreachable."""
    import psycopg

    from .db import translate_error

    try:
        return await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    except psycopg.Error as exc:
        raise translate_error(exc) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; the exit status (0 ok, 1 failed, 2 usage)."""
    args = build_parser().parse_args(argv)
    from .errors import DrainpipeError

    try:
        if args.command == "sql" and args.sql_command == "add":
            for path in sql_add(args.modules, Path(args.out), args.backend, args.scheduler):
                print(path)
            return 0
        if args.command == "sql" and args.sql_command == "apply":
            url = args.database_url or os.environ.get("DATABASE_URL")
            if not url:
                print(
                    "drainpipe sql apply: pass --database-url or set DATABASE_URL", file=sys.stderr
                )
                return 2
            from .sqlmodules import MODULES

            modules = args.modules or list(MODULES)
            applied = asyncio.run(sql_apply(url, modules, args.backend, args.scheduler))
            print(f"applied: {', '.join(applied)}" if applied else "up to date")
            return 0
        if args.command == "serve":
            from .serve import serve_command

            return serve_command(args)
        if args.command == "work":
            from .serve import work_command

            return work_command(args)
        from . import devserver

        return devserver.main(
            database_url=args.database_url or os.environ.get("DATABASE_URL"),
            functions=args.functions,
            host=args.host,
            port=args.port,
            every=args.every,
            backend=args.backend,
            pgdata=args.pgdata,
        )
    except (DrainpipeError, OSError, ValueError) as exc:
        print(f"drainpipe: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
