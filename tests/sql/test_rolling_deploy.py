"""A rolling deploy after the baseline: the running release keeps working while the next
release's migrations are applied, until their contract step.

The running release is this tree, code and SQL (the baselines). The next release is the
same SQL plus two jobs migrations written by the test, as a change after the baseline is
written (docs/sql.md): an expand step that adds ``job_queue_stats_v5`` (a copy of v4, the
version this tree's ``Jobs.stats`` calls) and a contract step that drops v4. The deploy
applies them through the CLI, as a release pipeline does, while this tree's code goes on
running against the same database, as on Vercel while a deploy rolls out.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

import drainpipe
from drainpipe import sqlmodules
from drainpipe.cli import main
from drainpipe.errors import DrainpipeError
from tests.conftest import clone_database, drop_database, with_database

STATS_V4 = "drainpipe.job_queue_stats_v4(text[])"


@pytest.fixture
def empty_db(server_dsn: str) -> Iterator[str]:
    name = clone_database(server_dsn, "template0")
    yield with_database(server_dsn, name)
    drop_database(server_dsn, name)


@contextmanager
def release(folder: Path | None) -> Iterator[None]:
    """The SQL of another release (``folder``), or this tree's (``None``), for the block."""
    patch = pytest.MonkeyPatch()
    if folder is not None:
        patch.setattr(sqlmodules, "sql_dir", lambda: folder)
    sqlmodules.migrations.cache_clear()
    try:
        yield
    finally:
        patch.undo()
        sqlmodules.migrations.cache_clear()


def next_release(tmp_path: Path, stats_v4: str) -> tuple[Path, str, str]:
    """This tree's SQL plus an expand migration (stats v5) and its contract (v4 dropped):
    the folder and the two migrations' labels."""
    folder = tmp_path / "sql"
    shutil.copytree(sqlmodules.sql_dir(), folder)
    jobs = folder / "migrations" / "jobs"
    following = len(sqlmodules.migrations("jobs")) + 1
    stats_v5 = stats_v4.replace("drainpipe.job_queue_stats_v4(", "drainpipe.job_queue_stats_v5(")
    expand, contract = f"{following:04d}_stats_v5", f"{following + 1:04d}_contract_drop_stats_v4"
    (jobs / f"{expand}.sql").write_text(stats_v5 + ";\n", encoding="utf-8")
    (jobs / f"{contract}.sql").write_text(
        f"DROP FUNCTION IF EXISTS {STATS_V4};\n", encoding="utf-8"
    )
    return folder, expand, contract


async def running_release(url: str, backend: Any) -> dict[str, Any]:
    """What this tree's code does while the deploy rolls: its install, and its jobs."""
    installed = await drainpipe.install(url, sqlmodules.MODULES, backend=backend)
    result: dict[str, Any] = {"install": installed}
    async with drainpipe.Jobs(url, {"emails": dict}) as jobs:
        await jobs.enqueue("emails", {"n": "during"})
        claimed = await jobs.claim("emails", batch=10)
        result["claimed"] = sorted(job.payload["n"] for job in claimed)
        result["completed"] = [await jobs.complete(job) for job in claimed]
        try:
            result["ready"] = (await jobs.stats(["emails"]))["emails"].ready
        except DrainpipeError as error:  # the driver says what is missing
            result["ready"] = "missing" if "job_queue_stats_v4" in str(error) else str(error)
    return result


def stats_v5(url: str) -> Any:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT ready FROM drainpipe.job_queue_stats_v5(ARRAY['emails'])")
        return row.fetchone()


@pytest.mark.parametrize("backend", ["pgmq", "table"])
def test_the_running_release_keeps_working_until_the_contract_step(
    empty_db: str, backend: str, tmp_path: Path, capsys: Any
) -> None:
    url = empty_db
    assert main(["sql", "apply", "--database-url", url, "--backend", backend]) == 0
    asyncio.run(_enqueue(url, "before"))
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", (STATS_V4,)).fetchone()
        assert row is not None
    folder, expand, contract = next_release(tmp_path, row[0].rstrip("\n"))
    capsys.readouterr()

    with release(folder):
        # the deploy step: verify says what is pending; apply runs the expand step only
        verify = ["sql", "verify", "--database-url", url]
        assert main(verify) == 1
        out = capsys.readouterr().out
        assert f"pending: jobs {expand}" in out and "contract" not in out
        assert main(["sql", "apply", "--database-url", url, "--backend", backend]) == 0
        assert f"jobs {expand}" in capsys.readouterr().out
        assert main(verify) == 0
        assert main([*verify, "--contract"]) == 1
        assert f"pending: jobs {contract}" in capsys.readouterr().out

    during = asyncio.run(running_release(url, backend))
    # its install knows only the baselines, finds them applied and re-applies nothing
    assert during["install"] == []
    assert during["claimed"] == ["before", "during"] and during["completed"] == [True, True]
    assert during["ready"] == 0  # v4, which it calls, is still there
    assert stats_v5(url) == (0,)  # and the next release's v5 too

    with release(folder):
        # once no code of the running release is left: the contract step
        assert (
            main(["sql", "apply", "--database-url", url, "--backend", backend, "--contract"]) == 0
        )
        assert main(["sql", "verify", "--database-url", url, "--contract"]) == 0
        capsys.readouterr()

    after = asyncio.run(running_release(url, backend))
    # what the contract step dropped is what the running release called: hence the wait
    assert after["install"] == [] and after["completed"] == [True]
    assert after["ready"] == "missing"
    assert stats_v5(url) == (0,)


async def _enqueue(url: str, marker: str) -> None:
    async with drainpipe.Jobs(url, {"emails": dict}) as jobs:
        await jobs.enqueue("emails", {"n": marker})


def test_the_release_helper_restores_this_trees_sql(tmp_path: Path) -> None:
    own = sqlmodules.sql_dir()
    with release(tmp_path):
        assert sqlmodules.sql_dir() == tmp_path
    assert sqlmodules.sql_dir() == own
    assert sqlmodules.migrations("jobs")[0].parts[0].is_relative_to(own)
