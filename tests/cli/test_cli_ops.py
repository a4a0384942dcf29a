"""`drainpipe --version`, `jobs stats|dead|retry`, `inbox list` and the CLI's failures,
against real databases."""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import psycopg
import pytest

from drainpipe import Jobs, WebhookInbox
from drainpipe.cli import build_parser, main
from drainpipe.errors import INSTALL_HINT
from tests.conftest import drop_database, with_database

QUEUES = {"emails": dict[str, Any], "reports": dict[str, Any]}


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


async def _fill(url: str) -> list[int]:
    """Two ready emails, one delayed report and two dead reports; the dead ids."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    try:
        jobs = Jobs(conn, QUEUES)
        await jobs.enqueue("emails", {"to": "a@x"})
        await jobs.enqueue("emails", {"to": "b@x"})
        await jobs.enqueue("reports", {"n": 0}, delay=3600)
        for n in (1, 2):
            await jobs.enqueue("reports", {"n": n}, max_attempts=1)
        dead = []
        for job in await jobs.claim("reports", batch=2):
            assert await jobs.fail(job, f"report {job.payload['n']} broke\nsecond line") == "dead"
            dead.append(job.id)
        return dead
    finally:
        await conn.close()


def test_version_comes_from_the_package_metadata(capsys: Any) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"drainpipe {version('drainpipe')}"


def test_every_option_of_every_command_has_help() -> None:
    missing = []

    def visit(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    visit(sub, f"{path} {name}")
            elif not action.help:
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")

    visit(build_parser(), "drainpipe")
    assert missing == []


def test_jobs_stats_lists_every_queue_in_the_database(
    jobs_db_url: str, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_fill(jobs_db_url))
    monkeypatch.setenv("DATABASE_URL", jobs_db_url)  # the default for --database-url
    status, out, err = run_cli(capsys, "jobs", "stats", "--json")
    assert (status, err) == (0, "")
    stats = json.loads(out)
    assert list(stats) == ["emails", "reports"]
    assert {k: stats["emails"][k] for k in ("ready", "in_flight", "delayed", "dead")} == {
        "ready": 2,
        "in_flight": 0,
        "delayed": 0,
        "dead": 0,
    }
    assert stats["reports"]["delayed"] == 1 and stats["reports"]["dead"] == 2
    assert stats["emails"]["oldest_age_seconds"] >= 0

    status, out, _ = run_cli(capsys, "jobs", "stats")
    header, emails, reports = out.splitlines()
    assert header.split() == ["QUEUE", "READY", "IN_FLIGHT", "DELAYED", "DEAD", "OLDEST_AGE"]
    assert emails.split()[:5] == ["emails", "2", "0", "0", "0"]
    assert reports.split()[:5] == ["reports", "0", "0", "1", "2"]
    # aligned: numbers end where their header ends, on every line
    for column, values in (("READY", ("2", "0")), ("DEAD", ("0", "2"))):
        end = header.index(column) + len(column)
        for line, value in zip((emails, reports), values, strict=True):
            assert line[end - 1] == value and line[end : end + 1] in ("", " "), (line, column)

    status, out, _ = run_cli(capsys, "jobs", "stats", "--queue", "reports", "--json")
    assert list(json.loads(out)) == ["reports"]


def test_jobs_stats_on_an_empty_queue_table_and_without_the_sql(
    fresh_database: Any, server_dsn: str, capsys: Any
) -> None:
    url = fresh_database("table")
    assert run_cli(capsys, "jobs", "stats", "--database-url", url) == (0, "no queues\n", "")
    name = "t_cli_bare_" + uuid.uuid4().hex[:8]
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        status, out, err = run_cli(
            capsys, "jobs", "stats", "--database-url", with_database(server_dsn, name)
        )
    finally:
        drop_database(server_dsn, name)
    assert (status, out) == (1, "")
    assert err == (
        "drainpipe: unexpected NOT_INSTALLED: drainpipe's jobs SQL is not installed"
        f" in this database ({INSTALL_HINT})\n"
    )


def test_jobs_dead_then_retry_puts_them_back(jobs_db_url: str, capsys: Any) -> None:
    dead_ids = asyncio.run(_fill(jobs_db_url))
    db = ("--database-url", jobs_db_url)
    status, out, _ = run_cli(capsys, "jobs", "dead", "reports", "--json", *db)
    listed = json.loads(out)
    assert status == 0 and [d["id"] for d in listed] == sorted(dead_ids, reverse=True)
    assert listed[0]["last_error"].startswith("report ") and listed[0]["attempts"] == 1
    assert "payload" not in listed[0] and "context" not in listed[0]  # only with --payload
    status, out, _ = run_cli(capsys, "jobs", "dead", "reports", "--json", "--payload", *db)
    assert {d["payload"]["n"] for d in json.loads(out)} == {1, 2}

    # a page: older than the newest one
    status, out, _ = run_cli(
        capsys, "jobs", "dead", "reports", "--json", "--before", str(max(dead_ids)), *db
    )
    assert [d["id"] for d in json.loads(out)] == [min(dead_ids)]

    status, out, _ = run_cli(capsys, "jobs", "dead", "reports", *db)
    header, *rows = out.splitlines()
    assert header.split() == ["ID", "ATTEMPTS", "ENQUEUED_AT", "DIED_AT", "LAST_ERROR"]
    assert len(rows) == 2 and rows[0].split()[:2] == [str(max(dead_ids)), "1/1"]
    assert rows[0].endswith("broke")  # the error's first line only
    assert run_cli(capsys, "jobs", "dead", "emails", *db) == (0, "no dead letters in emails\n", "")

    # an id that is not one of the queue's dead letters is skipped
    # an id that is not one of the queue's dead letters is skipped, and says why
    args = ("jobs", "retry", "emails", "--id", str(min(dead_ids)), "--json", *db)
    skipped = json.loads(run_cli(capsys, *args)[1])
    assert (skipped["queue"], skipped["retried"], list(skipped["refused"])) == (
        "emails",
        0,
        [str(min(dead_ids))],
    )
    status, out, _ = run_cli(
        capsys, "jobs", "retry", "reports", "--id", str(min(dead_ids)), "--json", *db
    )
    assert (status, json.loads(out)) == (0, {"queue": "reports", "retried": 1, "refused": {}})
    status, out, _ = run_cli(capsys, "jobs", "stats", "--queue", "reports", "--json", *db)
    assert json.loads(out)["reports"]["dead"] == 1 and json.loads(out)["reports"]["ready"] == 1
    assert run_cli(capsys, "jobs", "retry", "reports", *db) == (
        0,
        "retried 1 dead letter of reports\n",
        "",
    )
    assert json.loads(run_cli(capsys, "jobs", "dead", "reports", "--json", *db)[1]) == []


def test_inbox_list_shows_one_tenant_at_a_time(db_url: str, capsys: Any) -> None:
    async def store() -> None:
        conn = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
        try:
            inbox = WebhookInbox(conn, source="stripe")
            await inbox.store(id="evt_1", payload={"a": 1}, type="invoice.paid", tenant=None)
            await inbox.store(id="evt_2", payload={"a": 2}, type="invoice.paid", tenant="acme")
            await inbox.store(id="evt_3", payload={"a": 3}, type=None, tenant="acme")
            await WebhookInbox(conn, source="github").store(id="gh_1", payload={}, tenant=None)
        finally:
            await conn.close()

    asyncio.run(store())
    db = ("--database-url", db_url)
    status, out, _ = run_cli(capsys, "inbox", "list", "stripe", "--json", *db)
    [untenanted] = json.loads(out)
    assert status == 0 and untenanted["message_id"] == "evt_1" and untenanted["tenant"] is None
    assert untenanted["status"] == "pending" and "T" in untenanted["received_at"]

    status, out, _ = run_cli(capsys, "inbox", "list", "stripe", "--tenant", "acme", *db)
    header, *rows = out.splitlines()
    assert header.split() == [
        "ID",
        "MESSAGE_ID",
        "TYPE",
        "STATUS",
        "ATTEMPTS",
        "RECEIVED_AT",
        "LAST_ERROR",
    ]
    assert [row.split()[1] for row in rows] == ["evt_3", "evt_2"]  # newest first
    assert header.index("STATUS") == rows[0].index("pending") == rows[1].index("pending")

    args = ("inbox", "list", "stripe", "--tenant", "acme", "--limit", "1", "--json", *db)
    assert [e["message_id"] for e in json.loads(run_cli(capsys, *args)[1])] == ["evt_3"]
    args = ("inbox", "list", "stripe", "--status", "dead", *db)
    assert run_cli(capsys, *args) == (0, "no messages from stripe\n", "")


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "dead", "Not-A-Queue"],
        ["jobs", "dead", "emails", "--limit", "0"],
        ["jobs", "retry", "emails", "--id", "x"],
        ["jobs", "stats", "--timeout", "0"],
        ["inbox", "list", "stripe", "--status", "lost"],
        ["inbox", "list"],
        ["inbox", "list", "stripe", "--tenant", ""],
        ["jobs"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: Any) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_no_database_url_is_a_usage_error(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert run_cli(capsys, "jobs", "stats") == (
        2,
        "",
        "drainpipe: pass --database-url or set DATABASE_URL\n",
    )


def test_failures_are_one_line_on_stderr_with_kind_and_code(server_dsn: str, capsys: Any) -> None:
    name = "dp_nowhere_" + uuid.uuid4().hex[:8]
    url = with_database(server_dsn, name)
    started = time.monotonic()
    status, out, err = run_cli(capsys, "inbox", "list", "stripe", "--database-url", url)
    assert time.monotonic() - started < 3
    assert (status, out) == (1, "")
    assert err.startswith("drainpipe: network DATABASE_NOT_FOUND: ")
    assert f'database "{name}" does not exist' in err and err.count("\n") == 1

    status, _, err = run_cli(capsys, "jobs", "stats", "--database-url", "not a url")
    assert status == 1 and err.startswith("drainpipe: network INVALID_DSN: invalid database URL")


def test_the_console_script_never_shows_a_traceback(server_dsn: str) -> None:
    url = with_database(server_dsn, "dp_nowhere_" + uuid.uuid4().hex[:8])
    result = subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "drainpipe.cli", "jobs", "dead", "emails", "--database-url", url],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("drainpipe: network DATABASE_NOT_FOUND")
    assert "Traceback" not in result.stderr


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP server on 127.0.0.1 (its own thread and loop: the CLI runs asyncio.run) that
    accepts connections and never answers."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}
    writers: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)

    async def start() -> None:
        holder["server"] = await asyncio.start_server(accept, "127.0.0.1", 0)
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop)
    assert ready.wait(5)
    server = holder["server"]
    yield server.sockets[0].getsockname()[1]

    async def stop() -> None:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_sql_apply_gives_up_on_a_server_that_never_answers(silent_port: int, capsys: Any) -> None:
    url = f"postgresql://postgres@127.0.0.1:{silent_port}/postgres"
    started = time.monotonic()
    status, out, err = run_cli(capsys, "sql", "apply", "--database-url", url, "--timeout", "2")
    elapsed = time.monotonic() - started
    assert (status, out) == (1, "")
    assert err == "drainpipe: network CONNECT_TIMEOUT: connection timeout expired\n"
    assert 1.5 < elapsed < 3


def test_sql_apply_statements_obey_the_timeout(db_url: str, capsys: Any) -> None:
    """A lock held elsewhere: the apply waits at most --timeout, then says why."""
    with psycopg.connect(db_url, autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE drainpipe.schema_migrations IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        status, _, err = run_cli(
            capsys, "sql", "apply", "--database-url", db_url, "--timeout", "1", "--modules", "jobs"
        )
        elapsed = time.monotonic() - started
        holder.execute("ROLLBACK")
    assert status == 1 and elapsed < 3
    assert err == (
        "drainpipe: timeout: canceling statement due to statement timeout (--timeout 1 s)\n"
    )
