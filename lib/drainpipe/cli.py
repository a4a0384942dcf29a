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
drainpipe --version

Exit status: 0 done, 1 failed (one line on stderr says why), 2 a usage error.
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

from .cli_ops import DEFAULT_TIMEOUT
from .errors import DrainpipeError
from .sqlmodules import MODULES, Backend, Migration, Scheduler, SchemaReport

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


def _add_contract(parser: argparse.ArgumentParser, text: str) -> None:
    parser.add_argument("--contract", action="store_true", help=text)


def build_parser() -> argparse.ArgumentParser:
    from . import cli_ops

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
        help="embedded Postgres data folder (default ~/.cache/drainpipe/dev-pgdata)",
    )
    cli_ops.add_commands(commands)

    from . import serve

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


def migration_names(out: Path, stems: Sequence[str], now: float | None = None) -> list[str]:
    """File names for migrations ``stems`` (``jobs`` or ``jobs_0002_v1_functions``) that sort
    after the folder's existing migrations: timestamps when the folder already uses them
    (Supabase), else the next numbers."""
    existing = [path.name for path in out.glob("*.sql")] if out.is_dir() else []
    stems = [stem.replace("-", "_") for stem in stems]
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


# A file `sql add` wrote: <number or stamp>_drainpipe_<module>[_<NNNN>_<name>].sql; release 0
# wrote one file per module (no migration number), which holds migration 0001.
_WRITTEN = re.compile(
    r"^\d+_drainpipe_(jobs|idempotency|webhook_inbox)(?:_(\d{4})_[a-z0-9_]+)?\.sql$"
)


def written_migrations(out: Path) -> set[tuple[str, int]]:
    """(module, migration number) of the drainpipe migrations already in folder ``out``."""
    found: set[tuple[str, int]] = set()
    for path in out.glob("*.sql") if out.is_dir() else ():
        match = _WRITTEN.match(path.name)
        if match:
            found.add((match.group(1).replace("_", "-"), int(match.group(2) or 1)))
    return found


def sql_add(
    modules: Sequence[str], out: Path, backend: str, scheduler: str, contract: bool = False
) -> list[Path]:
    """Write one file per migration of each module (in the given order) that the folder
    does not hold yet; the paths written. Each file records itself in
    drainpipe.schema_migrations, so ``drainpipe sql verify`` and ``install()`` see it."""
    from .sqlmodules import check_options, migrations, read_sql, record_sql

    check_options(backend, scheduler)
    already = written_migrations(out)
    texts = []
    for module in dict.fromkeys(modules):
        for migration in migrations(module):
            if (module, migration.version) in already or (migration.contract and not contract):
                continue
            parts = [
                f"-- drainpipe {module} migration {migration.label}"
                + (f" (backend={backend}, scheduler={scheduler})" if module == "jobs" else ""),
                read_sql("common.sql"),
                read_sql("schema_migrations.sql"),
                migration.text(backend, scheduler),
                read_sql("privileges.sql"),
                record_sql(migration, backend, scheduler),
            ]
            if module == "jobs" and backend == "pgmq" and migration.version == 1:
                parts.insert(0, pgmq_prelude())
            texts.append((f"{module}_{migration.label}", "\n".join(parts)))
    out.mkdir(parents=True, exist_ok=True)
    names = migration_names(out, [stem for stem, _ in texts])
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
    database_url: str,
    modules: Sequence[str],
    backend: Backend,
    scheduler: Scheduler,
    timeout_seconds: float = DEFAULT_TIMEOUT,
    contract: bool = False,
) -> list[Migration]:
    """Apply the pending migrations; the migrations applied."""
    from .sqlmodules import apply_migrations

    conn = await connect(database_url, timeout_seconds=timeout_seconds)
    try:
        return await apply_migrations(
            conn, modules, backend=backend, scheduler=scheduler, contract=contract
        )
    finally:
        await conn.close()


async def sql_verify(
    database_url: str,
    modules: Sequence[str] | None,
    backend: Backend | None,
    scheduler: Scheduler | None,
    contract: bool = False,
    timeout_seconds: float = DEFAULT_TIMEOUT,
) -> SchemaReport:
    from .sqlmodules import verify

    conn = await connect(database_url, timeout_seconds=timeout_seconds)
    try:
        return await verify(conn, modules, backend=backend, scheduler=scheduler, contract=contract)
    finally:
        await conn.close()


async def connect(database_url: str, *, timeout_seconds: float = DEFAULT_TIMEOUT) -> Any:
    """One autocommit connection, failing at once (no pool retrying) when unreachable.

    ``timeout_seconds`` bounds the connect (libpq's ``connect_timeout``, whole seconds, at least
    2, and a client-side guard for servers that accept but never answer), and each
    statement and lock wait on the connection (``statement_timeout``, ``lock_timeout``).
    """
    import psycopg

    from .db import connect_error, connect_options

    options = connect_options(database_url, timeout_seconds)
    # libpq's timeout is per address tried; the guard also stops a DSN's connect_timeout=0
    # (wait forever) from hanging a command that was given a timeout
    own = options["connect_timeout"]
    guard = (own if own > 0 else timeout_seconds) + 1.0
    try:
        async with asyncio.timeout(guard):
            conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True, **options)
    except TimeoutError:
        raise DrainpipeError(
            "network",
            f"the database did not answer within {guard:g} s",
            code="CONNECT_TIMEOUT",
        ) from None
    except psycopg.Error as exc:
        raise connect_error(exc) from exc
    milliseconds = max(1, round(timeout_seconds * 1000))
    try:
        await conn.execute(
            f"SET statement_timeout = {milliseconds}; SET lock_timeout = {milliseconds}"
        )
    except BaseException:
        await conn.close()
        raise
    return conn


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; the exit status (0 ok, 1 failed, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # a usage error exits 2 with argparse's message
    from .cli_ops import UsageError

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


def _run(args: argparse.Namespace) -> int:
    if args.command == "sql" and args.sql_command == "add":
        for path in sql_add(
            args.modules, Path(args.out), args.backend, args.scheduler, args.contract
        ):
            print(path)
        return 0
    if args.command == "sql" and args.sql_command in ("apply", "verify"):
        from .cli_ops import database_url
        from .sqlmodules import MODULES

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
            return _print_verify(report)
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
        return 0
    if args.command == "serve":
        from .serve import serve_command

        return serve_command(args)
    if args.command == "work":
        from .serve import work_command

        return work_command(args)
    if args.command in ("jobs", "inbox"):
        from .cli_ops import run

        print(asyncio.run(run(args)))
        return 0
    from .dev import run as dev_run

    return dev_run.main(
        database_url=args.database_url or os.environ.get("DATABASE_URL"),
        functions=args.functions,
        host=args.host,
        port=args.port,
        every=args.every,
        backend=args.backend,
        pgdata=args.pgdata,
    )


def _print_verify(report: SchemaReport) -> int:
    """Print what ``drainpipe sql verify`` found; its exit status (0: up to date)."""
    options = f"backend={report.backend}, scheduler={report.scheduler}"
    if report.ok:
        print(f"up to date ({options})")
        return 0
    for status in report.problems:
        print(f"{status.state}: {status.label}")
    print(
        f"{len(report.problems)} migration(s) not as shipped ({options}): run drainpipe sql apply",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
