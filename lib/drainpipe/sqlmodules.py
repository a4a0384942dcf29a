"""The SQL modules: render them from ``sql/*.sql`` and apply them idempotently.

The ``.sql`` files are the truth. They ship inside the wheel (``drainpipe/sql``); in a
source checkout they are read from the repository's top-level ``sql/`` folder.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal

from .db import as_database

Backend = Literal["pgmq", "table"]
Scheduler = Literal["drain", "pg_cron"]

MODULES: tuple[str, ...] = ("jobs", "idempotency", "webhook-inbox")
_MODULE_FILES: dict[str, tuple[str, ...]] = {
    "idempotency": ("idempotency.sql",),
    "webhook-inbox": ("webhook_inbox.sql",),
}
# Serialises installs across processes: CREATE OR REPLACE FUNCTION racing itself fails with
# "tuple concurrently updated".
_INSTALL_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('drainpipe.install'))"


@cache
def sql_dir() -> Path:
    packaged = Path(__file__).with_name("sql")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "sql"


def read_sql(name: str) -> str:
    return (sql_dir() / name).read_text(encoding="utf-8")


def check_options(backend: str, scheduler: str) -> None:
    if backend not in ("pgmq", "table"):
        raise ValueError(f'backend must be "pgmq" or "table", not "{backend}"')
    if scheduler not in ("drain", "pg_cron"):
        raise ValueError(f'scheduler must be "drain" or "pg_cron", not "{scheduler}"')


def module_files(module: str, *, backend: str = "pgmq", scheduler: str = "drain") -> list[str]:
    check_options(backend, scheduler)
    if module == "jobs":
        files = ["jobs_common.sql", f"jobs_{backend}.sql", "jobs_tail.sql"]
        files += ["schedules_common.sql", f"schedules_{scheduler}.sql"]
    elif module in _MODULE_FILES:
        files = list(_MODULE_FILES[module])
    else:
        raise ValueError(f'Unknown SQL module "{module}". Modules: {", ".join(MODULES)}')
    return ["common.sql", *files, "privileges.sql"]


def render_module(module: str, *, backend: str = "pgmq", scheduler: str = "drain") -> str:
    """The SQL text of one module with its options, as applied by :func:`install`."""
    parts = [
        f"-- drainpipe module {module}"
        + (f" (backend={backend}, scheduler={scheduler})" if module == "jobs" else "")
    ]
    parts += [read_sql(name) for name in module_files(module, backend=backend, scheduler=scheduler)]
    return "\n".join(parts)


def pgmq_sql_path() -> Path:
    """pgmq's SQL-only distribution, shipped by the ``pgmq`` package (found without importing it)."""
    spec = importlib.util.find_spec("pgmq")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The pgmq package is not installed: pip install pgmq")
    return Path(next(iter(spec.submodule_search_locations))) / "sql" / "pgmq.sql"


def _normalise_modules(modules: Iterable[str] | str) -> list[str]:
    names = [modules] if isinstance(modules, str) else list(modules)
    for name in names:
        if name not in MODULES:
            raise ValueError(f'Unknown SQL module "{name}". Modules: {", ".join(MODULES)}')
    return names


async def install(
    db: Any,
    modules: Sequence[str] | str = ("jobs",),
    *,
    backend: Backend = "pgmq",
    scheduler: Scheduler = "drain",
    force: bool = False,
) -> list[str]:
    """Apply SQL modules to ``db``; returns the modules that were (re)applied.

    Idempotent and safe to run from many processes at once (an advisory lock serialises
    them; a module whose rendered SQL is unchanged is skipped). On the pgmq backend without
    the pgmq extension, pgmq's SQL-only distribution is installed first, once.
    """
    names = _normalise_modules(modules)
    check_options(backend, scheduler)
    database = as_database(db)
    applied: list[str] = []
    try:
        async with database.connection() as conn, conn.transaction():
            await conn.execute(_INSTALL_LOCK_SQL)
            if "jobs" in names and backend == "pgmq":
                await _ensure_pgmq(conn)
            has_registry = (
                await (
                    await conn.execute("SELECT to_regclass('drainpipe.modules') IS NOT NULL")
                ).fetchone()
                or (False,)
            )[0]
            for name in names:
                text = render_module(name, backend=backend, scheduler=scheduler)
                checksum = hashlib.sha256(text.encode()).hexdigest()
                if has_registry and not force:
                    row = await (
                        await conn.execute(
                            "SELECT checksum FROM drainpipe.modules WHERE name = %s", (name,)
                        )
                    ).fetchone()
                    if row is not None and row[0] == checksum:
                        continue
                await conn.execute(text.encode())
                has_registry = True
                options = {"backend": backend, "scheduler": scheduler} if name == "jobs" else {}
                from psycopg.types.json import Jsonb

                await conn.execute(
                    """INSERT INTO drainpipe.modules (name, options, checksum) VALUES (%s, %s, %s)
                       ON CONFLICT (name) DO UPDATE
                       SET options = excluded.options, checksum = excluded.checksum, installed_at = now()""",
                    (name, Jsonb(options), checksum),
                )
                applied.append(name)
    finally:
        if database is not db:
            # a DSN: close the pool opened for this call (a pool or connection you gave
            # stays open)
            await database.close()
    return applied


async def _ensure_pgmq(conn: Any) -> None:
    row = await (
        await conn.execute(
            "SELECT to_regclass('pgmq.meta') IS NOT NULL,"
            " EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pgmq')"
        )
    ).fetchone()
    has_meta, extension_available = row
    if has_meta:
        return
    if extension_available:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pgmq")
    else:
        await conn.execute(pgmq_sql_path().read_bytes())
