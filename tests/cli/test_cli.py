"""`drainpipe sql add` / `drainpipe sql apply` against real databases."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe.cli import main
from drainpipe.cli.sql import migration_names
from drainpipe.sqlmodules import MODULES, migrations
from tests.conftest import drop_database, with_database


@pytest.fixture
def empty_db_url(server_dsn: str) -> Iterator[str]:
    """A database with nothing of drainpipe in it."""
    name = "t_cli_" + uuid.uuid4().hex[:12]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield with_database(server_dsn, name)
    drop_database(server_dsn, name)


def _modules_in(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT name, options FROM drainpipe.modules").fetchall())


def test_sql_add_writes_numbered_migrations_that_continue(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "migrations"
    assert main(["sql", "add", "jobs", "idempotency", "--out", str(out)]) == 0
    first = sorted(p.name for p in out.iterdir())
    assert first == written_names(("jobs", "idempotency"))
    assert capsys.readouterr().out.split() == [str(out / name) for name in first]
    jobs_sql = (out / first[0]).read_text()
    # pgmq first: the extension where the server has it, else its SQL-only distribution
    assert jobs_sql.startswith("-- pgmq: the extension")
    assert "CREATE EXTENSION IF NOT EXISTS pgmq;" in jobs_sql
    assert jobs_sql.index("pgmq.meta") < jobs_sql.index("drainpipe.claim_jobs")
    idempotency_sql = next(out / n for n in first if "_drainpipe_idempotency_" in n).read_text()
    assert "drainpipe.begin_idempotent_v1" in idempotency_sql
    assert "CREATE EXTENSION" not in idempotency_sql
    # each file records itself, so verify and install() know it was applied
    assert "INSERT INTO drainpipe.schema_migrations" in idempotency_sql
    assert "CREATE EXTENSION" not in (out / first[-1]).read_text()
    # a second run adds only what the folder lacks; contract migrations only when asked
    assert main(["sql", "add", "jobs", "webhook-inbox", "--out", str(out)]) == 0
    added = sorted(p.name for p in out.iterdir())[len(first) :]
    assert added == written_names(("webhook-inbox",), start=len(first) + 1)
    # contract migrations only when asked
    assert main(["sql", "add", "jobs", "--contract", "--out", str(out)]) == 0
    contracts = [m.label for m in migrations("jobs") if m.contract]
    later = sorted(p.name for p in out.iterdir())[len(first) + len(added) :]
    assert [name.split("_drainpipe_jobs_")[1].removesuffix(".sql") for name in later] == contracts


def written_names(modules: tuple[str, ...], start: int = 1) -> list[str]:
    """The files ``sql add`` writes for ``modules`` (expand migrations only), numbered on."""
    labels = [
        f"drainpipe_{module.replace('-', '_')}_{migration.label}"
        for module in modules
        for migration in migrations(module)
        if not migration.contract
    ]
    return [f"{start + index:04d}_{label}.sql" for index, label in enumerate(labels)]


def test_sql_add_rest_api_writes_the_api_schema_that_applies_and_works(
    tmp_path: Path, empty_db_url: str, capsys: Any
) -> None:
    (tmp_path / "20990101120000_init.sql").write_text("select 1;")  # a Supabase folder
    args = ["sql", "add", "jobs", "rest-api", "--backend", "table", "--out", str(tmp_path)]
    assert main(args) == 0
    written = capsys.readouterr()
    names = sorted(p.name for p in tmp_path.iterdir())
    [api_file] = [name for name in names if name.endswith("_drainpipe_rest_api_0001_baseline.sql")]
    # Supabase-style timestamps that continue after the folder's last one
    assert all(re.fullmatch(r"209901011200\d\d_drainpipe_.*\.sql", name) for name in names[1:])
    # the step that follows is said where the user looks: the output and the file
    assert "rest-api: expose the drainpipe_api schema" in written.err
    assert "config.toml" in written.err and "Exposed schemas" in written.err
    api_sql = (tmp_path / api_file).read_text()
    assert 'schemas = ["public", "graphql_public", "drainpipe_api"]' in api_sql
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        for name in names[1:]:
            conn.execute((tmp_path / name).read_bytes())
        [(job_id,)] = conn.execute(
            "SELECT drainpipe_api.enqueue_v1('q', '{\"n\": 1}'::jsonb)"
        ).fetchall()
        [(claimed,)] = conn.execute("SELECT drainpipe_api.claim_v1('q', 30, 1)").fetchall()
        assert claimed[0][0] == job_id and claimed[0][4] == {"n": 1}
        [(record,)] = conn.execute("SELECT drainpipe_api.get_job_v1('q', %s)", (job_id,)).fetchall()
        assert (record["id"], record["state"], record["attempts"]) == (job_id, "leased", 1)
    assert (
        main(["sql", "verify", "--database-url", empty_db_url, "--modules", "jobs", "rest-api"])
        == 0
    )
    # a second add writes nothing: the folder has every migration
    assert main(args) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_sql_add_after_release_0s_single_file_writes_the_rest(tmp_path: Path) -> None:
    """A module's migration 0001 already written as one file: only the later ones follow."""
    (tmp_path / "0001_drainpipe_jobs.sql").write_text("-- the jobs baseline")
    assert main(["sql", "add", "jobs", "--out", str(tmp_path)]) == 0
    later = written_names(("jobs",))[1:]  # jobs' 0001 is that file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0001_drainpipe_jobs.sql", *later]


def test_sql_add_follows_supabase_timestamps(tmp_path: Path) -> None:
    (tmp_path / "20990101120000_init.sql").write_text("select 1;")
    names = migration_names(tmp_path, ["jobs", "webhook-inbox"])
    assert names == [
        "20990101120001_drainpipe_jobs.sql",
        "20990101120002_drainpipe_webhook_inbox.sql",
    ]
    assert migration_names(tmp_path / "none", ["jobs"]) == ["0001_drainpipe_jobs.sql"]
    stamped = migration_names(tmp_path.parent, ["jobs"], now=0)  # no timestamps there
    assert re.fullmatch(r"\d{4}_drainpipe_jobs\.sql", stamped[0])


def test_written_table_migrations_apply_and_work(tmp_path: Path, empty_db_url: str) -> None:
    assert main(["sql", "add", "jobs", "--backend", "table", "--out", str(tmp_path)]) == 0
    paths = sorted(tmp_path.iterdir())
    assert [path.name for path in paths] == written_names(("jobs",))
    assert "pgmq" not in paths[0].read_text().split("\n", 1)[0]
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        for path in paths:
            conn.execute(path.read_bytes())
    # applied by a migration tool: verify agrees, and install() has nothing left to do
    assert main(["sql", "verify", "--database-url", empty_db_url]) == 0
    assert asyncio.run(drainpipe.install(empty_db_url, ["jobs"], backend="table")) == []

    async def round_trip() -> int:
        jobs = drainpipe.Jobs(empty_db_url, {"emails": dict})
        try:
            job_id = await jobs.enqueue("emails", {"to": "a@x"})
            [job] = await jobs.claim("emails")
            assert await jobs.complete(job)
            return job_id if job.id == job_id else -1
        finally:
            await jobs.backend.db.close()  # type: ignore[attr-defined]

    assert asyncio.run(round_trip()) > 0


def test_sql_apply_installs_every_module_once(empty_db_url: str, capsys: Any) -> None:
    assert main(["sql", "verify", "--database-url", empty_db_url]) == 1
    pending = capsys.readouterr().out.splitlines()
    assert pending == [
        f"pending: {module} {migration.label}"
        for module in MODULES
        for migration in migrations(module)
        if not migration.contract
    ]
    assert main(["sql", "apply", "--database-url", empty_db_url, "--backend", "table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "applied: " + ", ".join(MODULES)
    assert lines[1:] == ["  " + line.removeprefix("pending: ") for line in pending]
    modules = _modules_in(empty_db_url)
    assert set(modules) == set(MODULES)
    assert modules["jobs"] == {"backend": "table", "scheduler": "drain"}
    assert main(["sql", "apply", "--database-url", empty_db_url, "--backend", "table"]) == 0
    assert capsys.readouterr().out.strip() == "up to date"
    assert main(["sql", "verify", "--database-url", empty_db_url]) == 0
    assert capsys.readouterr().out.strip() == "up to date (backend=table, scheduler=drain)"
    # checked against another backend, every jobs migration with a backend's part differs
    assert main(["sql", "verify", "--database-url", empty_db_url, "--backend", "pgmq"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"changed: jobs {migration.label}"
        for migration in migrations("jobs")
        if not migration.contract
        and any(part.name.endswith((".table.sql", ".pgmq.sql")) for part in migration.parts)
    ]


def test_sql_apply_reads_database_url_and_takes_modules(
    empty_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", empty_db_url)
    assert main(["sql", "apply", "--modules", "idempotency"]) == 0
    assert set(_modules_in(empty_db_url)) == {"idempotency"}


def test_usage_errors(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["sql", "apply"]) == 2
    assert "DATABASE_URL" in capsys.readouterr().err
    assert main(["sql", "verify"]) == 2
    assert "DATABASE_URL" in capsys.readouterr().err
    for argv in (
        ["sql", "add", "nope"],
        ["sql", "verify", "--modules", "nope"],
        ["sql"],
        [],
        ["dev", "--every", "0"],
        ["dev", "--port", "x"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2, argv


def test_sql_apply_reports_an_unreachable_database(capsys: Any) -> None:
    url = "postgresql://postgres@127.0.0.1:1/nowhere?connect_timeout=1"
    assert main(["sql", "apply", "--database-url", url, "--modules", "jobs"]) == 1
    assert capsys.readouterr().err.startswith("drainpipe: ")
    assert main(["sql", "verify", "--database-url", url]) == 1
    assert capsys.readouterr().err.startswith("drainpipe: ")


def _apply_file(url: str, path: Path) -> None:
    """Apply one migration file the way a migration tool does: psql stopping at the first
    error (psycopg running the whole script when psql is not installed)."""
    psql = shutil.which("psql")
    if psql is None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(path.read_bytes())
        return
    result = subprocess.run(  # noqa: S603 - psql on our own files
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"{path.name}: {result.stderr}"


@pytest.mark.parametrize("backend", ["pgmq", "table"])
def test_every_written_migration_applies_on_an_empty_database_in_order(
    tmp_path: Path, empty_db_url: str, backend: str
) -> None:
    # `CREATE EXTENSION pgmq` alone fails on a Postgres without the extension installed
    args = ["sql", "add", "jobs", "idempotency", "webhook-inbox", "--backend", backend]
    assert main([*args, "--out", str(tmp_path)]) == 0
    paths = sorted(tmp_path.iterdir())
    assert [path.name for path in paths] == written_names(("jobs", "idempotency", "webhook-inbox"))
    for _ in range(2):  # a migration run again (a reset branch, a copied file) still applies
        for path in paths:
            _apply_file(empty_db_url, path)

    async def use_every_module() -> None:
        jobs = drainpipe.Jobs(empty_db_url, {"emails": dict})
        idem = drainpipe.Idempotency(empty_db_url)
        inbox = drainpipe.WebhookInbox(empty_db_url, source="cli")
        try:
            job_id = await jobs.enqueue("emails", {"to": "a@x"})
            [job] = await jobs.claim("emails")
            assert job.id == job_id and await jobs.complete(job)
            assert (await idem.begin("k", "fp")).state == "started"
            assert (await inbox.store(id="m1", payload={}, type="t")).duplicate is False
        finally:
            await jobs.backend.db.close()  # type: ignore[attr-defined]
            await idem.db.close()
            await inbox.close()

    asyncio.run(use_every_module())
