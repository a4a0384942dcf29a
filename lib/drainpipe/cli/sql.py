"""``drainpipe sql add|apply|verify``: migration files for a folder, and applying or
checking the migrations of a database."""

from __future__ import annotations

import calendar
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..sqlmodules import Backend, Migration, Scheduler, SchemaReport

# Supabase names migrations <14-digit UTC timestamp>_<name>.sql; others number them 0001_...
from . import connect
from .ops import DEFAULT_TIMEOUT

_TIMESTAMPED = re.compile(r"^(\d{14})_")
_NUMBERED = re.compile(r"^(\d+)_")


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


# A file `sql add` wrote: <number or stamp>_drainpipe_<module>[_<NNNN>_<name>].sql; a file
# without a migration number holds the module's whole migration 0001 (the baseline).
_WRITTEN = re.compile(
    r"^\d+_drainpipe_(jobs|idempotency|webhook_inbox|agent_inbox|rest_api)(?:_(\d{4})_[a-z0-9_]+)?\.sql$"
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
    from ..sqlmodules import check_options, migrations, read_sql, record_sql

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
    from ..sqlmodules import pgmq_sql_path

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
    from ..sqlmodules import apply_migrations

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
    from ..sqlmodules import verify

    conn = await connect(database_url, timeout_seconds=timeout_seconds)
    try:
        return await verify(conn, modules, backend=backend, scheduler=scheduler, contract=contract)
    finally:
        await conn.close()


def print_verify(report: SchemaReport) -> int:
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
