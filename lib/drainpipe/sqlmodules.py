"""The SQL modules as numbered migrations: find them, apply them, verify them.

The ``.sql`` files are the truth. They ship inside the wheel (``drainpipe/sql``); in a
source checkout they are read from the repository's top-level ``sql/`` folder.

Layout (see docs/sql.md and sql/README.md)::

    sql/common.sql              the schema and drainpipe.modules
    sql/schema_migrations.sql   drainpipe.schema_migrations, the record of applied migrations
    sql/privileges.sql          run after every install that applied something
    sql/migrations/<module>/0001_baseline[.sql]        the module's schema when it was squashed
    sql/migrations/<module>/NNNN_<name>.sql            a later migration in one file, or
    sql/migrations/<module>/NNNN_<name>/<part>.sql     one migration in parts, name order

A part named ``<stem>.<option>.sql`` (``pgmq``, ``table``, ``drain``, ``pg_cron``) belongs to
that backend or scheduler only. A migration whose name starts with ``contract_`` removes
what the previous release's code calls; it is applied only when asked (``contract=True``).
Every migration is re-runnable: a changed option (another backend or scheduler) or
``force=True`` applies it again, and so may a migration tool running a written file twice.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from .db import as_database

Backend = Literal["pgmq", "table"]
Scheduler = Literal["drain", "pg_cron"]

# Install order. The agent inbox's fan-out trigger sits on the webhook inbox's table, so
# agent-inbox needs webhook-inbox (installing it installs both); rest-api's functions call
# the jobs module's when called, not when made, so it needs nothing to install.
MODULES: tuple[str, ...] = ("jobs", "idempotency", "webhook-inbox", "agent-inbox", "rest-api")
REQUIRES: Mapping[str, tuple[str, ...]] = {"agent-inbox": ("webhook-inbox",)}
_OPTION_TAGS = frozenset({"pgmq", "table", "drain", "pg_cron"})
_MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+?)(?:\.sql)?$")
_PART_NAME = re.compile(r"^[0-9a-z_]+(?:\.([a-z_]+))?\.sql$")
# Serialises installs across processes: CREATE OR REPLACE FUNCTION racing itself fails with
# "tuple concurrently updated".
_INSTALL_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('drainpipe.install'))"
_RECORD_SQL = """INSERT INTO drainpipe.schema_migrations (module, version, name, checksum)
VALUES (%s, %s, %s, %s)
ON CONFLICT (module, version) DO UPDATE
SET name = excluded.name, checksum = excluded.checksum, applied_at = clock_timestamp()"""
_MODULE_SQL = """INSERT INTO drainpipe.modules (name, options, checksum) VALUES (%s, %s, %s)
ON CONFLICT (name) DO UPDATE
SET options = excluded.options, checksum = excluded.checksum, installed_at = now()"""


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


def _check_module(module: str) -> None:
    if module not in MODULES:
        raise ValueError(f'Unknown SQL module "{module}". Modules: {", ".join(MODULES)}')


@dataclass(frozen=True)
class Migration:
    """One numbered migration of one module (all its option variants)."""

    module: str
    version: int
    name: str
    parts: tuple[Path, ...]

    @property
    def label(self) -> str:
        """``0002_v1_functions``: the number and name, as recorded and printed."""
        return f"{self.version:04d}_{self.name}"

    @property
    def contract(self) -> bool:
        """Drops what the previous release calls: applied only when asked."""
        return self.name.startswith("contract_")

    def selected_parts(self, backend: str, scheduler: str) -> list[Path]:
        chosen = []
        for part in self.parts:
            match = _PART_NAME.match(part.name)
            tag = match.group(1) if match else None
            if tag is None or tag not in _OPTION_TAGS or tag in (backend, scheduler):
                chosen.append(part)
        return chosen

    def text(self, backend: str = "pgmq", scheduler: str = "drain") -> str:
        """The SQL this migration runs with these options."""
        parts = self.selected_parts(backend, scheduler)
        return "\n".join(part.read_text(encoding="utf-8") for part in parts)

    def checksum(self, backend: str = "pgmq", scheduler: str = "drain") -> str:
        return hashlib.sha256(self.text(backend, scheduler).encode()).hexdigest()


def _module_folder(module: str) -> Path:
    return sql_dir() / "migrations" / module.replace("-", "_")


@cache
def migrations(module: str) -> tuple[Migration, ...]:
    """The migrations of ``module`` in order (numbered 1, 2, 3, ... without gaps)."""
    _check_module(module)
    folder = _module_folder(module)
    if not folder.is_dir():
        raise RuntimeError(f"The SQL of module {module} is missing: no {folder}")
    found: list[Migration] = []
    for entry in sorted(folder.iterdir()):
        match = _MIGRATION_NAME.match(entry.name)
        if match is None or (entry.is_file() and entry.suffix != ".sql"):
            continue
        parts = tuple(sorted(entry.glob("*.sql"))) if entry.is_dir() else (entry,)
        found.append(Migration(module, int(match.group(1)), match.group(2), parts))
    numbers = [migration.version for migration in found]
    if numbers != list(range(1, len(found) + 1)):
        # a packaging or authoring mistake: fail loudly rather than apply out of order
        raise RuntimeError(f"The migrations of {module} are not numbered 1..n: {numbers}")
    return tuple(found)


def module_files(module: str, *, backend: str = "pgmq", scheduler: str = "drain") -> list[str]:
    """The files (relative to the sql folder) a fresh install of ``module`` runs, in order."""
    check_options(backend, scheduler)
    _check_module(module)
    files = ["common.sql", "schema_migrations.sql"]
    for migration in migrations(module):
        if not migration.contract:
            for part in migration.selected_parts(backend, scheduler):
                files.append(part.relative_to(sql_dir()).as_posix())
    return [*files, "privileges.sql"]


def _module_header(module: str, backend: str, scheduler: str) -> str:
    return f"-- drainpipe module {module}" + (
        f" (backend={backend}, scheduler={scheduler})" if module == "jobs" else ""
    )


def module_checksum(module: str, backend: str = "pgmq", scheduler: str = "drain") -> str:
    """The SHA-256 of the module's whole install (every migration with these options), as
    recorded in drainpipe.modules: one value says which SQL a database has."""
    return hashlib.sha256(
        render_module(module, backend=backend, scheduler=scheduler).encode()
    ).hexdigest()


def render_module(
    module: str, *, backend: str = "pgmq", scheduler: str = "drain", contract: bool = False
) -> str:
    """The SQL text of a fresh install of one module with its options (every migration,
    contract ones only with ``contract=True``), without the migration records."""
    check_options(backend, scheduler)
    parts = [_module_header(module, backend, scheduler), read_sql("common.sql")]
    parts.append(read_sql("schema_migrations.sql"))
    for migration in migrations(module):
        if contract or not migration.contract:
            parts.append(migration.text(backend, scheduler))
    parts.append(read_sql("privileges.sql"))
    return "\n".join(parts)


def pgmq_sql_path() -> Path:
    """pgmq's SQL-only distribution, shipped by the ``pgmq`` package (found without importing it)."""
    spec = importlib.util.find_spec("pgmq")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The pgmq package is not installed: pip install pgmq")
    return Path(next(iter(spec.submodule_search_locations))) / "sql" / "pgmq.sql"


def _normalise_modules(modules: Iterable[str] | str) -> list[str]:
    """The modules asked for and those they need (REQUIRES), in install order."""
    names = [modules] if isinstance(modules, str) else list(modules)
    for name in names:
        _check_module(name)
    wanted = set(names)
    for name in names:
        wanted.update(REQUIRES.get(name, ()))
    return [module for module in MODULES if module in wanted]


@dataclass(frozen=True)
class MigrationStatus:
    """Where one migration stands in a database: ``applied``, ``pending`` (not applied),
    ``changed`` (applied, but its text with these options is not what was applied) or
    ``deferred`` (a contract migration not applied, and not asked for)."""

    module: str
    version: int
    name: str
    state: Literal["applied", "pending", "changed", "deferred"]

    @property
    def label(self) -> str:
        return f"{self.module} {self.version:04d}_{self.name}"


@dataclass(frozen=True)
class SchemaReport:
    """What :func:`verify` found; ``ok`` when nothing is pending or changed."""

    migrations: tuple[MigrationStatus, ...]
    backend: str
    scheduler: str

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def problems(self) -> list[MigrationStatus]:
        return [m for m in self.migrations if m.state in ("pending", "changed")]


def _statuses(
    module: str,
    applied: Mapping[int, str],
    backend: str,
    scheduler: str,
    contract: bool,
) -> list[MigrationStatus]:
    states: list[MigrationStatus] = []
    for migration in migrations(module):
        recorded = applied.get(migration.version)
        state: Literal["applied", "pending", "changed", "deferred"]
        if recorded is None:
            state = "pending" if contract or not migration.contract else "deferred"
        elif recorded == migration.checksum(backend, scheduler):
            state = "applied"
        else:
            state = "changed"
        states.append(MigrationStatus(module, migration.version, migration.name, state))
    return states


def _to_run(
    module: str,
    applied: Mapping[int, str],
    backend: str,
    scheduler: str,
    *,
    contract: bool,
    force: bool,
) -> list[Migration]:
    """From the first pending or changed migration on, every migration to run: a re-run of
    an earlier one (a changed baseline recreating its functions) is followed by the later applied
    ones again (a contract migration dropping them again)."""
    statuses = _statuses(module, applied, backend, scheduler, contract)
    first = next(
        (i for i, s in enumerate(statuses) if force or s.state in ("pending", "changed")), None
    )
    if first is None:
        return []
    return [
        migration
        for migration, status in zip(migrations(module)[first:], statuses[first:], strict=True)
        if status.state != "deferred"
    ]


async def install(
    db: Any,
    modules: Sequence[str] | str = ("jobs",),
    *,
    backend: Backend = "pgmq",
    scheduler: Scheduler = "drain",
    force: bool = False,
    contract: bool = False,
) -> list[str]:
    """Apply SQL modules to ``db``; returns the modules that were (re)applied.

    Runs each module's pending migrations in order (and re-runs those whose text changed,
    e.g. for another backend), recording them in ``drainpipe.schema_migrations``. Idempotent
    and safe to run from many processes at once (an advisory lock serialises them; a module
    with nothing pending costs one query). ``contract=True`` also applies the migrations
    that drop what the previous release calls: only once none of its code runs any more.
    On the pgmq backend without the pgmq extension, pgmq's SQL-only distribution is
    installed first, once.
    """
    applied = await apply_migrations(
        db, modules, backend=backend, scheduler=scheduler, force=force, contract=contract
    )
    return list(dict.fromkeys(migration.module for migration in applied))


async def apply_migrations(
    db: Any,
    modules: Sequence[str] | str = ("jobs",),
    *,
    backend: Backend = "pgmq",
    scheduler: Scheduler = "drain",
    force: bool = False,
    contract: bool = False,
) -> list[Migration]:
    """:func:`install`, returning the migrations it ran (in the order it ran them)."""
    names = _normalise_modules(modules)
    check_options(backend, scheduler)
    database = as_database(db)
    ran: list[Migration] = []
    try:
        async with database.connection() as conn, conn.transaction():
            await conn.execute(_INSTALL_LOCK_SQL)
            if "jobs" in names and backend == "pgmq":
                await _ensure_pgmq(conn)
            recorded = await _recorded(conn, names)
            if recorded is None:
                await conn.execute(
                    (read_sql("common.sql") + "\n" + read_sql("schema_migrations.sql")).encode()
                )
                recorded = {}
            from psycopg.types.json import Jsonb

            for name in names:
                plan = _to_run(
                    name,
                    recorded.get(name, {}),
                    backend,
                    scheduler,
                    contract=contract,
                    force=force,
                )
                for migration in plan:
                    await conn.execute(migration.text(backend, scheduler).encode())
                    await conn.execute(
                        _RECORD_SQL,
                        (
                            name,
                            migration.version,
                            migration.name,
                            migration.checksum(backend, scheduler),
                        ),
                    )
                    ran.append(migration)
                if plan:
                    options = {"backend": backend, "scheduler": scheduler} if name == "jobs" else {}
                    await conn.execute(
                        _MODULE_SQL,
                        (name, Jsonb(options), module_checksum(name, backend, scheduler)),
                    )
            if ran:
                await conn.execute(read_sql("privileges.sql").encode())
    finally:
        if database is not db:
            # a DSN: close the pool opened for this call (a pool or connection you gave
            # stays open)
            await database.close()
    return ran


async def _rows(conn: Any, sql: str, params: Sequence[Any] | None = None) -> list[Any]:
    """The statement's rows as tuples, whatever rows the caller's connection makes."""
    from psycopg.rows import tuple_row

    cur = conn.cursor(row_factory=tuple_row)
    await cur.execute(sql, params)
    return list(await cur.fetchall())


async def _recorded(conn: Any, modules: Sequence[str]) -> dict[str, dict[int, str]] | None:
    """Applied migrations per module (version → checksum); None without the registry."""
    [row] = await _rows(conn, "SELECT to_regclass('drainpipe.schema_migrations') IS NOT NULL")
    if not row[0]:
        return None
    rows = await _rows(
        conn,
        "SELECT module, version, checksum FROM drainpipe.schema_migrations WHERE module = ANY(%s)",
        (list(modules),),
    )
    recorded: dict[str, dict[int, str]] = {}
    for module, version, checksum in rows:
        recorded.setdefault(module, {})[version] = checksum
    return recorded


async def verify(
    db: Any,
    modules: Sequence[str] | str | None = None,
    *,
    backend: Backend | None = None,
    scheduler: Scheduler | None = None,
    contract: bool = False,
) -> SchemaReport:
    """Compare the database's applied migrations with the shipped ones; changes nothing.

    ``modules`` defaults to the modules the database has (every module when it has none);
    ``backend`` and ``scheduler`` default to the jobs module's installed options. A
    contract migration not applied counts only with ``contract=True``.
    """
    database = as_database(db)
    try:
        async with database.connection() as conn:
            installed: dict[str, dict[str, Any]] = {}
            [row] = await _rows(conn, "SELECT to_regclass('drainpipe.modules') IS NOT NULL")
            if row[0]:
                rows = await _rows(conn, "SELECT name, options FROM drainpipe.modules")
                installed = {name: dict(options or {}) for name, options in rows}
            if modules is None:
                names = [m for m in MODULES if m in installed] or list(MODULES)
            else:
                names = _normalise_modules(modules)
            recorded = await _recorded(conn, names) or {}
    finally:
        if database is not db:
            await database.close()
    jobs_options = installed.get("jobs", {})
    chosen_backend = backend or str(jobs_options.get("backend", "pgmq"))
    chosen_scheduler = scheduler or str(jobs_options.get("scheduler", "drain"))
    check_options(chosen_backend, chosen_scheduler)
    statuses: list[MigrationStatus] = []
    for name in names:
        statuses += _statuses(
            name, recorded.get(name, {}), chosen_backend, chosen_scheduler, contract
        )
    return SchemaReport(tuple(statuses), chosen_backend, chosen_scheduler)


def record_sql(migration: Migration, backend: str, scheduler: str) -> str:
    """SQL that records ``migration`` as applied (the end of a written migration file)."""
    checksum = migration.checksum(backend, scheduler)
    options = {"backend": backend, "scheduler": scheduler} if migration.module == "jobs" else {}
    module_options = json.dumps(options)
    module_sum = module_checksum(migration.module, backend, scheduler)
    return (
        "INSERT INTO drainpipe.schema_migrations (module, version, name, checksum)\n"
        f"VALUES ('{migration.module}', {migration.version}, '{migration.name}', '{checksum}')\n"
        "ON CONFLICT (module, version) DO UPDATE\n"
        "SET name = excluded.name, checksum = excluded.checksum, applied_at = clock_timestamp();\n"
        "INSERT INTO drainpipe.modules (name, options, checksum)\n"
        f"VALUES ('{migration.module}', '{module_options}', '{module_sum}')\n"
        "ON CONFLICT (name) DO UPDATE\n"
        "SET options = excluded.options, checksum = excluded.checksum, installed_at = now();\n"
    )


async def _ensure_pgmq(conn: Any) -> None:
    [(has_meta, extension_available)] = await _rows(
        conn,
        "SELECT to_regclass('pgmq.meta') IS NOT NULL,"
        " EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pgmq')",
    )
    if has_meta:
        return
    if extension_available:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pgmq")
    else:
        await conn.execute(pgmq_sql_path().read_bytes())
