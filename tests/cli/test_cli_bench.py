"""``drainpipe bench`` on a real server: a tiny run per storage prints its table and leaves
no database behind; a database holding drainpipe's tables is refused unless ``--force``;
bad values are one line with a code and exit status 2."""

from __future__ import annotations

import argparse
import asyncio
import io
import re
from typing import Any

import psycopg
import pytest

from drainpipe import sqlmodules
from drainpipe.cli import bench as cli_bench
from drainpipe.cli import main

TINY = ["--jobs", "200", "--workers", "2", "--latency-jobs", "10", "--poll-interval", "0.02"]


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = main(["bench", *argv])
    out, err = capsys.readouterr()
    return status, out, err


def _made(err: str) -> str:
    match = re.search(r"made database (drainpipe_bench_[0-9a-f]+)", err)
    assert match, err
    return match.group(1)


def _exists(server_dsn: str, name: str) -> bool:
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        row = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None


@pytest.mark.parametrize(("backend", "held"), [("pgmq", False), ("table", True)])
def test_a_tiny_run_prints_every_phase_and_drops_its_database(
    capsys: Any, server_dsn: str, backend: str, held: bool
) -> None:
    hold = ["--hold-snapshot"] if held else []
    status, out, err = _run(
        capsys, "--database-url", server_dsn, "--backend", backend, *TINY, *hold
    )
    assert status == 0, err
    lines = out.splitlines()
    suffix = ", snapshot held" if held else ""
    assert lines[0] == f"backend {backend}, 200 jobs, 2 workers, batch 100{suffix}"
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in lines[3:]}
    assert list(rows) == ["enqueue (batch 100)", "enqueue (single)", "processing", "latency (50/s)"]
    jobs = {name: int(cells[0].replace(",", "")) for name, cells in rows.items()}
    # processing drains both enqueue phases' jobs: none lost, none run twice
    assert jobs == {
        "enqueue (batch 100)": 200,
        "enqueue (single)": 200,
        "processing": 400,
        "latency (50/s)": 10,
    }
    for name, (_, rate, p50, p99, cpu) in rows.items():
        assert float(rate.replace(",", "")) > 0 and float(cpu.rstrip(" |").replace(",", "")) > 0
        if name != "processing":
            assert 0 < float(p50) <= float(p99), name
    assert "[##############################] 400/400" in err  # the progress bar ran to the end
    assert not _exists(server_dsn, _made(err))


def test_a_database_with_drainpipe_is_refused_unless_forced(
    capsys: Any, server_dsn: str, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, out, err = _run(capsys, "--database-url", db_url, *TINY)
    assert (status, out) == (1, "")
    assert err.startswith("drainpipe: conflict DATABASE_HOLDS_DRAINPIPE: ") and err.count("\n") == 1

    # told, it goes on in a database of its own, dropped even when the run fails
    async def broken(*args: Any, **kwargs: Any) -> list[str]:
        raise RuntimeError("the install blew up")

    monkeypatch.setattr(sqlmodules, "install", broken)
    status, out, err = _run(capsys, "--database-url", db_url, "--force", *TINY)
    assert (status, out) == (1, "") and "RuntimeError: the install blew up" in err
    assert not _exists(server_dsn, _made(err))


async def test_an_interrupted_run_drops_its_database(server_dsn: str) -> None:
    """Ctrl-C under ``asyncio.run`` cancels the run's task: the drop still happens."""
    parser = argparse.ArgumentParser()
    cli_bench.add_bench_arguments(parser)
    opts = cli_bench.options(parser.parse_args(["--jobs", "100000", "--hold-snapshot"]), server_dsn)
    out = io.StringIO()
    run = asyncio.ensure_future(cli_bench.bench(opts, out))
    while "enqueue (batch 100)" not in out.getvalue():
        assert not run.done(), out.getvalue()
        await asyncio.sleep(0.02)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    lines = out.getvalue().replace("\r", "\n").splitlines()
    assert lines[-1].startswith("drainpipe bench: dropped database"), lines[-3:]
    assert not _exists(server_dsn, _made(out.getvalue()))


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--jobs", "0"], "--jobs"),
        (["--jobs", "ten"], "--jobs"),
        (["--workers", "1000"], "--workers"),
        (["--batch", "-1"], "--batch"),
        (["--latency-jobs", "1.5"], "--latency-jobs"),
        (["--rate", "0"], "--rate"),
        (["--rate", "nan"], "--rate"),
        (["--poll-interval", "inf"], "--poll-interval"),
        (["--backend", "redis"], "--backend"),
    ],
)
def test_bad_values_are_one_line_with_a_code(
    capsys: Any, server_dsn: str, argv: list[str], named: str
) -> None:
    status, out, err = _run(capsys, "--database-url", server_dsn, *argv)
    assert (status, out) == (2, "")
    assert err.startswith(f"drainpipe: invalid_request INVALID_OPTION: {named} "), err
    assert err.count("\n") == 1


def test_no_database_url_is_a_usage_error(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert _run(capsys) == (2, "", "drainpipe: pass --database-url or set DATABASE_URL\n")
